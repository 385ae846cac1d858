"""Log records handled on a thread of their own while ``serve`` runs, so that a standard
error that blocks (a container runtime's log driver whose collector is slow or down) stalls
nothing else: ``queued_logging`` puts a ``QueueHandler`` in front of the root logger's
handlers; at most ``LOG_QUEUE_RECORDS`` records wait, those beyond are lost, and how many is
logged once the handlers caught up. The findings log and the ToolTrace dump have threads of
their own too (``toolwatch.sinks.background``).

Threading: logging calls queue from any thread; one thread hands records to the handlers.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import logging.handlers
import os
import queue
import threading
from collections.abc import Iterator
from typing import Final

from toolwatch.sinks.destinations import lock_for_descriptor, wait_writable

__all__ = ["LOG_QUEUE_RECORDS", "queued_logging"]

#: Log records that may wait for standard error (formatted: a few hundred bytes each).
LOG_QUEUE_RECORDS: Final = 10_000


class _BoundedQueueHandler(logging.handlers.QueueHandler):
    """Puts records in a queue of at most about ``limit``; one that finds it full is lost
    and counted.

    Re-entrant: the garbage collector may run a finalizer anywhere a record is being
    queued, and that finalizer may log (an unraisable exception, a warning:
    ``toolwatch.sinks.python_reports``). A ``queue.Queue`` holds a plain lock while it
    raises ``queue.Full``, so such a record queued from inside it waited for its own thread
    for ever (a review's test). ``queue.SimpleQueue.put`` is re-entrant, as Python's
    documentation says for this use; the bound is its size asked first (threads queuing at
    once may pass it by one record each), and losses are counted by ``itertools.count``,
    whose ``next`` is one call under the GIL, so no lock is taken at all."""

    def __init__(self, records: queue.SimpleQueue[logging.LogRecord | None], limit: int) -> None:
        super().__init__(records)
        self.records, self.limit = records, limit
        self._losses = itertools.count()  # each loss, and each take_lost, one step
        self._taken = 0  # the step after the last take_lost's (the log thread's alone)

    def enqueue(self, record: logging.LogRecord) -> None:
        if self.records.qsize() >= self.limit:
            next(self._losses)
        else:
            self.records.put_nowait(record)

    def take_lost(self) -> int:
        """Records lost since the last call (the log thread's alone)."""
        step = next(self._losses)
        lost, self._taken = step - self._taken, step + 1
        return lost


@contextlib.contextmanager
def queued_logging(limit: int = LOG_QUEUE_RECORDS, close_timeout: float = 5.0) -> Iterator[None]:
    """For the ``with`` block, the root logger's handlers take their records from a thread
    of their own: a logging call only queues its record (formatted where it is made). On
    leaving, the records queued are handled, waiting up to ``close_timeout`` seconds, and
    the handlers put back. Without handlers (nothing configured logging), nothing changes:
    Python's last resort prints warnings and errors as it did.

    A plain stream handler's records (standard error's) are written to its stream's
    descriptor directly, outside the handler's lock and the stream's buffer: a write that
    blocks for good then holds neither, and the process can still exit
    (``logging.shutdown`` takes every handler's lock, and Python's finalization flushes
    ``sys.stderr``; the thread is a daemon)."""
    root = logging.getLogger()
    handlers = list(root.handlers)
    if not handlers:
        yield
        return
    records: queue.SimpleQueue[logging.LogRecord | None] = queue.SimpleQueue()
    front = _BoundedQueueHandler(records, limit)
    thread = threading.Thread(
        target=_handle, args=(records, handlers, front, limit), name="toolwatch-log", daemon=True
    )
    thread.start()
    for handler in handlers:
        root.removeHandler(handler)
    root.addHandler(front)
    try:
        yield
    finally:
        root.removeHandler(front)
        records.put(None)  # never full: the end, after what waits
        thread.join(close_timeout)
        for handler in handlers:
            root.addHandler(handler)


def _handle(
    records: queue.SimpleQueue[logging.LogRecord | None],
    handlers: list[logging.Handler],
    front: _BoundedQueueHandler,
    limit: int,
) -> None:
    """Hands each record queued to ``handlers``; how many were lost, once they caught up."""
    while (record := records.get()) is not None:
        _hand_to(handlers, record)
        if records.empty():
            _tell_lost(handlers, front, limit)
    _tell_lost(handlers, front, limit)


def _tell_lost(handlers: list[logging.Handler], front: _BoundedQueueHandler, limit: int) -> None:
    lost = front.take_lost()
    if lost:
        _hand_to(handlers, _lost_record(lost, limit))


def _hand_to(handlers: list[logging.Handler], record: logging.LogRecord) -> None:
    for handler in handlers:
        if record.levelno < handler.level:
            continue
        try:
            fd = _descriptor(handler)
            if fd is None:
                handler.handle(record)
            elif handler.filter(record):
                _write_record(handler, fd, record)
        except Exception:  # one handler's defect ends neither the thread nor the others
            handler.handleError(record)


def _descriptor(handler: logging.Handler) -> int | None:
    """The descriptor a plain ``StreamHandler`` writes to (``basicConfig``'s, on standard
    error), or ``None``: another handler, a subclass among them (a file handler that
    rotates in its ``emit``, pytest's capture), or a stream with none (``io.StringIO``)."""
    stream = getattr(handler, "stream", None)
    fileno = getattr(stream, "fileno", None)  # a stream needs only write and flush
    if type(handler) is not logging.StreamHandler or fileno is None:
        return None
    try:
        fd = fileno()
    except (OSError, ValueError):
        return None
    return fd if isinstance(fd, int) else None


def _write_record(handler: logging.Handler, fd: int, record: logging.LogRecord) -> None:
    """``record`` as ``handler`` formats it, written to ``fd`` whole (one the system refuses,
    a closed pipe, is lost)."""
    try:
        text = handler.format(record) + getattr(handler, "terminator", "\n")
    except Exception:  # a record that cannot be formatted: what its handler would say
        handler.handleError(record)
        return
    encoding = getattr(getattr(handler, "stream", None), "encoding", None) or "utf-8"
    data = memoryview(text.encode(encoding, "backslashreplace"))
    # Whole between the outputs' lines where they share the file (``2>&1``, the journal).
    with lock_for_descriptor(fd), contextlib.suppress(OSError):
        # At the end of a file the findings log appends to through another descriptor
        # (``findings: /dev/stderr`` with ``2> file``, opened without append): not over it.
        with contextlib.suppress(OSError):  # a pipe has no end to seek
            os.lseek(fd, 0, os.SEEK_END)
        while data:
            try:
                data = data[os.write(fd, data) :]
            except BlockingIOError:  # a non-blocking pipe, full: wait, as if blocking
                wait_writable(fd)


def _lost_record(lost: int, limit: int) -> logging.LogRecord:
    return logging.getLogger(__name__).makeRecord(
        __name__,
        logging.WARNING,
        __file__,
        0,
        "%d log record(s) lost: %d were waiting already (standard error blocked?)",
        (lost, limit),
        None,
    )
