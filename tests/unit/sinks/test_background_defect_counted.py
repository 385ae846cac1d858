"""A batch whose writing raised is counted lost (review of ``BackgroundOutput._run``,
89e28d3). Was: neither written nor counted, as follows. Now: each write of it not told yet is
counted failed (``_lose_untold``), the cause named.

``_run`` catches any exception of its batch ("a defect here must not end the thread: the rest
would wait") and logs it, then takes the batch off ``_busy`` and ``_chars`` as done: its lines
are in no file, and ``toolwatch_output_failures_total`` does not count them, so the one signal
that findings are missing from the log (``ToolwatchOutputFailing``) stays quiet. Every other
way a line can miss the file (full disk, blocked, gone, shutdown) is counted once.

The defect here is a ``follow`` that raises (a bug in ``outputs._Look``, or a ``MemoryError`` while
it opens the path); the follow clock is injected. ``written``'s timeout bounds the wait."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.background_thread import FOLLOW_SECONDS
from toolwatch.sinks.linefile import LineFile, TextOutput, WriteFailures

_WAIT = 10.0  # seconds: a bound on each wait, never reached when the code works


def test_a_batch_whose_write_raised_is_counted_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Scenario: two runs' findings are published; the thread, due to look at its path,
    calls ``follow``, which raises.
    Was: logged "writing ... failed", counted nowhere: the file empty, failures 0.
    Now: each write not written is counted (written + failures == 2), as any lost line
    is, the outage logged with the cause."""
    failures = [0]
    lock = threading.Lock()

    def failed() -> None:
        with lock:
            failures[0] += 1

    def follow(stream: TextOutput) -> TextOutput | OSError | None:
        raise RuntimeError("a defect while looking at the path")

    now = [0.0]
    path = tmp_path / "findings.jsonl"
    output = BackgroundOutput(
        LineFile(str(path)),
        WriteFailures("the findings log", failed, logging.getLogger(__name__)),
        follow=follow,
        clock=lambda: now[0],
    )
    now[0] = FOLLOW_SECONDS
    try:
        with caplog.at_level(logging.ERROR):
            output.write('{"finding": 1}\n')
            output.write('{"finding": 2}\n')
            assert output.written(_WAIT)
    finally:
        output.close(_WAIT)
    told = [r.getMessage() for r in caplog.records]
    assert told[0] == f"writing {path} failed"
    assert told[1:] == [
        f"could not write the findings log ({path}): RuntimeError: a defect while looking at"
        f" the path ({count})"
        for count in ("1 failure in a row", "2 failures in a row")
    ]
    written = path.read_text().splitlines()
    assert (len(written), failures[0]) in ((0, 2), (1, 1)), (
        f"of 2 writes, {len(written)} written and {failures[0]} counted lost"
    )
