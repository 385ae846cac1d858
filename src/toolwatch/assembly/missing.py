"""Spans a run lacks, as its model spans' input histories show (``timeline``).

Each model span says how many model calls of its run came before it
(``SpanRecord.prior_turns``, ``conventions.history``). A run holding fewer model spans, of
any agent of it, that started before that span did lost them (started, not ended: a model
span recorded by another host, an LLM gateway's, may end a few milliseconds after the next
call starts by the clocks' skew; a call running beside it only adds to the count): a rollout or
scale step of the gateway sent the run's earlier spans to another replica, or they never
reached toolwatch. Only an excess of history over spans is evidence: an earlier turn of a
conversation comes before the current user message, a sub-agent's fresh history shows fewer
turns, and two instrumentations recording one call give more spans, never fewer.

The same history names the tool calls those earlier calls issued
(``SpanRecord.prior_call_ids``: those of its last messages, ``conventions.history``). Where
it names any, the count is evidence only if one of them is known nowhere in the trace before
that span: no span of the trace that started before it asked for it (a model span's
``output_tool_calls``) or ran it (``call_id``), the ids the timeline pairs requests and
executions by (``by_id``), each compared cut as the history's (``cut_id``). A model call no
instrumentation recorded, whose tools' spans (with their call ids) are in the trace, is then
no lost span, nor is an earlier run of the trace whose messages a later one was given
(``to_input_list``); the calls a lost half of a run made, and their tool spans with them,
are known nowhere. Before it: an id a later call of the trace carries is another call's
(a producer that names calls after their tool). A history that names no id (a model turn of
text alone; a producer that records none; ids that cannot tell calls apart:
``conventions.history`` says which) is judged by the count alone.

A model span that tool spans hang from is no single call but an agent's whole loop, started
with the run and holding the last call's input (OpenInference's Google ADK instrumentation):
its history is not compared.

Such a run is judged incomplete, ``MISSING_SPANS`` (not the trace's other runs: a history is
one run's): the rules that read what a run did not do leave it out
(``evaluation.base.unfinished``), as the missing spans may hold it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from toolwatch.conventions.history import cut_id
from toolwatch.model import MISSING_SPANS, SpanRecord, SpanRole

__all__ = ["MISSING_SPANS", "lacks_spans"]


def lacks_spans(run: Sequence[SpanRecord], trace: Sequence[SpanRecord]) -> bool:
    """Whether a model span of ``run`` shows more earlier model calls of its run than the
    run holds model spans started before it, and names no tool call, or one no span of the
    whole ``trace`` started before it carries (``_first_known``)."""
    starts: list[int] | None = None
    hosts: frozenset[bytes] = frozenset()
    known: dict[str, int] | None = None
    for span in run:
        if span.prior_turns <= 0 or span.role is not SpanRole.LLM:
            continue
        if starts is None:
            starts = sorted(s.start_ns for s in run if s.role is SpanRole.LLM)
            hosts = frozenset(
                s.parent_span_id
                for s in run
                if s.role is SpanRole.TOOL and s.parent_span_id is not None
            )
        if span.span_id in hosts:  # not one call: the agent's whole loop (see above)
            continue
        if bisect_left(starts, span.start_ns) >= span.prior_turns:
            continue
        if not span.prior_call_ids:
            return True
        if known is None:
            known = _first_known(trace)
        for call_id in span.prior_call_ids:
            if known.get(call_id, span.start_ns) >= span.start_ns:
                return True
    return False


def _first_known(spans: Sequence[SpanRecord]) -> dict[str, int]:
    """When each call id the trace knows, cut as a history's are, first appears: the start
    of the earliest span that asked for it (a model span's output) or ran it (a tool span's,
    or any span's a recognizer gave one)."""
    known: dict[str, int] = {}
    for span in spans:
        start = span.start_ns
        if span.call_id is not None:
            _earliest(known, cut_id(span.call_id), start)
        for call in span.output_tool_calls:
            if call.call_id is not None:
                _earliest(known, cut_id(call.call_id), start)
    return known


def _earliest(known: dict[str, int], call_id: str, start: int) -> None:
    seen = known.get(call_id)
    if seen is None or start < seen:
        known[call_id] = start
