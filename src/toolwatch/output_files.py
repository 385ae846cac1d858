"""Opening the files ``serve`` writes (``output.findings``, ``output.dump_tooltraces``), at
start-up and when an output's thread opens its path again (``outputs._Look``).

Nothing here waits for a reader: a FIFO is opened with ``O_NONBLOCK``, so one that no reader
has opened yet fails at once (``NoReaderError``) rather than hold start-up, before any
listener is bound, or an output's thread, in silence; once opened it is written blocking. An
output whose FIFO had no reader at start-up writes ``Unopened`` until its thread opens one.

A path that names one of the process's own descriptors (``/dev/stderr``, ``/dev/fd/N``,
``/proc/self/fd/N``: ``toolwatch.descriptors``) is opened as any path, but a socket there
(standard error under systemd: the journal's stream socket) cannot be opened by name
(ENXIO): a copy of its descriptor is written instead. One not open is said to be.

Threading: none of its own; called from the event loop (start-up) and from each output's
thread (its look).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
from collections.abc import Callable

from toolwatch.config import private_file_warning
from toolwatch.descriptors import descriptor_name, descriptor_named
from toolwatch.sinks.linefile import LineFile

__all__ = ["NoReaderError", "OutputError", "Unopened", "open_text", "open_there"]

log = logging.getLogger("toolwatch.outputs")  # the outputs' messages, under one name


class OutputError(Exception):
    """An output file cannot be opened; the message names the setting and the reason."""


class NoReaderError(OSError):
    """A FIFO that no process has opened to read: opened to write without waiting, it fails
    (ENXIO), rather than block until a reader comes."""


class Unopened:
    """What an output writes while no file is opened at its path yet: start-up found a FIFO
    there that no reader had opened (``outputs._background``). ``BackgroundOutput`` loses its
    lines for ``reason``, counted, without writing them; ``outputs._Look`` opens what the
    path holds once it can, and never creates it (a FIFO's path is its reader's)."""

    __slots__ = ("name", "reason")

    def __init__(self, path: str, reason: OSError) -> None:
        self.name = path
        self.reason = reason

    def write(self, text: str, /) -> int:
        reason = self.reason
        raise OSError(reason.errno, reason.strerror, self.name)

    def flush(self) -> None:
        """Nothing is buffered."""

    def fileno(self) -> int:
        raise ValueError(f"{self.name}: not opened yet")  # as a closed file says

    def close(self) -> None:
        """Nothing is open."""


def open_text(setting: str, target: str, private: bool = False) -> LineFile:
    """``target`` opened to append lines (``-``: stdout), each written whole or not at all
    (``LineFile``: a full disk tears none); created with mode 0600 when ``private``, else as
    the umask says. An existing file keeps its mode: a private one that others may read is
    warned about. Opened without waiting for a reader (``_opened``): a FIFO no reader has
    opened yet raises at once (its cause a ``NoReaderError``), never blocks. A path that
    names a socket the process has open (``/dev/stderr`` under systemd) has a copy of its
    descriptor written (``_copied``). Raises ``OutputError`` naming ``setting``."""
    if target == "-":
        return _checked(setting, target, False, LineFile.standard_output)
    mode = 0o600 if private else 0o666
    return _checked(setting, target, private, functools.partial(_opened, target, mode))


def open_there(setting: str, path: str, private: bool) -> LineFile:
    """``path`` opened as ``open_text`` opens it, but only what is there (never created).
    Raises ``OutputError`` naming ``setting``."""
    return _checked(setting, path, private, functools.partial(_opened, path, None))


def _opened(path: str, create: int | None) -> LineFile:
    """``path`` opened to append lines, created with mode ``create`` when missing (never,
    given ``None``), without waiting for a reader (``O_NONBLOCK``: a FIFO that has none
    fails, ``NoReaderError``; a blocking ``open(2)`` would wait, in silence, until one came).
    Then written blocking, as a pipe is (``LineFile`` waits out a full pipe left
    non-blocking too). A socket the process has open, named by a path such as
    ``/dev/stderr``, which Linux does not open (ENXIO): a copy of its descriptor
    (``_copied``). Raises ``OSError``."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK
    if create is not None:
        flags |= os.O_CREAT
    mode = 0o666 if create is None else create
    try:
        fd = os.open(path, flags, mode)
    except BlockingIOError:
        if _fifo_at(path):
            raise
        # A file lease (an NFS delegation, a Samba oplock) that a blocking open would break,
        # waiting for its holder to let go (``lease-break-time``, 45 s at most): a
        # non-blocking open fails at once instead (a review's test). Not a FIFO: open it so.
        fd = os.open(path, flags & ~os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ENXIO and _fifo_at(path):  # not "No such device or address"
            raise NoReaderError(errno.ENXIO, "a FIFO no reader has opened yet", path) from exc
        own = descriptor_named(path) if exc.errno in (errno.ENXIO, errno.ENOENT) else None
        if own is None:
            raise
        return _copied(path, own, exc)
    try:
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        raise
    return LineFile(path, fd=fd)


def _copied(path: str, fd: int, refused: OSError) -> LineFile:
    """A copy of the process's descriptor ``fd``, which ``path`` names and ``open(2)``
    ``refused``, written as ``path``, when it is a socket (Linux opens none by name: ENXIO).
    A copy shares the descriptor's open socket, blocking or not: left as it is, since
    setting it would set standard error's too (``LineFile`` waits out a full socket either
    way); ``close`` closes the copy alone; children do not inherit it (``os.dup``). Raises
    EBADF when ``fd`` is not open (ENOENT said nothing of it), else ``refused``."""
    try:
        status = os.fstat(fd)
    except OSError as exc:
        if exc.errno != errno.EBADF:
            raise refused  # noqa: B904  # what opening said, the fstat's failure its context
        raise OSError(errno.EBADF, f"{descriptor_name(fd)} is not open", path) from refused
    if not stat.S_ISSOCK(status.st_mode):
        raise refused
    return LineFile.copied(path, fd)


def _fifo_at(path: str) -> bool:
    """Whether a FIFO is at ``path`` now."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def _checked(setting: str, target: str, private: bool, opening: Callable[[], LineFile]) -> LineFile:
    """What ``opening`` opens at ``target``; a private one that others may read is warned
    about. Raises ``OutputError`` naming ``setting`` and the reason."""
    try:
        stream = opening()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OutputError(f"cannot open {target} ({setting}): {reason}") from exc
    if not private:
        return stream
    warning = private_file_warning(target, setting, os.fstat(stream.fileno()))
    if warning is not None:
        log.warning("%s", warning)
    return stream
