"""the memory a blocked output holds, against its documented bound.

``OUTPUT_BACKLOG_CHARS`` and docs/deployment.md (Memory, "Smaller bounds") say a blocked output
holds at most its bound of characters: "4 Mi characters ... (4 to 16 MiB: Python holds 1 to 4
bytes a character)", i.e. the bound times the bytes a character of the lines takes. The output
here is a real ``LineFile`` on a real pipe that is full and not read (a stalled log driver).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pipes
from tests.integration.conftest import until
from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.linefile import LineFile, WriteFailures

_LIMIT = 1024 * 1024  # characters: the bound, a quarter of the default to keep the test light
_LINE = 1023  # characters of a line, its newline not counted: 1 KiB lines, ASCII
_WAIT = 10.0


def _blocked_in_write(thread: threading.Thread) -> bool:
    """Whether ``thread`` is inside ``LineFile.write`` (blocked in ``os.write``)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code is LineFile.write.__code__:
            return True
        frame = frame.f_back
    return False


@pytest.fixture
def full_pipe() -> Iterator[tuple[int, int]]:
    """A pipe whose write end is full (blocking again); closed after the test."""
    read_end, write_end = pipes.full_pipe()
    yield read_end, write_end
    with contextlib.suppress(OSError):
        os.close(read_end)


def test_a_blocked_output_holds_no_more_than_its_bound_of_characters(
    full_pipe: tuple[int, int],
) -> None:
    """Scenario: stdout (the findings log) blocks; findings keep coming until the bound is
    reached (1 Mi ASCII characters here, as JSON lines are); the log driver takes a few bytes,
    so the thread takes everything queued as one batch and blocks again in its write.

    Was: the thread holds the batch's lines, their ``"".join`` (``_write_lines``) and that
    text encoded (``LineFile.write``): three copies, about 3 MiB for a bound documented as
    1 MiB for ASCII (12 MiB per output at the default 4 Mi, not 4; with lines of 4-byte
    characters, up to about 48 MiB, not 16).

    Now: hold about the bound (docs/deployment.md's sizing: "4 to 16 MiB"), e.g. write the
    batch with ``os.writev`` of each line encoded (no join), queue lines as bytes (encode in
    ``write``), or join in pieces of bounded size; or document three times the bound.

    Regression: the bound and its claim are new in 1eeaddc.
    """
    read_end, write_end = full_pipe
    failures = WriteFailures("the findings log", lambda: None, logging.getLogger(__name__))
    output = BackgroundOutput(LineFile("<stdout>", fd=write_end), failures, _LIMIT)
    thread = output._thread
    try:
        output.write("first\n")  # taken alone: the thread blocks on the full pipe
        assert until(lambda: _blocked_in_write(thread), _WAIT)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            lines = (_LIMIT - 6) // (_LINE + 1)
            for i in range(lines):  # each line built here and held by the queue alone
                output.write(f"{i:08d}".ljust(_LINE, "x") + "\n")
            os.read(read_end, 4096)  # "first" goes through; a batch is taken, and blocks
            assert until(lambda: output._busy > 1 and _blocked_in_write(thread), _WAIT)
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        characters = lines * (_LINE + 1)
        assert held <= 1.25 * characters, (
            f"a blocked output holds {held / 2**20:.1f} MiB for {characters / 2**20:.1f} Mi"
            " ASCII characters queued"
        )
    finally:  # the pipe read to its end: the thread writes it all, and close ends it
        reader = threading.Thread(target=_read_to_the_end, args=(read_end,), daemon=True)
        reader.start()
        output.close(timeout=_WAIT)
        reader.join(_WAIT)


def _read_to_the_end(fd: int) -> None:
    while os.read(fd, 1 << 20):
        pass


