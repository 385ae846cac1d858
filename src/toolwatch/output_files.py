"""Opening the files ``serve`` writes (``output.findings``, ``output.dump_tooltraces``), at
start-up and when an output's thread opens its path again (``outputs._Look``).

Nothing here waits for a reader: a FIFO is opened with ``O_NONBLOCK``, so one that no reader
has opened yet fails at once (``NoReaderError``) rather than hold start-up, before any
listener is bound, or an output's thread, in silence; once opened it is written blocking. An
output whose FIFO had no reader at start-up writes ``Unopened`` until its thread opens one.

A path that leads to a socket (``/dev/stderr``, ``/dev/fd/N``, ``/proc/self/fd/N``, a link to
one: standard error under systemd is the journal's stream socket) cannot be opened by name
(ENXIO); when the socket is one this process holds (told by identity: the descriptor whose
``fstat`` is the path's ``stat``, which follows ``/proc``'s links to what a descriptor holds),
a copy of that descriptor is written instead (``_copied``), if it is a connected stream
socket: a listening socket, one not connected, and a datagram socket (several lines joined in
one write would be one datagram) are refused. A Unix socket's own file on a file system
(``/run/systemd/journal/socket``) is held by no descriptor of ours, and fails as before. A
literal descriptor name that cannot be opened says why (``config.unopenable_descriptor``:
not open, or ``/proc`` not mounted).

Threading: none of its own; called from the event loop (start-up) and from each output's
thread (its look).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import socket
import stat
from collections.abc import Callable

from toolwatch.config import descriptor_name, private_file_warning, unopenable_descriptor
from toolwatch.sinks.linefile import LineFile

__all__ = ["NoReaderError", "OutputError", "Unopened", "open_text", "open_there"]

log = logging.getLogger("toolwatch.outputs")  # the outputs' messages, under one name

#: Sockets that keep each write a message of its own, refused (``_unwritable``), for messages.
_MESSAGE_SOCKETS: dict[int, str] = {
    socket.SOCK_DGRAM: "a datagram socket",
    socket.SOCK_SEQPACKET: "a sequenced-packet socket",
}


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
    leads to a socket the process holds (``/dev/stderr`` under systemd) has a copy of its
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
    non-blocking too). A socket the process holds, which a path such as ``/dev/stderr``
    leads to and Linux does not open (ENXIO): a copy of its descriptor (``_copied``).
    Raises ``OSError``: for a literal descriptor name, saying why it cannot be opened."""
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
        return _instead(path, exc)
    try:
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        raise
    return LineFile(path, fd=fd)


def _instead(path: str, refused: OSError) -> LineFile:
    """What is written at ``path``, which ``open(2)`` ``refused``: a copy of the socket the
    process holds there (ENXIO: Linux opens no socket by name). Else raises: a FIFO no
    reader has opened yet (``NoReaderError``); why a literal descriptor name cannot be opened
    (ENOENT, "No such file or directory", says nothing true of it); or ``refused``."""
    if refused.errno == errno.ENXIO:
        if _fifo_at(path):  # not "No such device or address"
            raise NoReaderError(errno.ENXIO, "a FIFO no reader has opened yet", path) from refused
        held = _held_socket(path)
        if held is not None:
            return _copied(path, held)
    unopenable = unopenable_descriptor(path) if refused.errno == errno.ENOENT else None
    if unopenable is not None:
        raise OSError(errno.ENOENT, unopenable, path) from refused
    raise refused


def _held_socket(path: str) -> int | None:
    """The lowest of this process's descriptors that holds the socket ``path`` leads to;
    ``None`` when ``path`` leads to no socket, or to one no descriptor of ours holds (a
    socket's own file on a file system: the descriptors connected to it hold sockets of
    their own). ``os.stat`` follows ``/proc``'s links (``/dev/stderr``, ``/dev/fd/N``) to
    what the descriptor holds, whatever directories and links led there and whatever
    number the process has in the PID namespace ``/proc`` was mounted in."""
    try:
        there = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISSOCK(there.st_mode):
        return None
    for fd in _open_descriptors():
        try:
            held = os.fstat(fd)
        except OSError:  # closed since it was listed (the listing's own, among them)
            continue
        if (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino):
            return fd
    return None


def _open_descriptors() -> list[int]:
    """This process's open descriptors, lowest first; none known without ``/proc``."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    return sorted(int(name) for name in names)


def _copied(path: str, fd: int) -> LineFile:
    """A copy of the process's descriptor ``fd``, a socket that ``path`` leads to and Linux
    opens by no name (ENXIO), written as ``path``. A copy shares the descriptor's open
    socket, blocking or not: left as it is, since setting it would set standard error's
    too (``LineFile`` waits out a full socket either way); ``close`` closes the copy alone;
    children do not inherit it (``os.dup``). Raises ``OSError`` for a socket no line can
    be written to whole (``_unwritable``)."""
    unwritable = _unwritable(fd)
    if unwritable is not None:
        # Still what opening said (ENXIO), with the reason it holds for this socket.
        raise OSError(errno.ENXIO, f"{descriptor_name(fd)} is {unwritable}", path)
    return LineFile.copied(path, fd)


def _unwritable(fd: int) -> str | None:
    """Why no line written to the socket ``fd`` holds would reach a reader whole: it
    listens (socket activation's ``/dev/fd/3`` named by mistake), or sends datagrams (the
    output's thread joins the lines it gathered in one write: one datagram holding several
    lines, or past the socket's size limit), or is not connected; ``None`` for a connected
    stream socket. Asked of a socket object made from a copy of ``fd`` (closed again:
    ``fd`` stays open, and blocking or not as it was, Python's default timeout being none)."""
    with _socket_copy(fd) as sock:
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            return "a listening socket, which takes connections, not lines"
        kind = sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)
        if kind != socket.SOCK_STREAM:
            what = _MESSAGE_SOCKETS.get(kind, "a socket of messages")
            return (
                f"{what}: only stream sockets are written (a datagram would carry several"
                " lines, or exceed the size limit)"
            )
        try:
            sock.getpeername()
        except OSError as exc:
            if exc.errno != errno.ENOTCONN:
                raise
            return "a socket that is not connected: its lines would reach no one"
    return None


def _socket_copy(fd: int) -> socket.socket:
    """A socket object on a copy of ``fd`` (closing it closes the copy alone)."""
    copy = os.dup(fd)
    try:
        return socket.socket(fileno=copy)
    except OSError:
        os.close(copy)
        raise


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
