"""What the trace buffer hands the timeline (``CompletedTrace``): a trace's spans, once, with
whether its run came whole and why not (``assembly.buffer`` decides; ``assembly.timeline``
builds its runs).

Compiled, as ``assembly.buffer`` is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toolwatch.model import SpanRecord

__all__ = ["CompletedTrace"]


@dataclass(frozen=True, slots=True, init=False)
class CompletedTrace:
    """A trace handed to the timeline: its distinct spans in arrival order.

        ``incomplete_reason`` is ``None`` when ``complete``, else ``timed_out``, ``evicted``,
        ``span_limit`` or ``shutdown``. Arrival times are clock readings, not span times (a span
        rejected at ingest, ``flag_rejected``, arrives too).
        ``agent_run`` is false for a trace with no agent, model or tool span (its spans were
    counted dropped, ``not_an_agent_run``: it makes no ToolTrace). ``by_id``, when given, holds
    ``spans`` by span id (the buffer hands over the dict it kept
        them in, so the timeline does not build another); never mutated, and not compared.
        Its constructor is written out, as ``ToolTrace``'s is (one is built per trace).
    """

    trace_id: bytes
    spans: tuple[SpanRecord, ...]
    complete: bool
    incomplete_reason: str | None
    first_arrival_ns: int
    last_arrival_ns: int
    by_id: dict[bytes, SpanRecord] | None = field(default=None, compare=False, repr=False)
    agent_run: bool = True  # ``runs_an_agent(spans)``, worked out once, by the buffer

    def __init__(  # noqa: PLR0917 - the fields, in the order a dataclass would take them
        self,
        trace_id: bytes,
        spans: tuple[SpanRecord, ...],
        complete: bool,
        incomplete_reason: str | None,
        first_arrival_ns: int,
        last_arrival_ns: int,
        by_id: dict[bytes, SpanRecord] | None = None,
        agent_run: bool = True,
    ) -> None:
        object.__setattr__(self, "trace_id", trace_id)
        object.__setattr__(self, "spans", spans)
        object.__setattr__(self, "complete", complete)
        object.__setattr__(self, "incomplete_reason", incomplete_reason)
        object.__setattr__(self, "first_arrival_ns", first_arrival_ns)
        object.__setattr__(self, "last_arrival_ns", last_arrival_ns)
        object.__setattr__(self, "by_id", by_id)
        object.__setattr__(self, "agent_run", agent_run)
