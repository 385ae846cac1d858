"""What ``write_queued`` asked to be written now is written without gathering, however many
batches it takes (review of 2e11f06's claim that lines "reach the files as the metrics count
them"). Was (older than 2e11f06): ``write_queued`` set ``_now``, which the thread cleared at the
next batch it took (at most 64 Ki characters), so the rest of a tick's lines waited
``GATHER_SECONDS`` (50 ms) again while the metrics already counted them. Now: the thread
gathers only when it has written all it was asked to.

The output takes one write per permit the test gives it; the thread's gathering is made long
(half of ``WAIT``) so that a wait for it cannot pass for the machine's slowness. No sleeps."""

from __future__ import annotations

import logging
import time

import pytest
from permit_file import WAIT, PermitFile

from toolwatch.sinks import background_thread
from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.linefile import WriteFailures


def test_what_write_queued_asked_for_is_written_without_gathering_past_one_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scenario: the thread is writing an earlier line when a tick publishes two ToolTrace
    lines of 40 Ki characters and calls ``write_queued`` (``EngineParts.published``). The
    disk then takes each write at once.
    Was: the first was taken at once (``_now``, cleared as it was taken); the second, alone
    under 64 Ki, waited ``GATHER_SECONDS`` before the thread took it.
    Now: the thread writes both without gathering (the tick asked them written now)."""
    gather = WAIT / 2
    monkeypatch.setattr(background_thread, "GATHER_SECONDS", gather)
    stream = PermitFile()
    output = BackgroundOutput(
        stream, WriteFailures("the ToolTrace dump", lambda: None, logging.getLogger(__name__))
    )
    first = "a" * 40 * 1024 + "\n"
    second = "b" * 40 * 1024 + "\n"
    try:
        output.write("earlier\n")
        assert stream.entered.acquire(timeout=WAIT)  # the thread writes it: the disk is busy
        output.write(first)  # the tick publishes two runs' ToolTraces...
        output.write(second)
        output.write_queued()  # ...and has them written now
        stream.permits.release()  # "earlier" is written
        assert stream.entered.acquire(timeout=WAIT)  # the first ToolTrace: taken at once
        start = time.monotonic()
        stream.permits.release()
        assert stream.entered.acquire(timeout=WAIT)  # the second
        waited = time.monotonic() - start
        stream.permits.release()
        assert output.written(WAIT)
        assert stream.getvalue() == "earlier\n" + first + second
        assert waited < gather / 2, f"the second ToolTrace waited {waited:.3f} s to be taken"
    finally:
        for _ in range(10):
            stream.permits.release()
        output.close(WAIT)
