"""``written`` waits for what was queued when it was asked (review of
``BackgroundOutput.written``, 89e28d3). Was: it waited for an output with nothing left to
write at all, so under steady load it waited its whole timeout and said False, though
everything queued before the call was written at once. Now: it waits for ``_done_items`` to
reach what was queued then, written without gathering (``_write_until``).

Contract: "Waits up to ``timeout`` seconds for everything queued to be written (or lost);
whether it was" (``App.outputs_written``: "what was published to them"). It waits for
``not queue and not _chars``: a server that publishes while the thread writes (a tick every
10 ms under load, each with findings) never has both, so a tool or test that reads the files
after ``outputs_written`` gets False after the whole timeout, though what it waited for was
in the file within one write. ``written`` also clears its "write now" (``_now``) after the
first batch, so each later line is gathered for GATHER_SECONDS again.

The steady load: each write the file takes lets the event loop (the test's thread) publish
the next line before the write returns, so that a line always waits while one is written.
``written``'s own timeout bounds the wait; no sleeps."""

from __future__ import annotations

import io
import logging
import threading

from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.linefile import WriteFailures

_WAIT = 10.0  # seconds: a bound on each wait, never reached when the code works


class _Busy(io.StringIO):
    """A file whose every write lets the publisher queue the next line before it returns
    (publications keep coming while the thread writes); ``stop`` ends that."""

    def __init__(self) -> None:
        super().__init__()
        self.took = threading.Semaphore(0)
        self.published = threading.Semaphore(0)
        self.stopped = threading.Event()

    def write(self, text: str, /) -> int:
        written = super().write(text)
        if not self.stopped.is_set():
            self.took.release()
            assert self.published.acquire(timeout=_WAIT), "the publisher stopped"
        return written

    def fileno(self) -> int:
        return -1


def test_written_returns_once_what_was_queued_before_it_is_written() -> None:
    """Scenario: a run's finding is published; the thread writes it at once; while it does,
    the next run's finding is published, and so on (steady load). A tool asks ``written(1)``
    once the first line is in the file.
    Was: False after the whole second: some line always waits.
    Now: True once "finding 1", queued before the call, is written."""
    file = _Busy()
    output = BackgroundOutput(
        file, WriteFailures("the findings log", lambda: None, logging.getLogger(__name__))
    )
    count = [1]
    first_queued = threading.Event()

    def publish() -> None:  # the event loop: one publication for each write the file takes
        while file.took.acquire(timeout=_WAIT) and not file.stopped.is_set():
            output.write(f"finding {count[0]}\n")
            count[0] += 1
            first_queued.set()
            file.published.release()

    publisher = threading.Thread(target=publish, daemon=True)
    try:
        output.write("finding 0\n")
        output.write_queued()
        assert file.took.acquire(timeout=_WAIT)  # "finding 0" is in the file
        publisher.start()
        file.took.release()  # the publisher's turn: "finding 1" queued while it is written
        assert first_queued.wait(_WAIT)
        done = output.written(1.0)
        lines_then = file.getvalue().splitlines()
    finally:
        file.stopped.set()
        file.took.release()
        file.published.release()
        if publisher.ident is not None:
            publisher.join(_WAIT)
        output.close(_WAIT)
    assert lines_then[:2] == ["finding 0", "finding 1"]
    assert done, f"written() said False with {len(lines_then)} lines written meanwhile"
