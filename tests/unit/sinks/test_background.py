"""Outputs and log records written on threads of their own (``toolwatch.sinks.background``):
a blocked output loses lines, counted, and blocks no caller; nothing else is lost.

The blocked output is a ``_Gated`` file whose writes wait for the test to open its gate: the
threads' own waits are bounded by the ``written``/``close`` timeouts, never by sleeps.
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolwatch.sinks import background
from toolwatch.sinks.background import OUTPUT_BACKLOG_CHARS, BackgroundOutput
from toolwatch.sinks.linefile import LineFile, WriteFailures
from toolwatch.sinks.logqueue import queued_logging

_WAIT = 10.0  # seconds: a bound on each wait for the writer thread, never reached when it works


class _Gated(io.StringIO):
    """A file whose writes wait until ``gate`` is set (a log driver that stopped reading)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()  # a write is waiting at the gate

    def write(self, text: str, /) -> int:
        self.entered.set()
        assert self.gate.wait(_WAIT), "the test never opened the gate"
        return super().write(text)

    def fileno(self) -> int:
        return -1


class _Counted:
    def __init__(self) -> None:
        self.failures = 0
        self.logged: list[str] = []

    def failed(self) -> None:
        self.failures += 1

    def told(self, what: str, log: logging.Logger) -> WriteFailures:
        return WriteFailures(what, self.failed, log)


@pytest.fixture
def counted() -> _Counted:
    return _Counted()


def _output(
    stream: io.StringIO | LineFile, counted: _Counted, limit: int = OUTPUT_BACKLOG_CHARS
) -> BackgroundOutput:
    return BackgroundOutput(
        stream, counted.told("the findings log", logging.getLogger(__name__)), limit
    )


def test_lines_are_written_in_order_and_written_waits_for_them(
    tmp_path: Path, counted: _Counted
) -> None:
    path = tmp_path / "findings.jsonl"
    output = _output(LineFile(str(path)), counted)
    for i in range(200):
        output.write(f"line {i}\n")
    assert output.written(_WAIT)
    assert path.read_text().splitlines() == [f"line {i}" for i in range(200)]
    output.close()
    assert counted.failures == 0


def test_a_blocked_output_returns_at_once_and_loses_only_what_passes_the_bound(
    counted: _Counted,
) -> None:
    """The bound counts the lines being written too: the memory they hold."""
    stream = _Gated()
    output = _output(stream, counted, limit=100)
    output.write("a" * 59 + "\n")  # taken by the thread, which waits at the gate
    assert stream.entered.wait(_WAIT)
    output.write("b" * 29 + "\n")  # 90 characters wait: within the bound
    output.write("c" * 29 + "\n")  # 120 would: lost
    output.write("d" * 9 + "\n")  # 100: within
    assert counted.failures == 1
    stream.gate.set()
    assert output.written(_WAIT)
    assert stream.getvalue().splitlines() == ["a" * 59, "b" * 29, "d" * 9]
    output.write("e\n")  # room again
    assert output.written(_WAIT)
    assert stream.getvalue().splitlines()[-1] == "e"
    assert counted.failures == 1


def test_a_line_longer_than_the_bound_is_written_when_nothing_waits(counted: _Counted) -> None:
    stream = io.StringIO()
    output = _output(stream, counted, limit=10)
    output.write("x" * 50 + "\n")
    assert output.written(_WAIT)
    assert stream.getvalue() == "x" * 50 + "\n"
    assert counted.failures == 0


def test_close_gives_a_blocked_output_its_timeout_then_counts_what_it_still_holds(
    counted: _Counted, caplog: pytest.LogCaptureFixture
) -> None:
    stream = _Gated()
    output = _output(stream, counted)
    output.write("taken\n")
    assert stream.entered.wait(_WAIT)
    output.write("queued\n")
    with caplog.at_level(logging.ERROR):
        output.close(timeout=0.05)  # the output never takes the first: both are lost
    assert counted.failures == 2
    assert "0.05 s ran out with 1 line(s) not written and 1 being written" in caplog.text
    output.write("after\n")  # closed: lost, not queued
    assert counted.failures == 3
    stream.gate.set()  # the process would exit; here the thread ends


