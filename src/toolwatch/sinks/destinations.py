"""One lock per file that more than one thread of the process writes, so that their lines do
not tear each other.

The findings log and the ToolTrace dump are written by a thread each
(``toolwatch.sinks.background``), log records by another (``toolwatch.sinks.logqueue``). Where
two of them write one file (both outputs on standard output, ``-``, as the README's quick start
runs ``--dump-tooltraces -``; standard error joined to it, ``2>&1 |``, or systemd's journal
socket behind both; ``findings: /dev/stderr``), a write of more than a pipe's atomic 4 KiB
(a batch of findings, one large ToolTrace) can be split by the system, and another thread's
write lands in the middle of a line. Each write takes the lock of the file it writes, told
apart by device and inode (``os.fstat``: a pipe, a socket or a file, whatever descriptor or
name reaches it), so that one thread's lines go in whole between another's.

Only these threads take the locks, never the event loop: one blocked in a write holds its
file's lock, and the others wait for it in their own threads, as they would have in the write.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from contextlib import AbstractContextManager

__all__ = ["lock_for", "lock_for_descriptor", "wait_writable"]

_locks: dict[tuple[int, int], threading.Lock] = {}  # by (device, inode): a few per process
_guard = threading.Lock()


def lock_for_descriptor(fd: int) -> AbstractContextManager[object]:
    """The lock of the file ``fd`` writes; none (a no-op) for a descriptor ``fstat`` refuses."""
    try:
        status = os.fstat(fd)
    except (OSError, ValueError):
        return contextlib.nullcontext()
    key = (status.st_dev, status.st_ino)
    with _guard:
        lock = _locks.get(key)
        if lock is None:
            lock = _locks[key] = threading.Lock()
    return lock


def lock_for(stream: object) -> AbstractContextManager[object]:
    """``lock_for_descriptor`` of ``stream``'s descriptor; none for a stream without one (an
    ``io.StringIO``)."""
    fileno = getattr(stream, "fileno", None)
    try:
        fd = fileno() if fileno is not None else None
    except (OSError, ValueError):  # io.UnsupportedOperation, a closed file
        return contextlib.nullcontext()
    return lock_for_descriptor(fd) if isinstance(fd, int) else contextlib.nullcontext()


def wait_writable(fd: int) -> None:
    """Waits until ``fd`` takes a write: for a pipe that is non-blocking (``O_NONBLOCK`` is
    the open pipe's, so a parent that set it on its own standard output, as Node.js does,
    sets it for ``serve`` too), where a write that does not fit fails (EAGAIN) having gone
    in part. The writer threads wait, as a blocking write would, rather than leave a line
    torn for the next writer's to be glued to. ``poll``, not ``select``: a server with many
    connections has descriptors past ``select``'s 1,024."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    poller.poll()
