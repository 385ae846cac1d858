"""When a full buffer under ``overflow: backpressure`` stops refusing (``Refusals``).

A buffer full of runs in flight makes no room by refusing: their last spans come in the very
batches it refuses, beside other runs' first ones (a Collector's or an SDK's batch holds
both), so nothing leaves it before ``max_trace_age`` while the senders give the refused
batches up (the OpenTelemetry SDKs after their 10 s export timeout) and lose them uncounted.
So ``TraceBuffer.admit`` refuses for ``max_refusal_ns`` at most: past it the buffer is
*stalled*, and takes each request by evicting (``TraceBuffer``), as ``evict_oldest`` does.

What is counted is one *episode* of refusals: it begins at a refusal, and holds what the
requests it refused needed (spans, bytes, new traces: the most any one of them did). It
ends when the buffer has that room: runs ended and were judged. Not at a request that fits:
a small one that fits where a larger one was refused, or one that only goes on with
buffered runs at ``max_traces``, leaves the larger batch, which may hold a run's end,
refused. A request that does not fit ``EPISODE_GAP_NS`` (60 s) after the last that did not
begins a new one: the requests counted were taken or given up, and what they needed may
never be free again (their runs fill it). Not sooner: a Collector retries one batch ever
further apart (up to 30 s), and each retry must count from the first refusal.

Not stalled while the completion checks are behind (by ``STALL_BEHIND_NS``, or two ticks
when ``tick_ns`` is longer): then what fills the buffer is runs not yet judged (assembly
stuck, the CPU short), refusing is what helps, and evicting would hide it (the runs judged
early would read as a buffer too small, and ToolwatchNoToolTraces never fire).

Not thread-safe: the buffer's event loop calls it. Compiled, as the buffer is.
"""

from __future__ import annotations

from typing import Final

__all__ = ["EPISODE_GAP_NS", "STALL_BEHIND_NS", "Refusals"]

#: A request that does not fit this long after the last that did not (refused, or taken by
#: evicting) begins a new episode: longer than a Collector's longest wait between retries
#: (30 s), so one batch retried counts from its first refusal, while an episode whose
#: requests were taken (their runs now filling the room they needed) does not linger.
EPISODE_GAP_NS: Final = 60_000_000_000

#: How far behind a full buffer's completion checks may be for it to be stalled, at least
#: (two ticks when ``tick_ns`` is longer): the ticker makes them every 10 ms by default.
STALL_BEHIND_NS: Final = 1_000_000_000


class Refusals:
    """The episode of refusals a full buffer is in, if any (module docstring).

    ``limit_ns``: ``max_refusal_ns`` (0: never stalled); ``tick_ns``: the ticker's period."""

    __slots__ = ("_behind", "_last", "_limit", "_need", "_since")

    def __init__(self, limit_ns: int, tick_ns: int) -> None:
        self._limit = limit_ns
        self._behind = max(STALL_BEHIND_NS, 2 * tick_ns)
        self._since: int | None = None  # when the episode's first refusal was
        self._last = 0  # when a request last did not fit
        self._need = (0, 0, 0)  # spans, bytes, new traces: the most a refused request needed

    def refused(self, now: int, spans: int, size_bytes: int, new_traces: int) -> None:
        """A request needing ``spans``, ``size_bytes`` and ``new_traces`` did not fit (refused,
        or taken by evicting)."""
        if self._since is None or now - self._last > EPISODE_GAP_NS:
            self._since = now
            self._need = (spans, size_bytes, new_traces)
        else:
            most_spans, most_bytes, most_traces = self._need
            self._need = (
                max(most_spans, spans),
                max(most_bytes, size_bytes),
                max(most_traces, new_traces),
            )
        self._last = now

    def settle(self, free_spans: int, free_bytes: int, free_traces: int) -> None:
        """End the episode if the buffer has the room its refused requests needed."""
        if self._since is None:
            return
        spans, size_bytes, traces = self._need
        if free_spans >= spans and free_bytes >= size_bytes and free_traces >= traces:
            self._since = None

    def stalled(self, now: int, next_due_ns: int | None) -> bool:
        """Whether the episode has lasted ``max_refusal_ns`` with the completion checks on
        time (the earliest still to make due at ``next_due_ns``, ``None``: none is)."""
        since = self._since
        if since is None or self._limit == 0 or now - since < self._limit:
            return False
        return next_due_ns is None or now - next_due_ns < self._behind
