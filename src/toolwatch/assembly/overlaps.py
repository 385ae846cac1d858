"""Which executed calls ran at once: the overlap half of ``parallel_group`` (assembly.ordering).

Two executions of one parent are joined when their tool spans' intervals overlap, unless both
calls were requested by model calls one strictly after the other (one ended when or before
the other started): the model asked for the second after the first's output, so they did
not run together, whatever the tool spans' times say (a span ended late, a tool service's
clock ahead of the agent's). Every other overlap joins, transitively: a call with no
recorded request joins every call it overlaps, and so do calls of concurrent model calls.

That is the connectivity of rectangles (execution interval by request interval; a call with
no request spans every request), found by a sweep in execution start order with two
segment trees over the compressed request times (``_Parent``): O(n log n) pairs for n
executions, whatever the shape of the run: a long run of sequential calls whose tool spans
all ran late visits O(log n) lists per call, never every earlier call.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = ["Execution", "overlapping_pairs"]

_Key = tuple[int, int, bytes]
_Entry = tuple[int, int]  # (end of the execution, ns; its index)


@dataclass(frozen=True, slots=True)
class Execution:
    """One executed call: ``index`` (returned in pairs), the ``parent`` span its overlaps are
    judged under, its tool span's interval (ns, ``end_ns >= start_ns``), and the model call
    that requested it (``request``: start ns, end ns, span id), if it was joined to one."""

    index: int
    parent: bytes | None
    start_ns: int
    end_ns: int
    request: tuple[int, int, bytes] | None


def overlapping_pairs(executions: Sequence[Execution]) -> list[tuple[int, int]]:
    """Pairs of indexes whose union (union-find) gives the components described above.

    ``executions`` must be sorted by (start, end, index). Touching intervals (one ends when
    the next starts) are sequential. Every pair is a joined pair, or joins an execution to
    one already joined to it (a list's kept entry, ``_join``); at most O(n log n) of them.
    """
    if not _any_overlap(executions):
        return []  # the usual run: one call after the other
    keys = _compressed(executions)
    width = max(1, len(keys))
    size = 1 << (width - 1).bit_length()
    parents: dict[bytes | None, _Parent] = {}
    pairs: list[tuple[int, int]] = []
    for e in executions:
        low, high = _request_range(e, keys, width)
        parent = parents.get(e.parent)
        if parent is None:
            parent = parents[e.parent] = _Parent()
        parent.sweep(e, low, high, size, pairs)
    return pairs


def _any_overlap(executions: Sequence[Execution]) -> bool:
    """Whether any two executions overlap, whatever their parents (sorted by start)."""
    reach: int | None = None
    for e in executions:
        if reach is not None and e.start_ns < reach:
            return True
        reach = e.end_ns if reach is None else max(reach, e.end_ns)
    return False


class _Parent:
    """The executions swept so far under one parent, as entries in two segment trees over
    the compressed request times (node 1 the root, node ``size + k`` the leaf of time k).

    ``covering``: at each node of an execution's canonical cover of its request range, so
    every entry at a node covers the node's whole range; a range that holds a time meets
    every entry on that time's path. ``starting``: at every node on the path to the leaf of
    the range's lowest time; a range meets every entry at the nodes of its canonical cover.
    Two ranges meet iff one holds the other's lowest time, so the two lookups find them all.
    """

    __slots__ = ("covering", "starting")

    def __init__(self) -> None:
        self.covering: dict[int, list[_Entry]] = {}
        self.starting: dict[int, list[_Entry]] = {}

    def sweep(
        self, e: Execution, low: int, high: int, size: int, pairs: list[tuple[int, int]]
    ) -> None:
        """Pair ``e`` with what it meets among the executions still running, then add it."""
        path = list(_path(low, size))
        cover = list(_cover(low, high, size))
        for node in path:
            _join(self.covering, node, e.start_ns, e.index, pairs)
        for node in cover:
            _join(self.starting, node, e.start_ns, e.index, pairs)
        entry = (e.end_ns, e.index)
        for node in cover:
            _add(self.covering, node, entry)
        for node in path:
            _add(self.starting, node, entry)


def _join(
    lists: dict[int, list[_Entry]], node: int, start: int, index: int, pairs: list[tuple[int, int]]
) -> None:
    """Pair ``index`` with the entries at ``node`` still running at ``start``, and keep only
    the one that runs longest: they are all joined to ``index`` now, so a later execution
    that meets one of them meets their component, and the kept one runs whenever any does.
    Finished entries are dropped. This is what bounds the sweep: an entry is paired again
    only while it is the one kept, once per lookup of its node."""
    entries = lists.get(node)
    if entries is None:
        return
    kept: _Entry | None = None
    for entry in entries:
        if entry[0] > start:
            pairs.append((entry[1], index))
            if kept is None or entry[0] > kept[0]:
                kept = entry
    if kept is None:
        del lists[node]
    elif len(entries) > 1:
        lists[node] = [kept]


def _add(lists: dict[int, list[_Entry]], node: int, entry: _Entry) -> None:
    entries = lists.get(node)
    if entries is None:
        lists[node] = [entry]
    else:
        entries.append(entry)


def _path(leaf: int, size: int) -> Iterator[int]:
    node = leaf + size
    while node:
        yield node
        node >>= 1


def _cover(low: int, high: int, size: int) -> Iterator[int]:
    """The canonical nodes of the leaves ``low..high``: O(log n) of them."""
    low += size
    high += size + 1
    while low < high:
        if low & 1:
            yield low
            low += 1
        if high & 1:
            high -= 1
            yield high
        low >>= 1
        high >>= 1


def _compressed(executions: Sequence[Execution]) -> dict[_Key, int]:
    """Each request bound's place among all of them. A model call of some duration holds
    the times strictly inside it: keys (start, 2) to (end, 0), so one that ends when another
    starts does not meet it. One of no duration is a point of its own, (time, 1, span id):
    inside every model call that holds its time strictly, meeting no other point."""
    keys: set[_Key] = set()
    for e in executions:
        if e.request is not None:
            keys.update(_bounds(e.request))
    return {key: place for place, key in enumerate(sorted(keys))}


def _bounds(request: tuple[int, int, bytes]) -> tuple[_Key, _Key]:
    start, end, span_id = request
    if end > start:
        return (start, 2, b""), (end, 0, b"")
    point = (start, 1, span_id)
    return point, point


def _request_range(e: Execution, keys: dict[_Key, int], width: int) -> tuple[int, int]:
    """The leaves ``e``'s request holds; every leaf for a call with no recorded request."""
    if e.request is None:
        return 0, width - 1
    low, high = _bounds(e.request)
    return keys[low], keys[high]
