"""Which calls of a run could inform which: the order calls were issued in
(``in_sequence``), the parallel groups and nesting that make two calls concurrent
(``effective_groups``, ``Concurrency``), and the successes of a tool so far as a later call
could have seen them (``Successes``). ``safety``'s verification, ``invariants``' ``order``
rules and ``loops``' repeats read "earlier" through them; ``base`` builds baselines with
them.

A call issued in the same parallel group as another, or nested in a call issued alongside
it, could not see its result: neither informs the other, whatever their sequence indexes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from toolwatch.model_traces import ToolCall, ToolTrace

__all__ = [
    "MAX_NESTING",
    "Concurrency",
    "Successes",
    "effective_groups",
    "in_sequence",
    "uses_parallelism",
]


def in_sequence(calls: Sequence[ToolCall]) -> Sequence[ToolCall]:
    """``calls`` ordered by ``sequence_index``. The timeline builds them in that order, so
    they are sorted only when a caller built the trace otherwise."""
    if isinstance(calls, tuple):  # a ToolTrace's: indexed natively in compiled code
        ordered = _ascending(calls)
    else:
        ordered = all(
            calls[i - 1].sequence_index <= calls[i].sequence_index for i in range(1, len(calls))
        )
    return calls if ordered else sorted(calls, key=_sequence_index)


def _ascending(calls: tuple[ToolCall, ...]) -> bool:
    """Whether ``calls`` are in ``sequence_index`` order."""
    return all(calls[i - 1].sequence_index <= calls[i].sequence_index for i in range(1, len(calls)))


def _sequence_index(call: ToolCall) -> int:
    return call.sequence_index


def _informs(earlier_group: int | None, group: int | None) -> bool:
    """Whether a successful call of ``earlier_group``, made earlier in the run, could inform a
    call of ``group``: not when both were issued in the same parallel group, since neither saw
    the other's result. Callers have already checked "earlier" (lower ``sequence_index``) and
    "successful" (status ``ok``)."""
    return earlier_group is None or earlier_group != group


#: Calls nested deeper than this are read as nested in their ancestor at this depth (beside
#: each other): agents nest a few levels, and a deeper chain would cost time and memory by
#: its depth for every call in it.
MAX_NESTING: Final = 32


def _lineages(calls: Sequence[ToolCall]) -> list[tuple[int, ...]] | None:
    """For each call, the indexes of the calls it is nested in, outermost first, then its
    own (``parent_call_id`` names the enclosing call's id, or its span id when it has none),
    at most ``MAX_NESTING`` long; ``None`` when no call is nested (the usual run). ``calls``
    in sequence order: an enclosing call starts, so comes, before the calls nested in it."""
    if all(c.parent_call_id is None for c in calls):
        return None
    by_id: dict[str, int] = {}
    lineages: list[tuple[int, ...]] = []
    for i, call in enumerate(calls):
        parent = by_id.get(call.parent_call_id) if call.parent_call_id is not None else None
        if parent is None:
            lineage: tuple[int, ...] = (i,)
        else:
            enclosing = lineages[parent]
            if len(enclosing) >= MAX_NESTING:
                enclosing = enclosing[: MAX_NESTING - 1]
            lineage = (*enclosing, i)
        lineages.append(lineage)
        if call.span_id is not None:
            by_id[call.span_id] = i
        # The latest call of an id encloses what follows it, unless the id is an enclosing
        # call's (providers number ids per response: a nested agent's call_0 is not its
        # caller's call_0, which still encloses its siblings).
        if call.call_id is not None and all(calls[j].call_id != call.call_id for j in lineage[:-1]):
            by_id[call.call_id] = i
    return lineages


def effective_groups(calls: Sequence[ToolCall]) -> list[int | None]:
    """Each call's ``parallel_group``, or, for a call nested in a parallel call (an agent used
    as a tool, issued with its siblings), that outermost parallel call's group: the calls of
    a group and everything they start run side by side, in no order the model chose.
    ``calls`` in sequence order."""
    lineages = _lineages(calls)
    if lineages is None:
        return [c.parallel_group for c in calls]
    groups: list[int | None] = []
    for lineage in lineages:
        group = None
        for i in lineage:
            group = calls[i].parallel_group
            if group is not None:
                break
        groups.append(group)
    return groups


class Concurrency:
    """Which calls of a run could have seen another's result (``informs``).

    Calls issued in one parallel group saw none of each other's results, and neither did the
    calls nested in them (an agent used as a tool, issued beside a dangerous call, looks the
    order up too late for it); a call nested in another ran before the outer one returned.
    Built from ``calls`` in sequence order; indexes are into it.

    ``informs`` is the definition, pair by pair; the evaluators ask ``successes()``, which
    answers the same for all earlier successes of a kind at once (a property test holds the
    two equal).
    """

    __slots__ = ("_calls", "_lineages")

    def __init__(self, calls: Sequence[ToolCall]) -> None:
        self._calls = calls
        self._lineages = _lineages(calls)

    def lineage(self, index: int) -> tuple[int, ...]:
        """The calls ``index`` is nested in, outermost first, then itself."""
        lineages = self._lineages
        return (index,) if lineages is None else lineages[index]

    def group(self, index: int) -> int | None:
        return self._calls[index].parallel_group

    @property
    def calls(self) -> Sequence[ToolCall]:
        return self._calls

    def successes(self) -> Successes:
        """An empty set of earlier successes of one kind to ``add`` to, asked whether any
        ``informs`` a later call."""
        return Successes(self._calls) if self._lineages is None else _NestedSuccesses(self)

    def informs(self, earlier: int, later: int) -> bool:
        """Whether a successful call ``earlier`` (a lower index) could inform call ``later``:
        below their innermost common enclosing call (or the run) they are two calls, or
        lie in two, that were not issued in one parallel group."""
        calls, lineages = self._calls, self._lineages
        if lineages is None:
            return _informs(calls[earlier].parallel_group, calls[later].parallel_group)
        for x, y in zip(lineages[earlier], lineages[later], strict=False):
            if x != y:
                return _informs(calls[x].parallel_group, calls[y].parallel_group)
        return False  # one is nested in the other: the outer call had not returned


class Successes:
    """Successful calls of one kind (a loop's identical call, a verification tool's value),
    added in sequence order: whether any ``informs`` a later call, as
    ``Concurrency.informs`` says, in time by the later call's nesting depth, not by how many
    were added (a run of thousands of identical calls issued at once, or nested in one
    another, asks each of them for every later call).

    In a run without nesting (this class) a call is informed by any success outside its own
    parallel group: there are more successes than in that group. With nesting
    (``_NestedSuccesses``) the same holds below the run and below each call on the later
    call's lineage, in turn."""

    __slots__ = ("_calls", "_groups", "_total")

    def __init__(self, calls: Sequence[ToolCall]) -> None:
        self._calls = calls
        self._total = 0
        self._groups: dict[int, int] | None = None  # group -> successes in it, once one is

    def __bool__(self) -> bool:
        return self._total > 0

    def add(self, index: int) -> None:
        """Add the success ``index``, a later call than any added before."""
        self._total += 1
        group = self._calls[index].parallel_group
        if group is not None:
            groups = self._groups
            if groups is None:
                groups = self._groups = {}
            groups[group] = groups.get(group, 0) + 1

    def informs(self, later: int) -> bool:
        """Whether a success added so far informs the call ``later`` (added after it)."""
        group = self._calls[later].parallel_group
        groups = self._groups
        if group is None or groups is None:
            return self._total > 0
        return self._total > groups.get(group, 0)


