"""Label limits: the bounded sets every Prometheus label value comes from.

``LabelLimiter`` bounds the values of one label (configured names always kept, other values
admitted up to a cap, then ``_other``); ``PairLimiter`` bounds the (agent, tool) pairs of the
per-call series, so a family grows with the caps, not with their product. ``PrometheusMetrics``
(``sinks.prometheus``) passes every label value through them, and ``OthersCollector``
(``sinks.scrape_state``) reads how many values each reported as ``_other``. Compiled, as
``sinks.prometheus`` is: they run on every call the metrics count.

Threading: called from the event loop only, as the metrics are.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from toolwatch.names import Spellings

__all__ = ["OTHER", "LabelLimiter", "PairLimiter"]

# The metrics' warnings, under the name they have always been logged with.
_log = logging.getLogger("toolwatch.sinks.prometheus")

#: The label value that stands for every value past a label's cap.
OTHER: Final = "_other"

#: Values longer than this are free text, not names: they always map to ``_other``.
_MAX_LABEL_VALUE_LENGTH: Final = 128


def _utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class LabelLimiter:
    """Bounds the values one label can take.

    Configured (``known``) values and the empty string (the label does not apply) always
    pass. Any other value is admitted the first time it is seen while fewer than ``cap``
    such values have been admitted; after that, and for values longer than 128 characters or
    not encodable as UTF-8, the result is ``_other``. So a label never has more than
    ``len(known) + cap + 2`` distinct values, whatever the input. Not thread-safe: call it
    from the event loop.
    """

    __slots__ = ("_admitted", "_cap", "_known", "_name", "_spellings", "others")

    def __init__(
        self, known: Iterable[str] = (), cap: int = 100, name: str = "", folded: bool = False
    ) -> None:
        if cap < 0:
            raise ValueError(f"label cap must be >= 0, got {cap}")
        self._known = frozenset(known) | {""}
        self._admitted: set[str] = set()
        self._cap = cap
        self._name = name  # named: the first value reported as _other is logged
        # folded: a value that is a known one trimmed and case-folded reports as the known
        # spelling (the policy names agents so: "Refund-Bot" is the agent refund-bot), as
        # the findings name it (``Spellings``, the engine's too).
        self._spellings = Spellings(self._known) if folded else None
        self.others = 0  # values reported as _other so far (each time)

    def __call__(self, value: str | None) -> str:
        """The label value to report for ``value`` (``None`` reports as ``""``)."""
        return self.label(value)

    def label(self, value: str | None) -> str:
        """``__call__``, as a named method: compiled callers call it directly, not through
        the interpreter's call slot (``PairLimiter.tool_label``)."""
        if value is None or value in self._known:
            return value or ""
        if self._spellings is not None:  # before the admitted: a reload may name one
            spelled = self._spellings.get(value)
            if spelled is not None:
                return spelled
        if value in self._admitted:
            return value
        if (
            len(value) > _MAX_LABEL_VALUE_LENGTH
            or len(self._admitted) >= self._cap
            or not _utf8(value)  # a lone surrogate: no exposition could carry it
        ):
            self.others += 1
            if self.others == 1 and self._name:
                _first_other(self._name, self._cap)
            return OTHER
        self._admitted.add(value)
        return value

    @property
    def admitted(self) -> frozenset[str]:
        """The values admitted beyond the configured ones, so far."""
        return frozenset(self._admitted)

    def know(self, values: Iterable[str]) -> None:
        """Configured values added (a configuration reloaded): they always pass from now on."""
        self._known |= frozenset(values)
        if self._spellings is not None:
            self._spellings.know(self._known)


class PairLimiter:
    """Bounds the (agent, tool) pairs the per-call series take, so a family's series grow
    with the caps, not with their product.

    Each label is limited on its own first (``LabelLimiter``); that alone allows
    ``(cap + 2)²`` pairs when agent and tool names both churn (a name per tenant, hostile
    input). A pair passes when either side is configured, or is ``""`` or ``_other``: those
    pairs are bounded by the configuration times one cap. Of the pairs of two unconfigured
    names, the first ``cap`` seen are admitted; after that the tool reports as ``_other``
    (the agent keeps its label, so per-agent rates stay whole). Not thread-safe: call it from
    the event loop.
    """

    __slots__ = ("_admitted", "_agents", "_cap", "_count", "_tools", "others")

    def __init__(self, agents: Iterable[str] = (), tools: Iterable[str] = (), cap: int = 1000):
        if cap < 0:
            raise ValueError(f"pair cap must be >= 0, got {cap}")
        self._agents = frozenset(agents) | {"", OTHER}
        self._tools = frozenset(tools) | {"", OTHER}
        # The admitted tools of each agent: two lookups a call, no pair tuple to build.
        self._admitted: dict[str, set[str]] = {}
        self._count = 0  # pairs admitted
        self._cap = cap
        self.others = 0  # tools reported as _other beside their agent so far

    def know(self, agents: Iterable[str], tools: Iterable[str]) -> None:
        """Configured names added (a configuration reloaded): their pairs always pass."""
        self._agents |= frozenset(agents)
        self._tools |= frozenset(tools)

    def tool_label(self, agent: str, tool: str) -> str:
        """The tool label to report beside ``agent``; both are already limited labels. A
        named method, not ``__call__``: compiled callers call it directly, not through the
        interpreter's call slot (130 instructions a span in ``make bench-instructions``)."""
        admitted = self._admitted.get(agent)
        if admitted is not None and tool in admitted:
            return tool
        if tool in self._tools or agent in self._agents:
            return tool
        if self._count >= self._cap:
            self.others += 1
            if self.others == 1:
                _first_other("(agent, tool) pair", self._cap)
            return OTHER
        if admitted is None:
            admitted = self._admitted[agent] = set()
        admitted.add(tool)
        self._count += 1
        return tool


def _first_other(label: str, cap: int) -> None:
    """Says once per label that values now report as ``_other``: pages and dashboards then
    name ``_other`` for them (``toolwatch_label_values_other_total`` counts them)."""
    _log.warning(
        "%s label: a value past the cap (%d values) or longer than %d characters reports as"
        " _other from now on; name the agents and tools to keep in metrics.agents and"
        " metrics.tools (always kept), or raise the metrics section's caps",
        label,
        cap,
        _MAX_LABEL_VALUE_LENGTH,
    )
