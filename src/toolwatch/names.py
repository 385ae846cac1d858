"""Tool-name normalization, shared by the timeline and the evaluators.

A name is trimmed and case-folded, then mapped through configured aliases (keys are
normalized too). Names may arrive as strings or as ``{"name": ...}`` /
``{"function": {"name": ...}}`` / ``{"function": "..."}`` shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


class NameNormalizer:
    """Normalizes tool names: fold, then map aliases. Immutable after construction."""

    __slots__ = ("_aliases",)

    def __init__(self, aliases: Mapping[str, str] | None = None) -> None:
        self._aliases = {fold(k): fold(v) for k, v in (aliases or {}).items()}

    def __call__(self, value: Any) -> str:
        name = extract_name(value)
        folded = fold(name) if name is not None else ""
        return self._aliases.get(folded, folded)
