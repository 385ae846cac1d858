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

from toolwatch.model import MISSING_SPANS, SpanRecord, SpanRole

__all__ = ["MISSING_SPANS", "lacks_spans"]


def lacks_spans(spans: Sequence[SpanRecord]) -> bool:
    """Whether a model span of ``spans`` shows more earlier model calls of its run than the
    run (``spans``) holds model spans started before it."""
    starts: list[int] | None = None
    hosts: frozenset[bytes] = frozenset()
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
        if bisect_left(starts, span.start_ns) < span.prior_turns:
            return True
    return False
