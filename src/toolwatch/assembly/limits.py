"""The trace buffer's settings: completion timing and memory bounds (``AssemblyLimits``),
checked when built.

Read by ``TraceBuffer`` (``assembly.buffer``) and what it derives from (``assembly.held_traces``),
and by a buffered trace's deadlines (``assembly.anchoring``); built from the configuration's
``assembly:`` section (``config.stages``). Compiled: the buffer reads them on every span.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["ENCLOSING_SPANS", "LOST_PARENT_WAIT_NS", "MAX_REFUSAL_NS", "AssemblyLimits"]

_OVERFLOW_POLICIES: Final = frozenset({"backpressure", "evict_oldest"})

#: How much longer than ``completion_wait`` a rooted trace waits, by default, for a local
#: parent that a span which ended before the root names (``_Trace.awaits_after_root``;
#: ``AssemblyLimits.lost_parent_wait_ns``): the OpenTelemetry SDKs' batch processors export
#: every 5 s (``OTEL_BSP_SCHEDULE_DELAY``), so a parent still running comes, or a span of its
#: that ended since does, within one such delay; one that does not was lost (an export given
#: up, a full queue, a filter), and the run is over.
LOST_PARENT_WAIT_NS: Final = 5_000_000_000

#: How many spans over ``max_spans_per_trace`` a trace still takes when they enclose what it
#: holds (``assembly.buffer``'s docstring): its open ancestors when it filled, a few in a run
#: of steps one after another, more where many ran in parallel.
ENCLOSING_SPANS: Final = 64

#: How long a full buffer refuses requests under ``backpressure`` before it takes them by
#: evicting (``assembly.refusals``), by default: long enough for a burst of ended runs to be
#: judged and room made, a run left running in the background too, which waits
#: ``completion_wait + lost_parent_wait`` (2 s and 5 s by default: ``_Trace.ran_on``; 5 s,
#: and such runs were evicted, judged incomplete, just before their wait let them go), short
#: enough that the OpenTelemetry SDKs' exporters, which give a refused batch up after their
#: 10 s export timeout, get it in on a retry.
MAX_REFUSAL_NS: Final = 2_000_000_000 + LOST_PARENT_WAIT_NS


@dataclass(frozen=True, slots=True)
class AssemblyLimits:
    """Completion timing (nanoseconds of the injected clock) and memory bounds.

    ``overflow`` is what a receiver does when a request does not fit: ``backpressure``
    refuses it with a retryable status (see :meth:`TraceBuffer.admit`); ``evict_oldest``
    accepts it and evicts the oldest traces, evaluating them as incomplete.
    ``max_refusal_ns``: under ``backpressure``, how long the buffer refuses requests before
    it takes them by evicting as ``evict_oldest`` does (0: never; ``assembly.refusals``).
    ``tick_ns``: how often the completion checks are made (the app's ticker).
    ``missing_spans_from_history``: the timeline judges a run whose model spans' input
    histories show model calls the trace does not hold ``missing_spans``
    (``assembly.missing``).
    """

    completion_wait_ns: int = 2_000_000_000
    max_trace_age_ns: int = 300_000_000_000
    local_parent_wait_ns: int = 0  # off: such a trace waits for max_trace_age_ns
    lost_parent_wait_ns: int = LOST_PARENT_WAIT_NS
    late_span_window_ns: int = 300_000_000_000
    max_traces: int = 10_000
    max_spans_per_trace: int = 5_000
    max_buffered_spans: int = 200_000
    max_buffered_bytes: int = 256 * 2**20
    max_remembered_traces: int = 2_000_000
    overflow: str = "backpressure"
    max_refusal_ns: int = MAX_REFUSAL_NS
    tick_ns: int = 10_000_000
    missing_spans_from_history: bool = False

    def __post_init__(self) -> None:
        for name in ("completion_wait_ns", "max_trace_age_ns", "max_traces"):
            _require(name, getattr(self, name), minimum=1)
        for name in ("max_spans_per_trace", "max_buffered_spans", "max_buffered_bytes"):
            _require(name, getattr(self, name), minimum=1)
        _require("late_span_window_ns", self.late_span_window_ns, minimum=0)
        _require("local_parent_wait_ns", self.local_parent_wait_ns, minimum=0)
        _require("lost_parent_wait_ns", self.lost_parent_wait_ns, minimum=1)
        _require("max_remembered_traces", self.max_remembered_traces, minimum=0)
        _require("max_refusal_ns", self.max_refusal_ns, minimum=0)
        _require("tick_ns", self.tick_ns, minimum=1)
        if self.overflow not in _OVERFLOW_POLICIES:
            allowed = ", ".join(sorted(_OVERFLOW_POLICIES))
            raise ValueError(f"overflow: {self.overflow!r} is not one of {allowed}")


def _require(name: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise ValueError(f"{name}: must be at least {minimum}, got {value}")