def test_what_close_counted_lost_is_not_written_after_it(
    full_pipe: tuple[int, int], caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: SIGTERM while stdout's log driver is stalled: ``close`` gives the findings
    the rest of the grace, then counts them lost; the process then lingers for a last scrape
    of ``/metrics`` (15 s in the manifests), and the log driver comes back meanwhile.

    Was: the thread went on writing what ``close`` had counted lost, and
    logged "written again": the last scrape counted findings lost that were in the log.

    Now: what was queued behind the write in flight is not written, and nothing says
    written again; the line the system was taking when the grace ran out (the thread blocked
    in its write) may still reach the log, counted lost: it was not written within the
    grace, as ``close`` documents."""
    read_end, write_end = full_pipe
    lost = []
    failures = WriteFailures(
        "the findings log", lambda: lost.append(1), logging.getLogger(__name__)
    )
    output = BackgroundOutput(LineFile("<stdout>", fd=write_end), failures)
    output.write('{"finding":1}\n')
    assert until(lambda: _blocked_in_write(output._thread), _WAIT)
    output.write('{"finding":2}\n')  # queued behind it
    with caplog.at_level(logging.INFO):
        output.close(timeout=0.1)  # the grace is over: both counted lost
        assert len(lost) == 2
        received = bytearray()
        while output._thread.is_alive():  # the driver is back
            received += os.read(read_end, 65536)
            output._thread.join(0.01)
    assert b'{"finding":2}' not in received
    assert "written again" not in caplog.text
    assert len(lost) == 2


def test_a_line_longer_than_the_bound_is_held_alone_while_it_is_written(
    full_pipe: tuple[int, int],
) -> None:
    """Scenario: a run's ToolTrace longer than the bound (a retrieval agent's many large
    results) is published while nothing waits; standard output (the dump) then blocks in
    its write; another run's line comes.

    The bound (docs/deployment.md, Memory: "Smaller bounds"): a line longer than it is taken
    alone, once nothing else waits, and nothing is queued beside it; what is held is the line
    and its bytes being written (one ``write(2)``: another process appending to the same file
    cannot land inside it, ``test_linefile_other_appender``), so twice its size for ASCII text.
    Was (62be737, reverted): encoded a piece at a time, the line held once, but split by
    another appender. Now: twice, and the other line lost, counted, not queued beside it."""
    read_end, write_end = full_pipe
    lost: list[int] = []
    failures = WriteFailures("the dump", lambda: lost.append(1), logging.getLogger(__name__))
    output = BackgroundOutput(LineFile("<stdout>", fd=write_end), failures, _LIMIT)
    size = 8 * _LIMIT  # characters, ASCII as dump lines are
    try:
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            output.write("x" * (size - 1) + "\n")  # held by the output alone from here
            assert until(lambda: _blocked_in_write(output._thread), _WAIT)
            output.write("another run\n")  # does not fit beside it: waits, then lost
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert (lost, held < 2 * size + size // 8) == ([1], True), (
            f"{held / 2**20:.1f} MiB held for a line of {size / 2**20:.0f} Mi characters"
        )
    finally:
        reader = threading.Thread(target=_read_to_the_end, args=(read_end,), daemon=True)
        reader.start()
        output.close(timeout=_WAIT)
        reader.join(_WAIT)


def test_an_output_holds_no_line_it_has_written(tmp_path: Path) -> None:
    """Scenario: a ToolTrace line longer than the bound is written to a healthy file; then
    no run completes for a while.
    Was: the thread kept its last batch (``_run``'s ``batch`` and ``lines``) until it took
    the next: the line stayed in memory, counted nowhere (``written`` said it was written,
    the bound's count was back to 0), and beside the next lines once they came.
    Now: it lets go of a batch once it is written."""
    failures = WriteFailures("the dump", lambda: None, logging.getLogger(__name__))
    output = BackgroundOutput(LineFile(str(tmp_path / "tooltraces.jsonl")), failures, _LIMIT)
    size = 8 * _LIMIT
    try:
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            output.write("x" * (size - 1) + "\n")
            assert output.written(_WAIT)
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    finally:
        output.close(_WAIT)
    assert (tmp_path / "tooltraces.jsonl").stat().st_size == size
    assert held < 64 * 1024, f"{held / 2**20:.1f} MiB still held once the line was written"
