"""The thread side of ``background.BackgroundOutput``: what an output's own thread does with
the lines the event loop queued. It waits for them, gathers more for up to
``GATHER_SECONDS``, writes up to ``BATCH_CHARS`` at once (line by line when that fails),
tells each write written or lost to the output's ``WriteFailures``, looks whether the file's
path still names it (``follow``, at most once every ``FOLLOW_SECONDS``; a SIGHUP's
``Reopen`` in its place in the queue) and closes the files it left.

Threading: every method here runs on the output's thread; the state it shares with the event
loop is the output's (``BackgroundOutput.__init__``), under its two locks, as
``toolwatch.sinks.background`` says.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Final

from toolwatch.sinks.destinations import lock_for
from toolwatch.sinks.linefile import TextOutput, WriteFailures, output_name

__all__ = [
    "BATCH_CHARS",
    "FOLLOW_SECONDS",
    "GATHER_SECONDS",
    "Look",
    "OutputThread",
    "Reopen",
]

_log = logging.getLogger(__name__)


#: Characters the thread writes at once at most (one longer line alone): the copy a write
#: joins and encodes stays small beside the bound.
BATCH_CHARS: Final = 64 * 1024
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


class Reopen:
    """In the queue: write what follows to the file ``reopen`` opens, if it opens one, and
    close the one written before."""

    __slots__ = ("done", "reopen")

    def __init__(self, reopen: Look) -> None:
        self.reopen = reopen
        self.done = False  # run by the thread (``_reopened``)


class OutputThread:
    """The writer thread's methods of a ``background.BackgroundOutput``, which is built on
    this class: its ``__init__`` sets the state declared here, and says what each is; its
    thread runs ``_run``."""

    name: str
    _follow: Look | None
    _clock: Callable[[], float]
    _next_look: float
    _gone: OSError | None
    _latest: TextOutput
    _failures: WriteFailures
    _queue: deque[str | Reopen]
    _chars: int
    _busy: int
    _busy_lines: int
    _writing: int
    _stalled: bool
    _done_items: int
    _stall_ends: int
    _closing: bool
    _write_until: int
    _abandoned: bool
    _tell: threading.Lock
    _changed: threading.Condition
    _reopens: int

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
        self, stream: TextOutput, batch: list[str | Reopen], lines: list[str]
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
            for reopen in [i for i in batch if isinstance(i, Reopen) and not i.done]:
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
        return self._done_items < self._write_until or self._closing or self._chars >= BATCH_CHARS

    def _looks(self, follow: Look) -> bool:
        """Whether the thread looks at its path (``follow``) before its next batch: once
        ``FOLLOW_SECONDS`` are past, and at each batch while it has no file to write
        (``_gone``): the lines are then lost only while the path cannot be opened."""
        return self._gone is not None or self._clock() >= self._next_look

    def _followed(self, follow: Look, stream: TextOutput) -> TextOutput:
        """The file to write, as ``follow`` finds it (``_looked``). Not while a SIGHUP's
        reopen waits (``reopen``): it looks itself; nor once ``close`` gave up on the output
        (``_abandoned``): what is at its path then is none of its business (a ``/dev/fd/N``
        whose descriptor was closed and given to another file)."""
        self._next_look = self._clock() + FOLLOW_SECONDS
        with self._changed:
            if self._reopens or self._abandoned:
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

    def _take(self) -> list[str | Reopen]:
        """The queue's first items, up to ``BATCH_CHARS`` of lines (one longer line alone)."""
        batch: list[str | Reopen] = []
        chars = 0
        queued = self._queue
        while queued and chars < BATCH_CHARS:
            item = queued[0]
            if isinstance(item, str):
                if batch and chars + len(item) > BATCH_CHARS:
                    break
                chars += len(item)
            batch.append(queued.popleft())
        return batch

    def _write(self, stream: TextOutput, batch: list[str | Reopen]) -> TextOutput:
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

    def _reopened(self, stream: TextOutput, item: Reopen) -> TextOutput:
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
