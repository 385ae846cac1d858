"""``written`` says what was queued is written or lost only once each loss is counted (review
of 1c9223f). Was: ``_told`` took a write off ``_busy`` before it told ``failures`` (the metric,
the log), and ``written`` waited for ``not self._busy``: it could return True with a line lost
on a full disk not counted yet (``App.outputs_written``'s contract), and with ``_chars`` still
holding the batch. Now: ``written`` waits until the thread has settled what it took
(``_chars`` back to 0), each write told before.

The failure callback (the metric) is held until the test lets it go, so that ``written`` is
asked inside it. ``written``'s own timeout bounds the wait; no sleeps.
"""

from __future__ import annotations

import errno
import io
import logging
import threading

from permit_file import WAIT

from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.linefile import WriteFailures


class _FullDisk(io.StringIO):
    """A disk with no room: every write fails with ENOSPC."""

    def write(self, text: str, /) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def fileno(self) -> int:
        return -1


def test_written_does_not_return_before_the_lost_line_is_counted() -> None:
    """Scenario: one line is written to a full disk; the thread tells the failure (the metric
    callback, held here as a slow metric or a descheduled thread would hold it); a tool asks
    ``written`` meanwhile.
    Was: ``written`` returned True with no failure counted yet.
    Now: it says the line is not done until its failure is counted (False within 0.05 s),
    then True with one failure counted."""
    counted = 0
    telling = threading.Event()
    let_go = threading.Event()

    def failed() -> None:
        nonlocal counted
        telling.set()
        assert let_go.wait(WAIT)
        counted += 1

    output = BackgroundOutput(
        _FullDisk(), WriteFailures("the findings log", failed, logging.getLogger(__name__))
    )
    try:
        output.write("lost\n")
        assert telling.wait(WAIT)  # the thread is telling the failure
        done = output.written(0.05)
        seen = counted
        let_go.set()
        assert output.written(WAIT)
        assert counted == 1
        assert (done, seen) == (False, 0), (
            f"written() returned {done} with {seen} failures counted: it said the line was"
            " written or lost before its loss was counted"
        )
    finally:
        let_go.set()
        output.close(WAIT)
    assert counted == 1  # once the thread ended
