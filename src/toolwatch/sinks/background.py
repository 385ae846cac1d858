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
thread runs the writes, looks at its path (``follow``, a SIGHUP's ``reopen``: ``os.stat`` and
``open`` wait on the file system there, not on the event loop) and closes the files it left.
Two locks: ``_tell`` while telling ``failures`` (from both sides), then, inside it, ``_changed``
for the queue and its counts; the event loop holds ``_changed`` alone while it queues, and
never while it tells.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from toolwatch.sinks.destinations import lock_for
from toolwatch.sinks.linefile import TextOutput, WriteFailures, output_name

__all__ = [
    "FOLLOW_SECONDS",
    "GATHER_SECONDS",
    "OUTPUT_BACKLOG_CHARS",
    "ROOM_BUDGET_SECONDS",
    "ROOM_REFILL",
    "ROOM_SECONDS",
    "BackgroundOutput",
    "Look",
]

_log = logging.getLogger(__name__)

#: Characters of lines that may wait for an output's thread or be written by it: about 4,000
#: findings of 1 KiB. A blocked output holds at most this much as text (4 to 16 MiB: ``str``
#: keeps 1 to 4 bytes a character), or one longer line (a publication: a large run's
#: ToolTrace, or its many findings) taken alone, once nothing else waits, with nothing
#: queued beside it: that run's text instead. Beside either, what is being written, encoded:
#: under 1 MiB for a batch joined (``_BATCH_CHARS``), the long line's bytes for it (one
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
#: Characters the thread writes at once at most (one longer line alone): the copy a write
#: joins and encodes stays small beside the bound.
_BATCH_CHARS: Final = 64 * 1024
#: How long an output's thread gathers lines after the first before it writes them, unless a
#: batch's worth comes first or the engine has published what it completed at once
#: (``write_queued``): one wake-up and one
#: write for many publications (woken for each, the thread took 8% of the server's
#: throughput: ``make bench-compare``, 2,000 findings a second). Lines reach the file that
#: much later at most.
GATHER_SECONDS: Final = 0.05
#: How often an output's thread looks whether its file's path still names it (``follow``).
FOLLOW_SECONDS: Final = 1.0


#: What an output's thread asks of the file it writes, at most once every ``FOLLOW_SECONDS``
#: (``follow``), at once when it has none or a FIFO's reader is gone, and at a SIGHUP in its
#: place in the queue (``reopen``): ``None`` to go on with it (its path names it; or cannot
#: be opened, and it is not a regular file that was removed: one renamed away, a FIFO, whose
#: lines go to whoever still reads it); the file opened again at its path (the one written
#: was removed or renamed away: a log rotation; a FIFO its reader made again; none was
#: opened yet); or why its lines are lost, rather than written where no one can read them
#: (a regular file removed whose path cannot be opened: its directory was removed; or no
#: file opened yet: a FIFO no reader has opened). Run by the thread: a path on a hung mount
#: stalls that output alone, not the event loop.
Look = Callable[[TextOutput], "TextOutput | OSError | None"]


class _Reopen:
    """In the queue: write what follows to the file ``reopen`` opens, if it opens one, and
    close the one written before."""

    __slots__ = ("done", "reopen")

    def __init__(self, reopen: Look) -> None:
        self.reopen = reopen
        self.done = False  # run by the thread (``_reopened``)


