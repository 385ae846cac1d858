"""Where each run's reference keys come from (``timeline``): its own spans, and the spans
above it that are its alone or shared with other runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from toolwatch.assembly.calls import CallSite
from toolwatch.assembly.runs import _holds_calls, _Run
from toolwatch.model import SpanRecord

__all__: list[str] = []


def _reference_keys(ranked: Sequence[SpanRecord], above: Sequence[SpanRecord]) -> dict[str, str]:
    """Configured attributes merged over the run (the run span wins, then the earliest),
    then over spans above it (``_above_runs``), nearest first."""
    merged: dict[str, str] = {}
    for span in ranked:
        for key, value in span.reference_keys:
            merged.setdefault(key, value)
    for span in above:
        for key, value in span.reference_keys:
            merged.setdefault(key, value)
    return merged


#: Where a run's reference keys come from (``_above_runs``): the spans whose keys are its
#: own in their order (``None``: the run's, run span first, then the earliest), then the
#: spans above it that are its alone, and the spans above it and another run.
_Above = tuple[Sequence[SpanRecord] | None, Sequence[SpanRecord], Sequence[SpanRecord]]
_NOTHING_ABOVE: Final[_Above] = (None, (), ())


def _above_runs(
    runs: list[_Run], by_id: dict[bytes, SpanRecord], sites: dict[bytes, CallSite]
) -> list[_Above]:
    """For each run, where its reference keys come from. Its own spans' keys are its own;
    so are those of the spans above its agent's span that belong to no agent's run (a
    request's server span, a workflow's) and hold no other run's work, nearest first (a
    canary's case id on its request's span). Those of a span above several are the runs'
    shared keys: whose they are no span says (a title agent, a moderation agent, a
    guardrail's checker beside the canary's agent; the handler's own tool calls beside it,
    the residual run), and a wrong guess pages: the run given the canary's case id did not
    do the canary's work. When the runs lie in different fragments of the tree (a run hangs
    from a parent that never arrived, below a gateway toolwatch does not hear from, and
    another from the request's span), no span says which runs it holds, and every span
    above a run is shared.

    The residual run's keys are those of its spans that make calls and of the spans above
    them, nearest first; the other spans outside every agent (another request's, under one
    batch root) are none of its business. Alone in its trace (no agent span at all: a
    client-only tool loop) it has every span's keys, as any run alone has its own.

    What no span can tell: a model call outside every agent that calls no tool (a
    client-only canary that refuses) is no run, so a title agent beside it takes the
    request span's keys."""
    if len(runs) == 1:
        only = runs[0]
        if only.agent_id is None or only.span is None or only.span.parent_span_id is None:
            return [_NOTHING_ABOVE]  # the usual trace: one run, its agent the root
    chains: list[list[SpanRecord]] = []
    tops: set[bytes] = set()
    residual: _Run | None = None
    for run in runs:
        chain: list[SpanRecord] = []
        if run.agent_id is None:
            residual = run
        elif run.span is not None:
            _walk_up(run.span, by_id, sites, chain, tops)
        chains.append(chain)
    if residual is None and not any(chains):
        return [_NOTHING_ABOVE] * len(runs)  # no span above an agent
    if len(runs) == 1:
        return [(None, chains[0], [])]  # one run: what is above it is its own
    held: list[SpanRecord] = []  # the residual run's calls and the spans above them
    if residual is not None:
        makers = [s for s in residual.spans if _holds_calls(s)]
        held = _with_ancestors(makers, by_id, sites, tops)
    holders: dict[bytes, int] = {}
    for keyed in (*chains, held):
        for span in keyed:
            holders[span.span_id] = holders.get(span.span_id, 0) + 1
    known = len(tops) <= 1
    found: list[_Above] = []
    for run, chain in zip(runs, chains, strict=True):
        if run.agent_id is None:
            own = [s for s in held if known and holders[s.span_id] == 1]
            found.append((own, [], [s for s in held if not known or holders[s.span_id] > 1]))
            continue
        alone = [s for s in chain if known and holders[s.span_id] == 1]
        found.append((None, alone, [s for s in chain if not known or holders[s.span_id] > 1]))
    return found


def _walk_up(
    span: SpanRecord,
    by_id: dict[bytes, SpanRecord],
    sites: dict[bytes, CallSite],
    chain: list[SpanRecord],
    tops: set[bytes],
    *,
    walked: set[bytes] | None = None,
) -> None:
    """Appends to ``chain`` the spans above ``span`` that belong to no agent's run, nearest
    first, and to ``tops`` the top of its fragment of the tree (a root, or the span whose
    parent never arrived); none when the walk ends in an agent's run (a guardrail's checker
    below the run it checks: that run's fragment). A walk cut at the bound counts as a
    fragment of its own. A walk reaching a span in ``walked`` stops there: an earlier walk
    went on from it."""
    seen: set[bytes] = set()
    top = span
    parent = span.parent_span_id
    while parent is not None and parent not in seen:
        if walked is not None and parent in walked:
            return
        above = by_id.get(parent)
        if above is None or len(chain) == _MAX_ANCESTORS:
            break
        if sites[above.span_id].run is not None:
            return
        chain.append(above)
        seen.add(parent)
        top = above
        parent = above.parent_span_id
    tops.add(top.span_id)


def _with_ancestors(
    spans: list[SpanRecord],
    by_id: dict[bytes, SpanRecord],
    sites: dict[bytes, CallSite],
    tops: set[bytes],
) -> list[SpanRecord]:
    """``spans`` (in time order), then the spans above each, nearest first, each once. Each
    walk stops where an earlier one went, so nested calls cost one walk up in all."""
    found = list(spans)
    walked = {s.span_id for s in spans}
    for span in spans:
        chain: list[SpanRecord] = []
        _walk_up(span, by_id, sites, chain, tops, walked=walked)
        for above in chain:
            walked.add(above.span_id)
            found.append(above)
    return found


#: Spans above a run read for its reference keys at most (a deep chain a producer made
#: costs no more).
_MAX_ANCESTORS: Final = 64
