"""The output files of ``serve`` (findings log, ToolTrace dump), written whole lines or none.

A file ``open`` returns buffers what it could not write. On a full disk (ENOSPC; EFBIG past a
file size limit; EROFS on a volume remounted read-only) the system takes what fits of a line
and refuses the rest: the buffer keeps up to 8 KiB of it and writes that out once there is
room again, a longer line loses its middle, and the next line written is joined to what the
file holds of it. The findings log then held findings counted as lost
(``toolwatch_output_failures_total``), and a line that is no JSON with the next finding inside
it, which a log shipper drops, and on which ``replay`` refuses a ToolTrace dump.

``LineFile`` buffers nothing: each ``write`` goes to the system at once, all of it or, when
that fails, none of it: the part the system took is cut off again (``ftruncate`` back to where
the line began), so a write that raised is lost whole and one that returned is in the file.
Where the part cannot be cut off (not a regular file, another writer moved the end, the
truncation fails too), the next write starts a new line, so that only the torn part is lost.
A line is one ``write(2)``; where the system takes part of it and returns (a pipe or a
socket left non-blocking and full; a stream socket's write that a signal interrupted), the
rest is written next, before anything else, so that a reader gets the line whole.

``WriteFailures`` tells an output's failed writes (to a metric, and logged by outage).

Threading: not thread-safe; each ``LineFile`` is written by one thread, its output's
(``background.BackgroundOutput``), which also closes it. It is opened on the event loop at
start-up, or on that thread when it opens its path again (``outputs._Look``).
``WriteFailures`` is told from the event loop (a line lost waiting for room), the output's
thread and the thread that closes it, always under its output's ``_tell`` lock;
``write_lines`` runs on whatever thread writes its stream (the event loop, into a
``BackgroundOutput``'s queue).
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from collections.abc import Callable
from typing import Protocol

from toolwatch.sinks.destinations import wait_writable

__all__ = ["LineFile", "TextOutput", "WriteFailures", "output_name", "write_lines"]


class TextOutput(Protocol):
    """What the line writers need of their file: a ``LineFile``, standard output (``-``), or
    any text stream (``io.StringIO`` in tests)."""

    def write(self, text: str, /) -> int: ...
    def flush(self) -> None: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...


class LineFile:
    """``path`` opened to append (created with ``mode`` as the umask allows); ``write`` takes
    whole lines. Raises ``OSError`` as ``os.open`` does."""

    __slots__ = ("_fd", "_torn", "name")

    def __init__(self, path: str, mode: int = 0o666, fd: int | None = None) -> None:
        self.name = path
        if fd is None:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
        try:  # as open(path, "a") does: a file that cannot be appended to (/proc's) fails here
            os.lseek(fd, 0, os.SEEK_END)
        except OSError as error:
            if error.errno != errno.ESPIPE:  # a pipe or a FIFO has no end to seek
                os.close(fd)
                raise
        self._fd: int | None = fd
        self._torn = False  # a torn line is at the end: start the next on a line of its own

    @classmethod
    def standard_output(cls) -> LineFile:
        """Standard output (``copied``), written whole lines or none as a file is:
        ``serve >> findings.jsonl`` on a full disk, or a pipe."""
        return cls.copied("<stdout>", 1)

    @classmethod
    def copied(cls, name: str, fd: int) -> LineFile:
        """A copy of descriptor ``fd`` (``os.dup``: not inherited by children; ``close``
        closes it alone) written as ``name``: standard output, or a socket that a path such
        as ``/dev/stderr`` names, which Linux opens none by name (``output_files``). What
        Python buffered for it (``sys.stdout``, ``sys.stderr``) is written first."""
        buffered = {1: sys.stdout, 2: sys.stderr}.get(fd)
        if buffered is not None:
            buffered.flush()
        return cls(name, fd=os.dup(fd))

    @property
    def closed(self) -> bool:
        return self._fd is None

    def fileno(self) -> int:
        if self._fd is None:
            raise ValueError(f"{self.name}: file closed")
        return self._fd

    def write(self, text: str, /) -> int:
        """Appends ``text`` (whole lines), or raises ``OSError`` having appended none of it."""
        fd = self.fileno()
        data = text.encode("utf-8")
        if self._torn:
            data = b"\n" + data
        start = _end(fd)
        written = 0
        view = memoryview(data)  # a partial write's rest is no copy of it
        try:
            while written < len(data):
                try:
                    written += os.write(fd, view[written:])
                except BlockingIOError:  # a non-blocking pipe or socket, full: wait, as if blocking
                    wait_writable(fd)
        except OSError:
            if written:  # a line torn before stays at the end even when this one is cut
                self._torn = self._torn or not _cut(fd, start, written)
            raise
        self._torn = False
        return len(text)

    def flush(self) -> None:
        """Nothing is buffered."""

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _end(fd: int) -> int | None:
    """Where the file ends (an appending write starts there); ``None`` for a pipe or device."""
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    except OSError:
        return None


def _cut(fd: int, start: int | None, written: int) -> bool:
    """Cuts the ``written`` bytes of a failed write off again; whether the file now ends where
    it did. Only when it holds exactly those after ``start``: a ``copytruncate`` in between
    must not be undone (the file extended with zeros)."""
    if start is None:
        return False
    try:
        if os.fstat(fd).st_size != start + written:
            return False
        os.ftruncate(fd, start)
        os.lseek(fd, start, os.SEEK_SET)  # a descriptor not opened to append (stdout's >)
    except OSError:
        return False
    return True


def output_name(stream: TextOutput) -> str:
    """The path ``stream`` writes (``<stdout>`` for standard output), for messages."""
    return str(getattr(stream, "name", "?"))


class WriteFailures:
    """The failed writes of one output, ``what`` (``the findings log``): each told to
    ``failed`` (a metric), and logged by outage: the 1st, 2nd, 4th, ... failure in a row,
    then, at the next write that works, that it works again. Counted from each outage's
    start, so that a second full disk is logged however many writes the first one failed."""

    __slots__ = ("_failed", "_log", "_streak", "what")

    def __init__(self, what: str, failed: Callable[[], None], log: logging.Logger) -> None:
        self.what = what
        self._failed = failed
        self._log = log
        self._streak = 0  # failures since the last write that worked

    def failed(self, where: str, error: OSError) -> None:
        self._failed()
        self._streak += 1
        streak = self._streak
        if streak & (streak - 1) == 0:  # a power of two
            reason = error.strerror or str(error)
            self._log.error(
                "could not write %s (%s): %s (%s in a row)",
                self.what,
                where,
                reason,
                _failures(streak),
            )

    def lost(self, where: str, count: int, reason: str) -> None:
        """``count`` writes lost at once (a shutdown's grace ran out): each told to
        ``failed``, and ``reason`` logged in one line, whatever the outage logged before."""
        for _ in range(count):
            self._failed()
        self._streak += count
        self._log.error("could not write %s (%s): %s", self.what, where, reason)

    def written(self, where: str) -> None:
        if self._streak:
            streak, self._streak = self._streak, 0
            self._log.info(
                "%s (%s) is written again, after %s in a row", self.what, where, _failures(streak)
            )


def write_lines(stream: TextOutput, text: str, failures: WriteFailures | None) -> None:
    """``text`` (whole lines) written to ``stream`` and flushed. A write that fails is told
    to ``failures`` (the metric, the outage's log lines) and lost, not raised; without
    ``failures`` it raises ``OSError``."""
    try:
        stream.write(text)
        stream.flush()
    except OSError as error:
        if failures is None:
            raise
        failures.failed(output_name(stream), error)
        return
    if failures is not None:
        failures.written(output_name(stream))


def _failures(count: int) -> str:
    return f"{count} failure" if count == 1 else f"{count} failures"
