"""``toolwatch replay``'s assembly of recorded OTLP spans into ToolTraces, as serve assembles
live ones: the server's trace buffer and timeline, on a clock of recorded time
(``OfflineAssembler``). By default every span is held until the input ends and the runs
come in the order they started; with ``--stream`` a trace is evaluated once the recording
has moved on past it (``RECORDED_SETTLE_NS``, ``RECORDED_MAX_AGE_NS``).

Memory: without ``--stream``, every span of the input (about three times the size of its
OTLP/JSON); with it, the traces in flight in recorded time.
"""

from __future__ import annotations

import heapq
import itertools
import json
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from statistics import median_low
from typing import Any, Final

from toolwatch.assembly.buffer import REPORTED_DROPS, TraceBuffer
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.config import Config
from toolwatch.ingest.decode_types import DecodeError
from toolwatch.ingest.otlp_json import decode_otlp_json
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock
from toolwatch.model_traces import ToolTrace
from toolwatch.replay_files import CLOCK_RECORDS, ReplayInputError

__all__ = ["RECORDED_MAX_AGE_NS", "RECORDED_SETTLE_NS", "OfflineAssembler"]


#: With ``--stream``: how long replay holds a trace after its last span, in the recorded time
#: of the spans (their end times): a span can reach a capture well after it ended (an SDK's
#: batch, a Collector's retries, 300 s by default), so replay waits at least this long, or
#: the configured ``completion_wait`` if longer.
RECORDED_SETTLE_NS: Final = 300 * 10**9
#: With ``--stream``: how long replay waits for the root (or outermost agent) of a trace,
#: in recorded time since its first span, or the configured ``max_trace_age`` if longer;
#: then it is evaluated as ``timed_out``, as a server evaluates a trace whose root never came.
RECORDED_MAX_AGE_NS: Final = 24 * 3600 * 10**9