class BackgroundOutput:
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
    to ``_BATCH_CHARS`` at a time in one write, or, when that fails, line by line, each
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
        self._queue: deque[str | _Reopen] = deque()
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
                    if idle or self._chars >= _BATCH_CHARS:
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
            if self._queue and isinstance(self._queue[-1], _Reopen):
                return  # one not taken yet looks as this one would (a blocked output)
            self._queue.append(_Reopen(reopen))
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

    def _run(self, stream: TextOutput) -> None:
        """The thread: writes the queue a batch at a time (``_write_next``) until the output
        is closed and everything is written, or ``close`` gave up on it; then closes the file,
        unless ``close`` gave up (``_abandoned``)."""
        while (written := self._write_next(stream)) is not None:
            stream = written
        if not self._abandoned:
            with contextlib.suppress(OSError):  # a full disk's failures were told as they came
                stream.close()

    def _write_next(self, stream: TextOutput) -> TextOutput | None:
        """Waits for lines (or a reopen), gathers more for up to ``GATHER_SECONDS`` unless
        ``_due``, and writes the batch taken (``_write_batch``): the file written last, or
        ``None`` when closing and everything is written (or ``close`` gave up on it)."""
        with self._changed:
            self._changed.wait_for(lambda: self._queue or self._closing)
            if not self._queue or self._abandoned:  # closing, everything written
                return None
            self._changed.wait_for(self._due, GATHER_SECONDS)
            batch = self._take()
            lines = [item for item in batch if isinstance(item, str)]
            self._busy = len(lines)
            self._busy_lines = sum(line.count("\n") for line in lines)
        try:
            stream = self._write_batch(stream, batch, lines)
        finally:
            done, items = sum(map(len, lines)), len(batch)
            batch, lines = [], []  # let go of them: no longer counted, no longer held
            self._batch_done(done, items)
        return stream

    def _write_batch(
        self, stream: TextOutput, batch: list[str | _Reopen], lines: list[str]
    ) -> TextOutput:
        """Writes ``batch``, whose writes are ``lines``, after looking at the path when it is
        time (``follow``); the file written last. A defect is logged, the writes not told yet
        are told lost, and a SIGHUP's reopen after them is run."""
        try:
            if self._follow is not None and self._looks(self._follow):
                stream = self._followed(self._follow, stream)
            return self._write(stream, batch)
        except Exception as exc:  # a defect here must not end the thread: the rest would wait
            _log.exception("writing %s failed", self.name)
            with self._changed:
                stream = self._latest  # a file it switched to before it raised
            self._lose_untold(stream, lines, exc)
            # A SIGHUP's reopen after the lines that raised: run it.
            for reopen in [i for i in batch if isinstance(i, _Reopen) and not i.done]:
                stream = self._reopened(stream, reopen)
            return stream

    def _batch_done(self, done: int, items: int) -> None:
        """The thread is through with a batch of ``items``, ``done`` characters of lines: no
        longer counted, once let go of; the stall ends once what waited when it began is
        through."""
        with self._changed:  # held until written: the bound is of the memory
            self._busy = self._busy_lines = self._writing = 0
            self._chars -= done
            self._done_items += items
            if self._done_items >= self._stall_ends:  # took what waited: it takes writes
                self._stalled = False
            self._changed.notify_all()

    def _lose_untold(self, stream: TextOutput, lines: list[str], exc: Exception) -> None:
        """Tells lost the writes of ``lines`` not told yet, the writing having raised: they
        are told in order (``_told``), so those are the last ``_busy``."""
        with self._changed:
            untold = lines[len(lines) - self._busy :] if self._busy else []
        error = OSError(errno.EIO, f"{type(exc).__name__}: {exc}")
        for line in untold:
            self._told(stream, error, [line])

    def _due(self) -> bool:
        """Whether the thread writes at once what waits, rather than gather more: a batch's
        worth, a shutdown, or what someone asked to be written (``write_queued``, ``written``,
        a line waiting for room) not all written yet."""
        return self._done_items < self._write_until or self._closing or self._chars >= _BATCH_CHARS

    def _looks(self, follow: Look) -> bool:
        """Whether the thread looks at its path (``follow``) before its next batch: once
        ``FOLLOW_SECONDS`` are past, and at each batch while it has no file to write
        (``_gone``): the lines are then lost only while the path cannot be opened."""
        return self._gone is not None or self._clock() >= self._next_look

    def _followed(self, follow: Look, stream: TextOutput) -> TextOutput:
        """The file to write, as ``follow`` finds it (``_looked``). Not while a SIGHUP's
        reopen waits (``reopen``): it looks itself."""
        self._next_look = self._clock() + FOLLOW_SECONDS
        with self._changed:
            if self._reopens:
                return stream
        return self._looked(stream, follow(stream))

    def _looked(self, stream: TextOutput, found: TextOutput | OSError | None) -> TextOutput:
        """The file to write once a ``Look`` (``follow``, a SIGHUP's ``reopen``) found
        ``found``: ``stream``, or the file opened again at its path when it was removed or
        renamed away; a removed one whose path cannot be opened loses its lines (``_gone``),
        rather than write a file no one can read, and is closed (its disk space freed). It
        stays lost until a file is opened at the path: ``None`` (go on) leaves it closed, and
        its lines lost for the reason known, not for "file closed"."""
        if isinstance(found, OSError):
            if self._gone is None:
                with contextlib.suppress(OSError):
                    stream.close()
            self._gone = found
            return stream
        if found is None:
            return stream
        return self._switched(stream, found)

    def _switched(self, stream: TextOutput, found: TextOutput) -> TextOutput:
        """``found`` written from now on (``fileno``, ``name``); ``stream`` closed."""
        self._gone = None
        with self._changed:
            self._latest = found
            self.name = output_name(found)
        with contextlib.suppress(OSError):
            stream.close()
        return found

    def _take(self) -> list[str | _Reopen]:
        """The queue's first items, up to ``_BATCH_CHARS`` of lines (one longer line alone)."""
        batch: list[str | _Reopen] = []
        chars = 0
        queued = self._queue
        while queued and chars < _BATCH_CHARS:
            item = queued[0]
            if isinstance(item, str):
                if batch and chars + len(item) > _BATCH_CHARS:
                    break
                chars += len(item)
            batch.append(queued.popleft())
        return batch

    def _write(self, stream: TextOutput, batch: list[str | _Reopen]) -> TextOutput:
        """Writes ``batch`` in order; the file written last."""
        lines: list[str] = []
        for item in batch:
            if isinstance(item, str):
                lines.append(item)
                continue
            stream = self._write_lines(stream, lines)
            lines = []
            stream = self._reopened(stream, item)
        return self._write_lines(stream, lines)

    def _reopened(self, stream: TextOutput, item: _Reopen) -> TextOutput:
        """Runs a SIGHUP's ``item`` (once, whatever raised around it); the file to write
        (``_looked``)."""
        item.done = True
        try:
            found = item.reopen(stream)
        except Exception:  # a defect: the file written stays
            _log.exception("opening %s again failed", self.name)
            return stream
        finally:
            with self._changed:  # ``follow`` looks again
                self._reopens -= 1
        return self._looked(stream, found)

    def _write_lines(self, stream: TextOutput, lines: list[str]) -> TextOutput:
        """Writes ``lines`` (``_write_some``), to the file a FIFO's reader made again when
        one was opened on the way; the file written last."""
        while lines and not self._abandoned:
            stream, lines = self._write_some(stream, lines)
        return stream

    def _write_some(self, stream: TextOutput, lines: list[str]) -> tuple[TextOutput, list[str]]:
        """Writes ``lines`` in one write; when that fails, one by one, so that what fits of
        them still goes in whole and each failure is told (as ``write_lines`` tells them).
        Nothing once ``close`` gave up on them (it counted them lost). A line the FIFO's
        reader was gone for (EPIPE) has the path looked at at once (``_followed``): when it
        opens another file (the FIFO its reader made again), or found the lines lost, the
        file to write and the lines left for it; else the file and no lines."""
        gone = self._gone
        if gone is not None:  # no file, or removed and its path cannot be opened: no one reads
            for line in lines:
                self._told(stream, gone, [line])
            return stream, []
        if len(lines) > 1 and self._wrote(stream, lines) is None:
            self._told(stream, None, lines)
            return stream, []
        return self._write_one_by_one(stream, lines)

    def _write_one_by_one(
        self, stream: TextOutput, lines: list[str]
    ) -> tuple[TextOutput, list[str]]:
        """``_write_some`` for one line, or when one write of ``lines`` failed: a write a
        line, each told (``_told``), until ``close`` gives up on them. At the first line a
        FIFO's reader was gone for (EPIPE), the path is looked at (``_followed``): when that
        opens another file or finds the lines lost, the file to write and the lines left for
        it; else the file and no lines."""
        looked = False
        for at, line in enumerate(lines):  # one by one: one that cannot be written loses no other
            if self._abandoned:
                break
            error = self._wrote(stream, [line])
            self._told(stream, error, [line])
            if error is None or error.errno != errno.EPIPE or looked or self._follow is None:
                continue
            looked = True  # once a write at most: the next lines would find what this found
            found = self._followed(self._follow, stream)
            if found is not stream or self._gone is not None:
                return found, lines[at + 1 :]
        return stream, []

    def _wrote(self, stream: TextOutput, lines: list[str]) -> OSError | None:
        """``_wrote`` of ``lines`` joined, ``close`` told that the system is taking them."""
        text = "".join(lines)
        with self._changed:
            self._writing = text.count("\n")
        with lock_for(stream):  # whole between another thread's lines to the same file
            return _wrote(stream, text)

    def _told(self, stream: TextOutput, error: OSError | None, lines: list[str]) -> None:
        """Tells ``failures`` that the writes ``lines`` were written (``error`` None) or
        lost; no more ``close``'s to count. Nothing once ``close`` counted them lost."""
        with self._tell:  # held: ``close`` counts a write either told here or lost
            if self._abandoned:
                return
            if error is None:
                self._failures.written(output_name(stream))
            else:
                self._failures.failed(output_name(stream), error)
            with self._changed:  # not while telling: the event loop's ``write`` takes it
                self._busy -= len(lines)
                self._busy_lines -= sum(line.count("\n") for line in lines)
                self._writing = 0


def _wrote(stream: TextOutput, text: str) -> OSError | None:
    """Writes ``text`` to ``stream``; why it could not, if it could not. A text the file
    cannot take (``UnicodeEncodeError``: a lone surrogate) fails as a full disk does."""
    try:
        stream.write(text)
        stream.flush()
    except OSError as error:
        return error
    except ValueError as error:  # a closed file, a text UTF-8 cannot encode
        return OSError(errno.EINVAL, f"{type(error).__name__}: {error}")
    return None