def test_a_file_that_fails_loses_each_line_it_refused_and_keeps_the_rest(
    tmp_path: Path, counted: _Counted
) -> None:
    """A lone surrogate cannot be encoded: that line alone fails, as on a full disk."""
    path = tmp_path / "findings.jsonl"
    stream = _Gated()  # holds the thread so that the three are written as one batch
    output = _output(stream, counted)
    output.write("first\n")
    assert stream.entered.wait(_WAIT)
    output.reopen(lambda _stream: LineFile(str(path)))
    output.write("good\n")
    output.write("bad \ud800\n")
    output.write("also good\n")
    stream.gate.set()
    assert output.written(_WAIT)
    assert path.read_text().splitlines() == ["good", "also good"]
    assert counted.failures == 1


def test_reopen_writes_what_was_queued_to_the_old_file_then_closes_it(
    tmp_path: Path, counted: _Counted
) -> None:
    """A SIGHUP's ``reopen`` runs on the output's thread, given the file it writes, after the
    lines queued before it; ``None`` keeps that file."""
    old, new = LineFile(str(tmp_path / "old")), LineFile(str(tmp_path / "new"))
    output = _output(old, counted)
    asked: list[object] = []
    output.write("before\n")
    output.reopen(lambda stream: asked.append(stream) or new)  # type: ignore[func-returns-value]
    output.write("after\n")
    assert output.written(_WAIT)
    assert asked == [old]
    assert output.fileno() == new.fileno()
    assert (tmp_path / "old").read_text() == "before\n"
    assert (tmp_path / "new").read_text() == "after\n"
    assert old.closed
    output.reopen(lambda _stream: None)  # nothing rotated: the file stays
    output.write("last\n")
    assert output.written(_WAIT)
    assert (tmp_path / "new").read_text() == "after\nlast\n"
    assert not new.closed
    output.close()
    assert new.closed


def test_reopen_runs_on_the_output_thread_and_blocks_no_caller(
    tmp_path: Path, counted: _Counted
) -> None:
    """A path on a hung mount: the SIGHUP's open waits on the output's thread, not the
    caller's (the event loop); the lines written meanwhile wait for it, then go to the new
    file. Was (review of 89e28d3): ``Outputs.reopen`` looked (``os.stat``) and opened on the
    event loop, where a hung mount froze ``/healthz`` and every export."""
    new = LineFile(str(tmp_path / "new"))
    hung, entered = threading.Event(), threading.Event()

    def reopen(_stream: object) -> LineFile:
        entered.set()
        assert hung.wait(_WAIT), "the test never let the open return"
        return new

    output = _output(LineFile(str(tmp_path / "old")), counted)
    try:
        output.reopen(reopen)  # returns at once
        assert entered.wait(_WAIT)  # the thread is in the open
        output.write("meanwhile\n")  # queued, not waiting
        assert not output.written(0.05)
    finally:
        hung.set()
    assert output.written(_WAIT)
    assert (tmp_path / "new").read_text() == "meanwhile\n"
    output.close()


class _GatedHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.entered.set()
        assert self.gate.wait(_WAIT)
        self.messages.append(record.getMessage())


@pytest.fixture
def root_handler() -> Iterator[_GatedHandler]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for handler in handlers:
        root.removeHandler(handler)
    handler = _GatedHandler()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler
    handler.gate.set()
    root.removeHandler(handler)
    for kept in handlers:
        root.addHandler(kept)
    root.setLevel(level)


