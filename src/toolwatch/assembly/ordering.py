"""The calls of a run in order (by time, each model output's calls in the model's order) and
their parallel groups (a model output's calls; executions of one parent that overlap).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from toolwatch.assembly.drafts import CallSite, _Draft, append_to
from toolwatch.assembly.overlaps import Execution, overlapping_pairs
from toolwatch.model import SpanRecord

__all__: list[str] = []

_SortKey = tuple[int, int, int, bytes, int, bytes]


def _in_order(drafts: list[_Draft]) -> tuple[list[_Draft], list[list[int]]]:
    """Calls by start time, ties broken by emission order; then the calls one LLM output
    requested are put back in the model's order within the places they took, so scheduling
    jitter between parallel tool spans never reorders them (CONVENTIONS §6.4). Also the
    places of each output's calls, for the outputs that requested two or more."""
    if not _sorted_in_time(drafts):  # they usually are: no sort, no key tuple per call
        drafts = sorted(drafts, key=_time_key)
    if _one_call_per_output(drafts):
        return drafts, []  # the usual run: nothing to put back in order, no output's group
    places: dict[bytes, list[int]] = {}
    for i, d in enumerate(drafts):
        if d.request is not None:
            append_to(places, d.request.llm.span_id, i)
    shared = [indexes for indexes in places.values() if len(indexes) > 1]
    ordered = list(drafts)
    for indexes in shared:
        if _emitted_in_order(drafts, indexes):
            continue  # the places already hold the calls in the model's order
        batch = sorted((drafts[i] for i in indexes), key=_emission)
        for i, draft in zip(indexes, batch, strict=True):
            ordered[i] = draft
    return ordered, shared


def _one_call_per_output(drafts: list[_Draft]) -> bool:
    """Whether no model output requested more than one of the calls."""
    return all(d.request is None or len(d.request.llm.output_tool_calls) < 2 for d in drafts)


def _sorted_in_time(drafts: list[_Draft]) -> bool:
    """Whether the drafts are sorted by ``_time_key``: by start, and where two start
    together (parallel calls often do), by the rest of the key."""
    for i in range(1, len(drafts)):
        before, start = drafts[i - 1].at, drafts[i].at
        if before > start:
            return False
        if before == start and _time_key(drafts[i]) < _time_key(drafts[i - 1]):
            return False
    return True


def _emitted_in_order(drafts: list[_Draft], indexes: list[int]) -> bool:
    """Whether the drafts at ``indexes`` are in the order their output requested them."""
    return all(
        _emission(drafts[indexes[k - 1]]) < _emission(drafts[indexes[k]])
        for k in range(1, len(indexes))
    )


def _time_key(draft: _Draft) -> _SortKey:
    if draft.request is not None:
        llm, index = draft.request.llm, draft.request.call.position
        return (draft.at, 0, llm.start_ns, llm.span_id, index, b"")
    return (draft.at, 1, 0, b"", 0, draft.origin.span_id)


def _emission(draft: _Draft) -> int:
    assert draft.request is not None
    return draft.request.position


def _parallel_groups(
    drafts: list[_Draft], sites: dict[bytes, CallSite], shared: list[list[int]]
) -> list[int | None]:
    """Group number (smallest sequence index of the group) per call, or ``None``.

    Calls one model output requested together form a group (``shared``: their places): the
    model's parallel tool calls, however the framework scheduled them (LangGraph runs each
    in a node of its own, and one after the other when the tools are synchronous). So do
    executed calls of the same parent (wrappers skipped) whose intervals overlap,
    transitively: producers that record no requests. Each interval is read on the clock its
    call is ordered by (``_ordered_interval``): two hosts' recorded times are not one
    clock's. But where both calls' requests are recorded, they decide: a call requested by
    a model call that started when or after the other's model call had ended is not joined
    to it by their overlap, whatever the tool spans' times say (a tool span ended late, a
    tool service's clock ahead of the agent's): the model asked for it after that output.
    Every other overlap still joins (a call with no recorded request, calls of concurrent
    model calls), and groups that share a call are one group, so two such calls are one
    group when a third joins both.
    """
    groups: list[Sequence[int]] = [*_overlapping_executions(drafts, sites), *shared]
    if not groups:
        return [None] * len(drafts)
    leader = list(range(len(drafts)))  # union-find: 10^5 parallel calls must stay linear
    for members in groups:
        for i in members[1:]:
            _union(leader, members[0], i)
    roots = [_find(leader, i) for i in range(len(drafts))]
    sizes: dict[int, int] = {}  # not a Counter: its constructor is interpreted Python
    for root in roots:
        sizes[root] = sizes.get(root, 0) + 1
    return [root if sizes[root] > 1 else None for root in roots]


