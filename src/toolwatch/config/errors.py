"""How configuration errors are raised and name where the failing value came from: the file,
``defaults``, or the flag or environment variable of an override.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """Invalid configuration. The message names the source, the field path and the reason."""


def _source(path: Path | None) -> str:
    """How errors name where a configuration came from."""
    return str(path) if path else "defaults"


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> str:
    return f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})"


#: Where an override came from when ``origins`` does not say.
_OVERRIDDEN = "command line/environment"


def _origin(
    where: str,
    source: str,
    overrides: dict[str, Any],
    origins: dict[str, str],
    missing: bool = False,
) -> str:
    """Where the failing value came from: an override (its flag or variable, as ``origins``
    names it) set it or a field around it; or a section-level check failed on a section
    overrides set fields of, beside the file's; or a field is ``missing`` from a section an
    override set a field of (``TOOLWATCH_TLS_CERT`` without a key)."""
    for key in overrides:
        if where == key or where.startswith(key + "."):
            return origins.get(key, _OVERRIDDEN)
    section = where.rpartition(".")[0] if missing else where
    inside = [origins.get(key, _OVERRIDDEN) for key in overrides if key.startswith(section + ".")]
    if inside:
        return " and ".join((source, *dict.fromkeys(inside)))
    return source
