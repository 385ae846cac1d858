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

Threading: one writer (the event loop); not thread-safe.
"""

from __future__ import annotations

import os
from typing import Protocol

__all__ = ["LineFile", "TextOutput"]


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

    def __init__(self, path: str, mode: int = 0o666) -> None:
        self.name = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
        self._torn = False  # a torn line is at the end: start the next on a line of its own

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
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
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
    except OSError:
        return False
    return True
