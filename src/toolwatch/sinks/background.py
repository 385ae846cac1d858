"""Outputs and log lines written on threads of their own, so that an output that blocks stalls
nothing else.

``serve`` writes its findings log, its ToolTrace dump and its log lines as they come. Where one
of them blocks (standard output into a container runtime's log driver whose collector is slow or
down, Docker's default ``mode=blocking``; a file on a hung network mount), a write on the event
loop would stop everything with it: every export to toolwatch, the ticker that completes runs,
``/metrics`` (the alerts' own input) and ``/healthz`` (a liveness probe then kills the pod, and
what was buffered with it). So the event loop only queues what is to be written:

- ``BackgroundOutput`` queues lines for one output's writer thread. Up to ``limit`` characters
  (4 Mi by default) wait; a line that would take the queue past them is lost, told to the
  output's ``WriteFailures`` (``toolwatch_output_failures_total``, and a log line by outage),
  while metrics, pages and the other outputs go on.
- ``queued_logging`` puts a ``QueueHandler`` in front of the root logger's handlers for the
  time ``serve`` runs: at most ``LOG_QUEUE_RECORDS`` records wait; those beyond are lost, and
  how many is logged once the handlers take records again.

Threading: ``write``, ``replace`` and ``close`` are called from one thread (the event loop);
each output's own thread runs the writes and closes the files it replaced.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import logging.handlers
import queue
import threading
from collections.abc import Iterator
from typing import Final

from toolwatch.sinks.linefile import TextOutput, WriteFailures, output_name

__all__ = ["LOG_QUEUE_RECORDS", "OUTPUT_BACKLOG_CHARS", "BackgroundOutput", "queued_logging"]

_log = logging.getLogger(__name__)

#: Characters of lines that may wait for an output's thread: about 4,000 findings of 1 KiB. A
#: blocked output holds at most this much (4 to 16 MiB in memory: ``str`` keeps 1 to 4 bytes
#: a character) before lines are lost.
OUTPUT_BACKLOG_CHARS: Final = 4 * 1024 * 1024
#: Log records that may wait for standard error (formatted: a few hundred bytes each).
LOG_QUEUE_RECORDS: Final = 10_000


class _Replace:
    """In the queue: write what follows to ``stream``, and close the one written before."""

    __slots__ = ("stream",)

    def __init__(self, stream: TextOutput) -> None:
        self.stream = stream


class BackgroundOutput:
    """A ``TextOutput`` written by a thread of its own; ``write`` never blocks and never raises.

    Each ``write`` (whole lines: one publication) is queued, or lost when ``limit`` characters
    wait already and it would add to them (a line longer than ``limit`` alone is still queued
    onto an empty queue). The thread writes what waits in one write, or, when that fails, write
    by write, each failure told to ``failures`` as ``write_lines`` tells them (so a full disk
    loses only what did not fit). ``close`` waits a bounded time for the queue, then closes
    the file; what it could not write is counted lost too.
    """

    def __init__(
        self, stream: TextOutput, failures: WriteFailures, limit: int = OUTPUT_BACKLOG_CHARS
    ) -> None:
        self.name = output_name(stream)
        self._latest = stream  # the file written once the queue is through (``replace``)
        self._failures = failures
        self._limit = limit
        self._queue: list[str | _Replace] = []
        self._chars = 0  # of the lines queued or being written
        self._busy = 0  # lines taken by the thread, not yet written or lost
        self._closing = False
        self._tell = threading.Lock()  # ``failures`` is told from both threads
        self._changed = threading.Condition()
        self._thread = threading.Thread(
            target=self._run, args=(stream,), name=f"toolwatch-output {self.name}", daemon=True
        )
        self._thread.start()

    def write(self, text: str, /) -> int:
        """Queues ``text`` (whole lines) for the thread, or loses it when the queue is full
        or the output closed (told to ``failures``)."""
        with self._changed:
            waiting = self._chars
            if not self._closing and (waiting == 0 or waiting + len(text) <= self._limit):
                self._queue.append(text)
                self._chars = waiting + len(text)
                self._changed.notify()
                return len(text)
        if self._closing:
            self._lost(1, "written after the output was closed")
        else:
            self._lost(1, f"{waiting:,} characters written before it still wait to be written")
        return len(text)

    def flush(self) -> None:
        """Nothing to do: the thread writes as soon as it can (``written`` waits for it)."""

    def fileno(self) -> int:
        """The descriptor of the file written once the queue is through."""
        return self._latest.fileno()

    def replace(self, stream: TextOutput) -> None:
        """Lines written from now on go to ``stream`` (a rotated file opened again); those
        queued before go where they were going, and that file is closed after them."""
        with self._changed:
            if self._closing:
                stream.close()
                return
            self._latest = stream
            self.name = output_name(stream)
            self._queue.append(_Replace(stream))
            self._changed.notify()

    def written(self, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds for everything queued to be written (or lost);
        whether it was."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._queue and not self._busy, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Writes what is queued, waiting up to ``timeout`` seconds, then closes the file.
        Lines still waiting then are lost and counted, and the file is left open to the
        thread, which may be blocked in a write to it: the process exits without it."""
        with self._changed:
            if self._closing:
                return
            self._closing = True
            self._changed.notify()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            return
        with self._changed:
            queued = [item for item in self._queue if isinstance(item, str)]
            lost = self._busy + len(queued)
            self._queue.clear()
            self._chars -= sum(map(len, queued))
        if lost:
            reason = f"the output took none of them in {timeout:g} s; shutting down"
            self._lost(lost, reason)

    def _lost(self, count: int, reason: str) -> None:
        error = OSError(errno.EAGAIN, f"blocked: {reason}")
        with self._tell:
            for _ in range(count):
                self._failures.failed(self.name, error)

    def _run(self, stream: TextOutput) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queue or self._closing)
                if not self._queue:  # closing, everything written
                    break
                batch, self._queue = self._queue, []
                lines = [item for item in batch if isinstance(item, str)]
                self._busy = len(lines)
            try:
                stream = self._write(stream, batch)
            except Exception:  # a defect here must not end the thread: the rest would wait
                _log.exception("writing %s failed", self.name)
            finally:
                with self._changed:  # held until written: the bound is of the memory
                    self._busy = 0
                    self._chars -= sum(map(len, lines))
                    self._changed.notify_all()
        with contextlib.suppress(OSError):  # a full disk's failures were told as they came
            stream.close()

    def _write(self, stream: TextOutput, batch: list[str | _Replace]) -> TextOutput:
        """Writes ``batch`` in order; the file written last."""
        lines: list[str] = []
        for item in batch:
            if isinstance(item, str):
                lines.append(item)
                continue
            self._write_lines(stream, lines)
            lines = []
            with contextlib.suppress(OSError):
                stream.close()
            stream = item.stream
        self._write_lines(stream, lines)
        return stream

    def _write_lines(self, stream: TextOutput, lines: list[str]) -> None:
        """Writes ``lines`` in one write; when that fails, one by one, so that what fits of
        them still goes in whole and each failure is told (as ``write_lines`` tells them)."""
        if not lines:
            return
        if len(lines) > 1 and _wrote(stream, "".join(lines)) is None:
            self._told(stream, None)
            return
        for line in lines:  # one by one: one that cannot be written loses no other
            self._told(stream, _wrote(stream, line))

    def _told(self, stream: TextOutput, error: OSError | None) -> None:
        with self._tell:
            if error is None:
                self._failures.written(output_name(stream))
            else:
                self._failures.failed(output_name(stream), error)


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


