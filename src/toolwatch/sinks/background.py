"""Outputs written on threads of their own, so that an output that blocks stalls nothing
else.

``serve`` writes its findings log, its ToolTrace dump and its log lines as they come. Where one
of them blocks (standard output into a container runtime's log driver whose collector is slow or
down, Docker's default ``mode=blocking``; a file on a hung network mount), a write on the event
loop would stop everything with it: every export to toolwatch, the ticker that completes runs,
``/metrics`` (the alerts' own input) and ``/healthz`` (a liveness probe then kills the pod, and
what was buffered with it). So the event loop only queues what is to be written:
``BackgroundOutput`` queues lines for one output's writer thread. Up to ``limit`` characters
(4 Mi by default) wait or are being written, or one longer line alone; a line that would pass
them waits for room, at most ``ROOM_SECONDS``, and such waits at most ``ROOM_BUDGET_SECONDS``
in all, coming back at ``ROOM_REFILL`` of the time; past them it is lost, told to the
output's ``WriteFailures`` (``toolwatch_output_failures_total``, and a log line by outage),
while metrics, pages and the other outputs go on. Log lines have a thread of their own too
(``toolwatch.sinks.logqueue``).

Threading: ``write``, ``reopen`` and ``stop_taking`` are called from the event loop, ``close``
and ``written`` from any one thread (``App.stop`` closes in an executor); each output's own
thread (``toolwatch.sinks.background_thread``) runs the writes, looks at its path (``follow``, a
SIGHUP's ``reopen``: ``os.stat`` and ``open`` wait on the file system there, not on the event
loop) and closes the files it left. Two locks: ``_tell`` while telling ``failures`` (from both
sides), then, inside it, ``_changed`` for the queue and its counts; the event loop holds
``_changed`` alone while it queues, and never while it tells.
"""

from __future__ import annotations

import errno
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from toolwatch.sinks.background_thread import (
    BATCH_CHARS,
    FOLLOW_SECONDS,
    Look,
    OutputThread,
    Reopen,
)
from toolwatch.sinks.linefile import TextOutput, WriteFailures, output_name

__all__ = [
    "OUTPUT_BACKLOG_CHARS",
    "ROOM_BUDGET_SECONDS",
    "ROOM_REFILL",
    "ROOM_SECONDS",
    "BackgroundOutput",
]

#: Characters of lines that may wait for an output's thread or be written by it: about 4,000
#: findings of 1 KiB. A blocked output holds at most this much as text (4 to 16 MiB: ``str``
#: keeps 1 to 4 bytes a character), or one longer line (a publication: a large run's
#: ToolTrace, or its many findings) taken alone, once nothing else waits, with nothing
#: queued beside it: that run's text instead. Beside either, what is being written, encoded:
#: under 1 MiB for a batch joined (``BATCH_CHARS``), the long line's bytes for it (one
#: ``write(2)``, so that another process appending to the file cannot land inside it). A line
#: is not refused for its length: the event loop built it already, and a healthy file
#: takes it; a blocked output keeps at most one.
OUTPUT_BACKLOG_CHARS: Final = 4 * 1024 * 1024
#: How long one line that does not fit waits for room at most (the event loop waits with it):
#: an output that makes none within it is blocked, and lines that do not fit are then lost at
#: once until it has written what waited when that wait began.
ROOM_SECONDS: Final = 0.5
#: How long lines that do not fit may wait for room in all, at once: a healthy disk behind by
#: a few large ToolTraces (one of 1 MiB every 0.2 s at 5 MB/s) makes room within it.
ROOM_BUDGET_SECONDS: Final = 1.0
#: The share of time that budget comes back at (0.1 s a second): however an output takes its
#: writes (a batch now and then, just within each wait), the event loop waits for it at most
#: a tenth of the time, once the budget is spent; spent, the output counts as blocked.
ROOM_REFILL: Final = 0.1