class OfflineAssembler:
    """Assembles recorded spans with the server's buffer, on a clock of recorded time.

    Recorded spans carry no arrival time. By default the clock never moves: every span is
    held until the input ends (``finish``), then each trace is evaluated, complete if its
    root came, else ``timed_out``.

    With ``stream``, the clock follows the recording: the median of the latest end time of
    each of the last ``CLOCK_RECORDS`` records read, never going back. A record's spans
    arrive at its latest end time (or the clock, if later), and a trace is evaluated once
    the clock has moved ``RECORDED_SETTLE_NS`` past its last span's arrival (or
    ``RECORDED_MAX_AGE_NS`` past its first, waiting for a root that never came), so a
    capture in time order holds only the traces in flight. A span that comes after its
    trace was evaluated (input out of time order by more than that wait: a file's own
    records, since several files are merged in time order by ``replay_files.in_time_order``)
    is left out and named (``warn``), however late it comes in recorded time: replay
    remembers the ids of the last ``max_remembered_traces`` traces it evaluated without
    serve's ``late_span_window``, since a span that started a second, partial run would be a
    finding about nothing.

    The other limits are serve's (``assembly``): a trace whose agent waits for a local
    parent is anchored after ``local_parent_wait_seconds`` as there, once it has settled.
    """

    def __init__(
        self, config: Config, warn: Callable[[str], None] | None = None, *, stream: bool = False
    ) -> None:
        self._warn = warn
        self._stream = stream
        self._recent: deque[int] = deque(maxlen=CLOCK_RECORDS)
        self._clock = ManualClock(start_ns=0)
        self._now = 0  # the clock: what traces settle on
        self._furthest = 0  # the latest arrival: past it, every held trace is due
        # serve's limits, every one (local_parent_wait_ns, overflow, ...) but those replaced
        # here for recorded time: a field left out would fall back to its default.
        limits = config.assembly.limits()
        self.limits = replace(
            limits,
            completion_wait_ns=max(limits.completion_wait_ns, RECORDED_SETTLE_NS),
            max_trace_age_ns=max(limits.max_trace_age_ns, RECORDED_MAX_AGE_NS),
            # Remembered as long as there is room (see above), unless turned off (0).
            late_span_window_ns=2**62 if limits.late_span_window_ns else 0,
            max_traces=2**62,  # the operator's own file: held by the recorded time alone
            max_buffered_spans=2**62,
            max_buffered_bytes=2**62,
        )
        self._buffer = TraceBuffer(self.limits, self._clock, NoopMetrics())
        self._normalize = config.policy.normalizer()
        # ``ingest.decoder`` is what a server must run; replay decodes its file with what
        # this install has (``auto``), so a production configuration replays anywhere.
        self._options = replace(config.decode_options(), decoder="auto")
        self._skipped = 0  # traces of no agent run, left out
        self.peak_buffered_spans = 0

    def add(self, record: dict[str, Any], where: str) -> list[ToolTrace]:
        """Buffer one recorded request's spans; return the runs of the traces it settled."""
        try:
            # No bound on its objects: the file is the operator's own, read a line at a time.
            batch = decode_otlp_json(json.dumps(record), self._options, sys.maxsize)
        except DecodeError as exc:
            raise ReplayInputError(f"{where}: {exc}") from None
        if batch.rejected and self._warn is not None:
            count = sum(batch.rejected.values())
            self._warn(f"{where}: {count} span(s) left out as invalid: {batch.error_message}")
        latest = max((span.end_ns for span in batch.spans), default=0)  # 0: no end time set
        if self._stream and latest > 0:
            if not self._recent:
                self._now = latest  # where the recording starts
            self._recent.append(latest)
            if len(self._recent) == CLOCK_RECORDS:
                self._now = max(self._now, median_low(self._recent))
            # The spans arrive at their own recorded time, never before the clock: when the
            # clock jumps (a quiet hour in the recording), a run read just before the jump
            # still waits its full settle time for the rest of its spans.
            self._clock.now_ns = max(self._now, latest)
            self._furthest = max(self._furthest, self._clock.now_ns)
        refused: dict[str, int] = {}
        self._buffer.add(batch.spans, refused, batch.rejected_traces)  # as the server does
        self._clock.now_ns = self._now  # traces settle on the clock
        self.peak_buffered_spans = max(self.peak_buffered_spans, self._buffer.buffered_spans)
        if refused and self._warn is not None:
            self._warn(f"{where}: {self._refusal(refused)}")
        return list(self._runs(self._buffer.poll()))

    def finish(self) -> Iterator[ToolTrace]:
        """The runs of every trace still held, in the order they started (``_by_start``):
        the input has ended."""
        self._clock.now_ns = self._furthest + self.limits.max_trace_age_ns
        yield from self._by_start([*self._buffer.poll(), *self._buffer.drain()])
        if self._skipped and self._warn is not None:
            self._warn(
                f"{self._skipped} trace(s) with no agent, model or tool span left out, as serve"
                " leaves them out (not_an_agent_run)"
            )

    def _by_start(self, completed: list[CompletedTrace]) -> Iterator[ToolTrace]:
        """The runs of ``completed`` in start order, as serve judges them when they come live,
        whatever the order of the files: with ``verification_scope: conversation`` what a
        conversation's earlier turn verified counts in its later ones. A trace's runs are
        built once those that started before its first span are out, so what is built and
        waiting at once is the runs that overlap in time; ``completed`` is emptied as it
        goes."""
        completed.sort(key=lambda t: (_first_start(t), t.trace_id), reverse=True)
        waiting: list[tuple[int, str, int, ToolTrace]] = []  # a heap, by start
        built = itertools.count()  # ties in the order built: no ToolTraces compared
        while completed:
            trace = completed.pop()  # the earliest left: freed once its runs are out
            first = _first_start(trace)
            while waiting and waiting[0][0] <= first:
                yield heapq.heappop(waiting)[-1]
            for run in self._runs([trace]):
                heapq.heappush(waiting, (run.start_ns, run.run_span_id or "", next(built), run))
        while waiting:
            yield heapq.heappop(waiting)[-1]

    def _runs(self, completed: Iterable[CompletedTrace]) -> Iterator[ToolTrace]:
        for trace in completed:
            if trace.agent_run:
                history = self.limits.missing_spans_from_history
                yield from build_tool_traces(trace, self._normalize, from_history=history)
            else:
                self._skipped += 1

    def _refusal(self, refused: Mapping[str, int]) -> str:
        parts = []
        for reason, count in sorted(refused.items()):
            if reason == "late":
                settle = self.limits.completion_wait_ns // 10**9
                why = (
                    "their trace was already evaluated: the input is not in time order, or"
                    f" they were recorded more than {settle} s after the rest of it (without"
                    " --stream, replay holds every span until the input ends)"
                )
            else:
                why = REPORTED_DROPS[reason]
            parts.append(f"{count} span(s) left out: {why}")
        return "; ".join(parts)


def _first_start(trace: CompletedTrace) -> int:
    """When the first span of ``trace`` started: no run of it starts earlier."""
    return min((span.start_ns for span in trace.spans), default=0)