class _BoundedQueueHandler(logging.handlers.QueueHandler):
    """Puts records in a bounded queue; one that finds it full is lost and counted."""

    def __init__(self, records: queue.Queue[logging.LogRecord | None]) -> None:
        super().__init__(records)
        self.lost = 0  # since the last record the thread took
        self._counting = threading.Lock()

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            with self._counting:
                self.lost += 1

    def take_lost(self) -> int:
        with self._counting:
            lost, self.lost = self.lost, 0
        return lost


@contextlib.contextmanager
def queued_logging(limit: int = LOG_QUEUE_RECORDS, close_timeout: float = 5.0) -> Iterator[None]:
    """For the ``with`` block, the root logger's handlers take their records from a thread
    of their own: a logging call only queues its record (formatted where it is made). On
    leaving, the records queued are handled, waiting up to ``close_timeout`` seconds, and
    the handlers put back."""
    root = logging.getLogger()
    handlers = list(root.handlers)
    records: queue.Queue[logging.LogRecord | None] = queue.Queue(limit)
    front = _BoundedQueueHandler(records)
    thread = threading.Thread(
        target=_handle, args=(records, handlers, front), name="toolwatch-log", daemon=True
    )
    thread.start()
    for handler in handlers:
        root.removeHandler(handler)
    root.addHandler(front)
    try:
        yield
    finally:
        root.removeHandler(front)
        with contextlib.suppress(queue.Full):
            records.put(None, timeout=close_timeout)
            thread.join(max(close_timeout, 0.0))
        for handler in handlers:
            root.addHandler(handler)


def _handle(
    records: queue.Queue[logging.LogRecord | None],
    handlers: list[logging.Handler],
    front: _BoundedQueueHandler,
) -> None:
    """Hands each record queued to ``handlers``; how many were lost, once they caught up."""
    while (record := records.get()) is not None:
        _hand_to(handlers, record)
        if records.empty():
            _tell_lost(handlers, front)
    _tell_lost(handlers, front)


def _tell_lost(handlers: list[logging.Handler], front: _BoundedQueueHandler) -> None:
    lost = front.take_lost()
    if lost:
        _hand_to(handlers, _lost_record(lost))


def _hand_to(handlers: list[logging.Handler], record: logging.LogRecord) -> None:
    for handler in handlers:
        if record.levelno >= handler.level:
            handler.handle(record)


def _lost_record(lost: int) -> logging.LogRecord:
    return logging.getLogger(__name__).makeRecord(
        __name__,
        logging.WARNING,
        __file__,
        0,
        "%d log record(s) lost: %d were waiting already (standard error blocked?)",
        (lost, LOG_QUEUE_RECORDS),
        None,
    )