def test_queued_logging_blocks_no_caller_and_tells_what_it_lost(
    root_handler: _GatedHandler,
) -> None:
    log = logging.getLogger("toolwatch.test")
    handlers = list(logging.getLogger().handlers)  # pytest's capture's among them
    with queued_logging(limit=3):
        log.info("first")  # handled: waits at the gate
        assert root_handler.entered.wait(_WAIT)
        for i in range(5):
            log.info("queued %d", i)  # three wait; two are lost
        assert root_handler not in logging.getLogger().handlers
        root_handler.gate.set()
    assert logging.getLogger().handlers == handlers  # put back
    assert root_handler.messages == [
        "first",
        "queued 0",
        "queued 1",
        "queued 2",
        "2 log record(s) lost: 3 were waiting already (standard error blocked?)",
    ]


def test_a_blocked_output_costs_one_wait_for_room_then_loses_lines_at_once(
    counted: _Counted,
) -> None:
    """The first line that does not fit waits ``ROOM_SECONDS`` for the thread (a healthy
    output behind by a large line catches up); the output took nothing meanwhile, so the next
    ones are lost without a wait, until it writes again."""
    stream = _Gated()
    output = _output(stream, counted, limit=16)
    output.write("taken\n")
    assert stream.entered.wait(_WAIT)
    output.write("queued\n")  # 13 characters wait or are being written: full
    waited = time.monotonic()
    output.write("first over\n")  # waits for room, none comes: lost
    waited = time.monotonic() - waited
    quick = time.monotonic()
    output.write("second over\n")  # stalled: lost at once
    quick = time.monotonic() - quick
    assert counted.failures == 2
    assert waited >= background.ROOM_SECONDS
    assert quick < background.ROOM_SECONDS / 2
    stream.gate.set()
    assert output.written(_WAIT)
    output.write("after\n")  # written again: takes writes, and waits for room again
    assert output.written(_WAIT)
    assert stream.getvalue().splitlines() == ["taken", "queued", "after"]


def test_queued_logging_without_handlers_leaves_logging_as_it_is() -> None:
    """Nothing configured logging (``serve`` embedded in a program): Python's last resort
    still prints warnings; queued, they went to no handler at all (review)."""
    root = logging.getLogger()
    handlers = list(root.handlers)
    for handler in handlers:
        root.removeHandler(handler)
    try:
        with queued_logging():
            assert root.handlers == []
    finally:
        for handler in handlers:
            root.addHandler(handler)


def test_queued_logging_hands_a_rotating_file_handler_its_records_through_its_emit(
    tmp_path: Path,
) -> None:
    """Only a plain StreamHandler is written to its descriptor directly: a subclass's own
    ``emit`` (a file that rotates in it) still runs, so the file still rotates."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for handler in handlers:
        root.removeHandler(handler)
    path = tmp_path / "toolwatch.log"
    rotating = logging.handlers.RotatingFileHandler(path, maxBytes=200, backupCount=1)
    root.addHandler(rotating)
    root.setLevel(logging.INFO)
    try:
        with queued_logging():
            for i in range(20):
                logging.getLogger("toolwatch.test").info("record %02d of twenty", i)
    finally:
        root.removeHandler(rotating)
        rotating.close()
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
    assert path.with_name("toolwatch.log.1").exists()
    assert path.read_text().splitlines()[-1] == "record 19 of twenty"


def test_sighups_while_an_output_is_blocked_queue_one_reopen(
    tmp_path: Path, counted: _Counted
) -> None:
    """A reloader that sends SIGHUP again and again while the output is blocked: the reopens
    not taken yet are one (each would look at the path as the last does), not one item each
    outside the queue's bound, run one after another once it unblocks (review of c2f74b0)."""
    stream = _Gated()
    output = _output(stream, counted)
    asked: list[int] = []
    output.write("taken\n")
    assert stream.entered.wait(_WAIT)
    for _ in range(100):
        output.reopen(lambda _stream: asked.append(1))  # type: ignore[func-returns-value]
    output.write("after\n")
    output.reopen(lambda _stream: asked.append(2))  # type: ignore[func-returns-value]
    stream.gate.set()
    assert output.written(_WAIT)
    assert asked == [1, 2]
    assert stream.getvalue().splitlines() == ["taken", "after"]
    output.close()
