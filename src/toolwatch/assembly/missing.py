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
(``SpanRecord.prior_call_ids``, the last ``MAX_CALL_IDS`` of them). Where it names any, the
count is evidence only if one of them is known nowhere in the run: no model span of the run
asked for it (``output_tool_calls``) and no tool span of it ran it (``call_id``), the ids the
timeline pairs requests and executions by (``by_id``), each compared cut as the history's
(``cut_id``). A model call no instrumentation recorded whose tools' spans, with their call
ids, are in the run is then no lost span; the calls a lost half of a run made, and their
tool spans with them, are known nowhere. A history that names no id (a model turn of text
alone; a producer that records none: ``conventions.history`` says which) is judged by the
count alone.

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


def lacks_spans(spans: Sequence[SpanRecord]) -> bool:
    """Whether a model span of ``spans`` shows more earlier model calls of its run than the
    run (``spans``) holds model spans started before it, and names no tool call (or one
    the run does not know: ``_unknown``)."""
    starts: list[int] | None = None
    hosts: frozenset[bytes] = frozenset()
    known: frozenset[str] | None = None
    for span in spans:
        if span.prior_turns <= 0 or span.role is not SpanRole.LLM:
            continue
        if starts is None:
            starts = sorted(s.start_ns for s in spans if s.role is SpanRole.LLM)
            hosts = frozenset(
                s.parent_span_id
                for s in spans
                if s.role is SpanRole.TOOL and s.parent_span_id is not None
            )
        if span.span_id in hosts:  # not one call: the agent's whole loop (see above)
            continue
        if bisect_left(starts, span.start_ns) >= span.prior_turns:
            continue
        if not span.prior_call_ids:
            return True
        if known is None:
            known = _known_ids(spans)
        if any(call_id not in known for call_id in span.prior_call_ids):
            return True
    return False


def _known_ids(spans: Sequence[SpanRecord]) -> frozenset[str]:
    """The call ids the run knows, cut as a history's are: those its model spans asked for
    and those its spans ran (a tool span's, or any span's a recognizer gave one)."""
    known: set[str] = set()
    for span in spans:
        if span.call_id is not None:
            known.add(cut_id(span.call_id))
        for call in span.output_tool_calls:
            if call.call_id is not None:
                known.add(cut_id(call.call_id))
    return frozenset(known)
