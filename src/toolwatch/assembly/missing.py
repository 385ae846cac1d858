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
(``SpanRecord.prior_call_ids``, ``conventions.history``). Where it names any, the count is
evidence only if one of them is known nowhere in the trace before that span ended: no other
span of the trace that started by then asked for it (a model span's ``output_tool_calls``)
or ran it (``call_id``), the ids the timeline pairs requests and executions by (``by_id``),
each compared cut as the history's (``cut_id``). A model call no instrumentation recorded,
whose tools' spans (with their call ids) are in the trace, is then no lost span (while the
history names at most ``MAX_CALL_IDS`` calls: past that the count decides), nor is an
earlier run of the trace whose messages a later one was given (``to_input_list``); the calls
a lost half of a run made, and their tool spans with them, are known nowhere. By its end,
not its start: a tool span recorded on another host (an LLM gateway's model spans, a tool
server's) may start a few milliseconds late by the clocks' skew, within the model call's
own duration, while a later call of the trace under the same id (a producer naming calls
after their tool) starts after it ended; where the span's own output asks again under an id
its history names, that producer's ids tell nothing and the count alone decides. A history
that names no id (a model turn of text alone; a producer that records none; ids that cannot
tell calls apart: ``conventions.history`` says which) is judged by the count alone.

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
from typing import TypeAlias

from toolwatch.conventions.history import cut_id
from toolwatch.model import MISSING_SPANS, SpanRecord, SpanRole

__all__ = ["MISSING_SPANS", "TraceIds", "lacks_spans"]


class TraceIds:
    """The call ids a trace's spans carry, read at the first question (``knows``) and once
    for all its runs: for each, the starts of the two earliest spans carrying it."""

    __slots__ = ("_first", "_spans")

    def __init__(self, spans: Sequence[SpanRecord]) -> None:
        self._spans = spans
        self._first: dict[str, _Carriers] | None = None

    def knows(self, call_id: str, span: SpanRecord) -> bool:
        """Whether a span of the trace other than ``span`` that started before ``span``
        ended asked for ``call_id`` (a model span's output) or ran it (its ``call_id``)."""
        first = self._first
        if first is None:
            first = self._first = _first_carriers(self._spans)
        found = first.get(call_id)
        if found is None:
            return False
        start, carrier, second = found
        if carrier == span.span_id:  # its own output: another span must carry it
            return second is not None and second < span.end_ns
        return start < span.end_ns


def lacks_spans(run: Sequence[SpanRecord], ids: TraceIds) -> bool:
    """Whether a model span of ``run`` shows more earlier model calls of its run than the
    run holds model spans started before it, and names no tool call, or one the trace's
    other spans did not carry before it ended (``ids``)."""
    starts: list[int] | None = None
    hosts: frozenset[bytes] = frozenset()
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
        if not span.prior_call_ids or _asks_again(span):
            return True
        for call_id in span.prior_call_ids:
            if not ids.knows(call_id, span):
                return True
    return False


def _asks_again(span: SpanRecord) -> bool:
    """Whether ``span``'s output asks for a call under an id its history already names: its
    producer names calls after their tool (Strands' Ollama provider), and an id the trace
    holds need not be the history's call: the count alone decides."""
    named = frozenset(span.prior_call_ids)
    return any(c.call_id is not None and cut_id(c.call_id) in named for c in span.output_tool_calls)


#: An id's earliest carrier's start and span id, and the start of the earliest other (none
#: yet: ``None``).
_Carriers: TypeAlias = tuple[int, bytes, int | None]


def _first_carriers(spans: Sequence[SpanRecord]) -> dict[str, _Carriers]:
    """For each call id the spans carry, cut as a history's are: the start and span id of
    the earliest span that asked for it (a model span's output) or ran it (a tool span's
    ``call_id``, or any span's a recognizer gave one), and the start of the earliest other."""
    first: dict[str, _Carriers] = {}
    for span in spans:
        if span.call_id is not None:
            _carried(first, cut_id(span.call_id), span)
        for call in span.output_tool_calls:
            if call.call_id is not None:
                _carried(first, cut_id(call.call_id), span)
    return first


def _carried(first: dict[str, _Carriers], call_id: str, span: SpanRecord) -> None:
    start = span.start_ns
    found = first.get(call_id)
    if found is None:
        first[call_id] = (start, span.span_id, None)
        return
    earliest, carrier, second = found
    if carrier == span.span_id:
        return
    if start < earliest:
        first[call_id] = (start, span.span_id, earliest)
    elif second is None or start < second:
        first[call_id] = (earliest, carrier, start)
