"""Tool-name normalization, shared by the timeline and the evaluators.

A name is trimmed and case-folded, stripped of a configured prefix (``policy.tool_prefix``:
MCP servers' tools reach the model as ``billing__issue_refund`` or
``mcp__billing__issue_refund``), then mapped through configured aliases (keys are normalized
too). Names may arrive as strings or as ``{"name": ...}`` /
``{"function": {"name": ...}}`` / ``{"function": "..."}`` shapes.

Agent names are compared trimmed and case-folded too, but reported as configured
(``Spellings``): ``Refund-Bot`` is the agent the policy names ``refund-bot``, in the ``agent``
label and in the findings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Final

__all__ = ["NameNormalizer", "Spellings", "extract_name", "fold", "namespaced", "strip_prefix"]


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

#: What a namespace puts between itself and a tool's own name: MCP clients name a server's
#: tool ``billing__issue_refund`` or ``mcp__billing__issue_refund``, others ``billing.x``,
#: ``billing/x`` or ``billing:x``. A single ``_`` or ``-`` is not one: it joins the words of
#: one name (``undo_issue_refund`` is not ``issue_refund`` in a namespace).
_NAMESPACE_SEPARATORS: Final = ("__", ".", "/", ":")


def namespaced(name: str, tools: Collection[str]) -> str | None:
    """The tool of ``tools`` (normalized names) that ``name`` (normalized, not one of them)
    is in a namespace: ``name`` ends in it after a namespace separator. ``None`` if none."""
    if name in tools:
        return None
    for tool in tools:
        if tool and name.endswith(tool):
            head = name[: len(name) - len(tool)]
            if head.endswith(_NAMESPACE_SEPARATORS) and head.strip("_./:"):
                return tool
    return None


def strip_prefix(pattern: re.Pattern[str] | None, folded: str) -> str:
    """``folded`` without what ``pattern`` matches at its start, again until it matches no
    more (so that a name normalized twice, as the timeline and then an evaluator do, stays
    the same), unless that would leave nothing. Names longer than
    ``_MAX_REMEMBERED_LENGTH`` are left as they are: a tool's name is at most 64 characters
    in the model APIs, and a pattern that backtracks must not be handed a producer's
    megabyte."""
    if pattern is None or len(folded) > _MAX_REMEMBERED_LENGTH:
        return folded
    while True:  # each pass removes at least one character
        match = pattern.match(folded)
        if match is None or match.end() == 0 or match.end() >= len(folded):
            return folded
        rest = folded[match.end() :].strip()
        if not rest:
            return folded
        folded = rest


class NameNormalizer:
    """Normalizes tool names: fold, strip the configured prefix, then map aliases. Its
    aliases and prefix never change; it remembers up to ``_MAX_REMEMBERED`` names it
    normalized (each call is normalized several times on its way through the timeline and
    the evaluators, and a run has few distinct tools). ``worked_out``, when given, is called
    with each normalization not answered from memory (once per name, until the memory is
    full): the server's own normalizer tells it which names it sees (``namespaced``).

    Thread-safe: remembering is one dict read and one dict write, and what is written is the
    name's normalization, which never changes."""

    __slots__ = ("_aliases", "_known", "_prefix", "_worked_out")

    def __init__(
        self,
        aliases: Mapping[str, str] | None = None,
        prefix: re.Pattern[str] | None = None,
        worked_out: Callable[[str], None] | None = None,
    ) -> None:
        self._prefix = prefix
        self._worked_out = worked_out
        strip = self._strip
        self._aliases = {strip(fold(k)): strip(fold(v)) for k, v in (aliases or {}).items()}
        self._known: dict[str, str] = {}

    def _strip(self, folded: str) -> str:
        return strip_prefix(self._prefix, folded)

    def __call__(self, value: Any) -> str:
        return self.name(value)

    def name(self, value: Any) -> str:
        """``value`` normalized: ``__call__`` as a named method, which compiled callers call
        directly, not through the interpreter's call slot."""
        if isinstance(value, str):
            known = self._known.get(value)
            if known is not None:
                return known
        name = extract_name(value)
        folded = self._strip(fold(name)) if name is not None else ""
        normalized = self._aliases.get(folded, folded)
        if (
            isinstance(value, str)
            and len(value) <= _MAX_REMEMBERED_LENGTH
            and len(self._known) < _MAX_REMEMBERED
        ):
            self._known[value] = normalized
        if self._worked_out is not None:
            self._worked_out(normalized)
        return normalized


class Spellings:
    """The configured spelling of names compared trimmed and case-folded (agents: a run of
    ``Refund-Bot`` is one of the agent the policy names ``refund-bot``).

    A configured name is its own spelling; another name that folds to configured ones is
    spelled as the first of them in sorted order, and keeps that spelling when names are
    added (``know``: a reload), so a name once reported one way stays so. Any other name is
    its own. Not thread-safe: ``know`` from the thread that calls it.
    """

    __slots__ = ("_known", "_spelled")

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._known: frozenset[str] = frozenset()
        self._spelled: dict[str, str] = {}
        self.know(names)

    def know(self, names: Iterable[str]) -> None:
        """Configured ``names`` added: each spells itself and the names folding to it."""
        self._known |= frozenset(names)
        for name in sorted(self._known):
            self._spelled.setdefault(fold(name), name)

    def get(self, name: str) -> str | None:
        """The configured spelling of ``name``, ``None`` if no configured name is it."""
        if name in self._known:
            return name
        return self._spelled.get(fold(name))

    def __call__(self, name: str) -> str:
        """``name`` as configured, else as it is."""
        spelled = self.get(name)
        return name if spelled is None else spelled
