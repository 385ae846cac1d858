"""Tool-name normalization, shared by the timeline and the evaluators.

A name is trimmed and case-folded, then mapped through configured aliases (keys are
normalized too). Names may arrive as strings or as ``{"name": ...}`` /
``{"function": {"name": ...}}`` / ``{"function": "..."}`` shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["NameNormalizer", "extract_name", "fold"]


def fold(name: str) -> str:
    """Trim and case-fold a tool name."""
    return name.strip().casefold()


def extract_name(value: Any) -> str | None:
    """The tool name carried by ``value``: a string, ``{"name": ...}`` or
    ``{"function": {"name": ...}}`` / ``{"function": "..."}``. ``None`` if there is none."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        name = value.get("name")
        if isinstance(name, str):
            return name
        return extract_name(value.get("function"))
    return None


#: Bounds on the names one normalizer remembers, so that a producer inventing names (or
#: sending long ones) cannot grow it: at most this many, each at most this long.
_MAX_REMEMBERED: Final = 4096
_MAX_REMEMBERED_LENGTH: Final = 256


class NameNormalizer:
    """Normalizes tool names: fold, then map aliases. Its aliases never change; it remembers
    up to ``_MAX_REMEMBERED`` names it normalized (each call is normalized several times on
    its way through the timeline and the evaluators, and a run has few distinct tools).

    Thread-safe: remembering is one dict read and one dict write, and what is written is the
    name's normalization, which never changes."""

    __slots__ = ("_aliases", "_known")

    def __init__(self, aliases: Mapping[str, str] | None = None) -> None:
        self._aliases = {fold(k): fold(v) for k, v in (aliases or {}).items()}
        self._known: dict[str, str] = {}

    def __call__(self, value: Any) -> str:
        if isinstance(value, str):
            known = self._known.get(value)
            if known is not None:
                return known
        name = extract_name(value)
        folded = fold(name) if name is not None else ""
        normalized = self._aliases.get(folded, folded)
        if (
            isinstance(value, str)
            and len(value) <= _MAX_REMEMBERED_LENGTH
            and len(self._known) < _MAX_REMEMBERED
        ):
            self._known[value] = normalized
        return normalized