class BackgroundOutput(OutputThread):
    """A ``TextOutput`` written by a thread of its own; ``write`` never raises, and waits for
    room only while the output takes writes.

    Each ``write`` (whole lines: one publication) is queued while the characters waiting or
    being written stay within ``limit`` (a line longer than ``limit`` still goes alone, once
    nothing else waits, and nothing else is queued while it waits or is written; the thread
    lets go of each batch once written). One that would pass it waits for the thread to make
    room, up to ``ROOM_SECONDS``, out of a budget of ``ROOM_BUDGET_SECONDS`` that comes back
    at ``ROOM_REFILL`` seconds a second. When a wait ran out, or spent the budget, the output
    counts as blocked: that line (if it got no room) and every later one that does not fit
    are lost at once (told to ``failures``) until the thread has written what waited then.
    So an output that takes a batch now and then, just within each wait, makes the event
    loop wait for a second or so, then a tenth of the time at most, not for every batch;
    a disk slower than the lines come but working makes room for each. The thread writes up
    to ``BATCH_CHARS`` at a time in one write, or, when that fails, line by line, each
    failure told to ``failures`` as ``write_lines`` tells them (so a full disk loses only
    what did not fit). Given ``follow``, the thread looks at most once every
    ``FOLLOW_SECONDS`` whether the file's path still names it, and opens it again there when
    not, as at a SIGHUP (``reopen``); at once, at each batch, while it has no file to write
    (``unopened``: why ``stream`` is none yet, a FIFO no reader had opened at start-up; or a
    removed file whose path could not be opened), and after a write a FIFO's reader was
    gone for (EPIPE), so that a reader back at a FIFO made again loses that line alone.
    ``clock`` times that and the waits for room. ``close`` writes what is queued, for a
    bounded time, then closes the file.
    """

    def __init__(
        self,
        stream: TextOutput,
        failures: WriteFailures,
        limit: int = OUTPUT_BACKLOG_CHARS,
        *,
        follow: Look | None = None,
        clock: Callable[[], float] = time.monotonic,
        unopened: OSError | None = None,
    ) -> None:
        self.name = output_name(stream)
        self._follow = follow
        self._clock = clock
        now = clock()
        self._next_look = now + FOLLOW_SECONDS  # when ``follow`` is asked next
        self._gone = unopened  # why the file written is lost (``follow``), or none is opened
        self._latest = stream  # the file the thread writes (``reopen``, ``follow``)
        self._failures = failures
        self._limit = limit
        self._queue: deque[str | Reopen] = deque()
        self._chars = 0  # of the lines queued or being written
        self._busy = 0  # writes taken by the thread, not yet told written or lost
        self._busy_lines = 0  # the lines they hold
        self._writing = 0  # lines of the write the system is taking now
        self._stalled = False  # the waits for room ran out: lines that do not fit are lost
        self._budget = ROOM_BUDGET_SECONDS  # seconds lines may still wait for room
        self._budget_at = now  # ``clock`` when it was last reckoned
        self._queued_items = 0  # writes and reopens ever queued
        self._done_items = 0  # of them, those the thread is through with
        self._reopens = 0  # reopens queued, not yet through: ``follow`` waits for them
        self._stall_ends = 0  # ``_done_items`` at which the stall ends: what waited when it began
        self._closing = False  # no more lines taken: the thread writes what is queued
        self._write_until = 0  # ``_done_items`` up to which it writes without gathering
        self._abandoned = False  # ``close`` counted what is left lost: nothing more written
        self._tell = threading.Lock()  # ``failures`` is told from both threads
        self._changed = threading.Condition()
        self._thread = threading.Thread(
            target=self._run, args=(stream,), name=f"toolwatch-output {self.name}", daemon=True
        )
        self._thread.start()

    def write(self, text: str, /) -> int:
        """Queues ``text`` (whole lines) for the thread, waiting for room while the output
        takes writes; or loses it (told to ``failures``)."""
        size = len(text)
        with self._changed:
            if not self._closing:
                if not self._fits(size) and not self._stalled:
                    self._wait_for_room(size)
                if not self._closing and self._fits(size):
                    idle = not self._queue
                    self._queue.append(text)
                    self._chars += size
                    self._queued_items += 1
                    # Woken for the first line, or a batch's worth: the thread gathers the
                    # rest for up to GATHER_SECONDS, one wake-up for many publications.
                    if idle or self._chars >= BATCH_CHARS:
                        self._changed.notify_all()
                    return size
            closing, waiting = self._closing, self._chars
        if closing:
            self._lost(1, "written after the output was closed")
        else:
            self._lost(1, f"{waiting:,} characters written before it still wait to be written")
        return size

    def _wait_for_room(self, size: int) -> None:
        """Waits, the lock held, for room for ``size`` characters, up to ``ROOM_SECONDS`` and
        what is left of the budget; when that ran out or was spent, the output is stalled
        until it has written what waits now."""
        start = self._clock()
        budget = min(ROOM_BUDGET_SECONDS, self._budget + (start - self._budget_at) * ROOM_REFILL)
        self._write_until = self._queued_items  # what waits, without gathering more
        self._changed.notify_all()
        room = self._changed.wait_for(
            lambda: self._closing or self._fits(size), min(ROOM_SECONDS, budget)
        )
        self._budget_at = self._clock()
        self._budget = budget - (self._budget_at - start)
        if not room or self._budget <= 0:
            self._stalled = True
            self._stall_ends = self._queued_items

    def _fits(self, size: int) -> bool:
        return self._chars == 0 or self._chars + size <= self._limit

    def flush(self) -> None:
        """Nothing to do: called after each publication, it would undo the gathering (the
        thread writes what is queued within ``GATHER_SECONDS``; ``write_queued`` at once)."""

    def write_queued(self) -> None:
        """The thread writes what is queued now, without gathering more: once the engine has
        published the traces it completed at once (``EngineParts.published``), so that the
        findings it counted reach the file with the metrics."""
        with self._changed:
            if self._queue:
                self._write_until = self._queued_items
                self._changed.notify_all()

    def fileno(self) -> int:
        """The descriptor of the file the thread writes."""
        with self._changed:
            return self._latest.fileno()

    def reopen(self, reopen: Look) -> None:
        """A SIGHUP: the thread runs ``reopen`` once it has written the lines queued before,
        which go where they were going; those written from now on go to the file it opens,
        if it opens one, and the one before is closed, or are lost when it says why (as
        ``follow``'s). At once, without gathering. Nothing once the output stopped taking
        lines."""
        with self._changed:
            if self._closing:
                return
            if self._queue and isinstance(self._queue[-1], Reopen):
                return  # one not taken yet looks as this one would (a blocked output)
            self._queue.append(Reopen(reopen))
            self._queued_items += 1
            self._reopens += 1
            self._write_until = self._queued_items
            self._changed.notify_all()

    def written(self, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds for what was queued by now to be written (or lost,
        and counted), without gathering; whether it was. Lines queued meanwhile are not
        waited for (a busy server's would never all be written at once)."""
        with self._changed:
            target = self._write_until = self._queued_items
            self._changed.notify_all()
            return self._changed.wait_for(
                lambda: self._abandoned or self._done_items >= target, timeout
            )

    def stop_taking(self) -> None:
        """Lines written from now on are lost; the thread writes what is queued, then closes
        the file (``close`` waits for it)."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()

    def close(self, timeout: float = 5.0, grace: float | None = None) -> None:
        """Writes what is queued, waiting up to ``timeout`` seconds, then closes the file.
        Past it, what is still queued or being written is counted lost, told in one log
        line as the shutdown's ``grace`` (``timeout`` by default: the time the thread had
        since ``stop_taking``) running out, and the thread writes nothing more: the lines
        the system is taking then (the thread blocked in its write) may still reach the
        file. The file is left to that thread, which the process exits without."""
        self.stop_taking()
        self._thread.join(max(timeout, 0.0))
        with self._tell:  # a write is either told by the thread (``_told``) or counted here
            with self._changed:
                waiting = [item for item in self._queue if isinstance(item, str)]
                if self._abandoned or not self._thread.is_alive() or not (waiting or self._busy):
                    return  # written, or the thread is closing the file
                self._abandoned = True
                writes, writing = self._busy + len(waiting), self._writing
                unwritten = self._busy_lines - writing + sum(item.count("\n") for item in waiting)
                self._queue.clear()
            told = []
            if unwritten:
                told.append(f"{unwritten:,} line(s) not written")
            if writing:  # counted lost: nothing says whether the system took them, in part
                told.append(f"{writing:,} being written, which the file may hold in part")
            shown = max(timeout if grace is None else grace, 0.0)
            self._failures.lost(
                self.name, writes, f"the shutdown's {shown:g} s ran out with {' and '.join(told)}"
            )

    def _lost(self, count: int, reason: str) -> None:
        error = OSError(errno.EAGAIN, f"blocked: {reason}")
        with self._tell:
            for _ in range(count):
                self._failures.failed(self.name, error)