class _NestedSuccesses(Successes):
    """``Successes`` in a run with nesting. Below the run and each call on the later call's
    lineage, the successes that cannot inform it are those in the subtree of the next call
    on its lineage, or of the calls issued in one parallel group with that one (the same
    parent): so it is informed when there are more there than these. Counts are kept per
    call and per (parent, group)."""

    __slots__ = ("_concurrency", "_in_group", "_own", "_within")

    def __init__(self, concurrency: Concurrency) -> None:
        super().__init__(concurrency.calls)
        self._concurrency = concurrency
        self._within: dict[int, int] = {}  # call -> successes in its subtree, itself included
        self._in_group: dict[tuple[int, int], int] = {}  # (parent, group) -> in its subtrees
        self._own: set[int] = set()

    def add(self, index: int) -> None:
        concurrency = self._concurrency
        self._total += 1
        self._own.add(index)
        parent = -1  # the run
        for call in concurrency.lineage(index):
            self._within[call] = self._within.get(call, 0) + 1
            group = concurrency.group(call)
            if group is not None:
                key = (parent, group)
                self._in_group[key] = self._in_group.get(key, 0) + 1
            parent = call

    def informs(self, later: int) -> bool:
        concurrency = self._concurrency
        below = self._total  # successes under the run, then under each enclosing call
        parent = -1
        for call in concurrency.lineage(later):
            within = self._within.get(call, 0)
            group = concurrency.group(call)
            unseen = within if group is None else self._in_group.get((parent, group), 0)
            if below > unseen:
                return True
            below = within - (1 if call in self._own else 0)  # an enclosing call: unreturned
            parent = call
        return False


def uses_parallelism(trace: ToolTrace) -> bool:
    """Whether two or more calls of the run share a ``parallel_group``."""
    groups = [c.parallel_group for c in trace.calls if c.parallel_group is not None]
    return len(groups) != len(set(groups))