def _overlapping_executions(
    drafts: list[_Draft], sites: dict[bytes, CallSite]
) -> list[Sequence[int]]:
    """Executed calls of one parent whose [start, end] intervals (``_ordered_interval``)
    overlap, but for two calls requested by model calls one strictly after the other: the
    requests say they ran one after the other. Groups to join (``_parallel_groups``): the
    components of plain overlap (a sweep in (start, end, index) order; touching intervals
    are sequential), each as it is when its calls were requested by one model call at most
    (a model's parallel calls: no pair of them is ordered), else refined by
    ``overlapping_pairs``, which only such a component pays for. The drafts are in time
    order, so usually the sweep needs no sort."""
    executed = [i for i, d in enumerate(drafts) if d.span is not None]
    if not _in_interval_order(executed, drafts):
        executed.sort(key=lambda i: (_ordered_interval(drafts[i]), i))
    groups: list[Sequence[int]] = []
    for members in _overlap_components(executed, drafts, sites):
        if _one_request(members, drafts):
            groups.append(members)
        else:  # in (start, end, index) order, as the sweep took them
            executions = [_execution(i, drafts[i], sites) for i in members]
            groups.extend(overlapping_pairs(executions))
    return groups


def _overlap_components(
    executed: list[int], drafts: list[_Draft], sites: dict[bytes, CallSite]
) -> list[list[int]]:
    """The components of two or more of ``executed`` (sorted) whose intervals overlap, per
    parent, transitively."""
    sweeps: dict[bytes | None, _Sweep] = {}  # per parent: the component being swept
    found: list[list[int]] = []
    for i in executed:
        draft = drafts[i]
        span = draft.span
        assert span is not None
        parent = sites[span.span_id].parent
        start, end = _ordered_interval(draft)
        sweep = sweeps.get(parent)
        if sweep is None:
            sweeps[parent] = _Sweep(i, end)
            continue
        if start >= sweep.reach:
            if len(sweep.members) == 1:  # no component (none holds its list): the next one
                sweep.members[0] = i  # in its place, no new sweep per sequential call
                sweep.reach = end
            else:
                sweeps[parent] = _Sweep(i, end)
            continue
        if len(sweep.members) == 1:
            found.append(sweep.members)  # its second member makes it a component
        sweep.members.append(i)
        sweep.reach = max(sweep.reach, end)
    return found


@dataclass(slots=True, init=False)
class _Sweep:
    members: list[int]
    reach: int  # the latest end among the members

    def __init__(self, first: int, end: int) -> None:
        self.members = [first]
        self.reach = end


def _one_request(members: list[int], drafts: list[_Draft]) -> bool:
    """Whether one model call at most requested the calls at ``members``."""
    seen: SpanRecord | None = None
    for i in members:
        request = drafts[i].request
        if request is None:
            continue
        if seen is None:
            seen = request.llm
        elif request.llm is not seen:
            return False
    return True


def _execution(index: int, draft: _Draft, sites: dict[bytes, CallSite]) -> Execution:
    span = draft.span
    assert span is not None
    start, end = _ordered_interval(draft)
    request = None
    if draft.request is not None:  # the model call that requested it
        llm = draft.request.llm
        request = (llm.start_ns, max(llm.start_ns, llm.end_ns), llm.span_id)
    return Execution(index, sites[span.span_id].parent, start, end, request)


def _in_interval_order(indexes: list[int], drafts: list[_Draft]) -> bool:
    """Whether the executed drafts at ``indexes`` are sorted by (start, end), each read on
    the clock it is ordered by (``_ordered_interval``)."""
    previous_start = previous_end = 0
    for i in indexes:
        start, end = _ordered_interval(drafts[i])
        if start < previous_start or (start == previous_start and end < previous_end):
            return False
        previous_start, previous_end = start, end
    return True


def _ordered_interval(draft: _Draft) -> tuple[int, int]:
    """The executed call's [start, end] (ns) on the clock it is ordered by (``_Draft.at``):
    its tool span's, moved whole by as much as the call was (``clocks._requested_windows``).
    A moved call's recorded times are another host's clock: the refund a tool service one
    second behind ran after a slow lookup overlapped it there, the two read as one group,
    and the lookup no longer verified the refund (a false MISSING_VERIFICATION_STEP).
    Unmoved (every call of a one-service run), the span's own: no more than a field read."""
    span = draft.span
    assert span is not None
    start = span.start_ns
    end = span.end_ns if span.end_ns > start else start
    moved = draft.moved
    if moved is None:
        return start, end
    return moved, end + (moved - start)


def _find(leader: list[int], i: int) -> int:
    """The group's smallest index (the root), halving the path on the way."""
    while leader[i] != i:
        leader[i] = leader[leader[i]]
        i = leader[i]
    return i


def _union(leader: list[int], a: int, b: int) -> None:
    a, b = _find(leader, a), _find(leader, b)
    if a != b:
        leader[max(a, b)] = min(a, b)
