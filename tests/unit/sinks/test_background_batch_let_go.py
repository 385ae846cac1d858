"""``BackgroundOutput`` lets go of a batch's lines before it takes them off the memory count.

The bound (``OUTPUT_BACKLOG_CHARS``, docs/deployment.md "Memory") is of the characters an
output holds: ``_chars`` counts a line until the thread is through with it, and the thread
must not hold a line any more once it is no longer counted. In ``_write_next`` that is the
``finally``'s ``batch, lines = [], []``, before ``_batch_done`` takes them off the count:
once ``_run`` was split into steps, no other test failed without that line (the batch is
let go of anyway when ``_write_next`` returns, just after the count), so this test watches
the order itself: the line's ``__del__`` records what the count held when the last
reference to it went. A review's test, kept.
"""

from __future__ import annotations

import io
import logging
import threading

from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.linefile import WriteFailures

_WAIT = 10.0  # seconds: a bound on each wait for the writer thread, never reached when it works


class _Gated(io.StringIO):
    """A file whose writes wait until ``gate`` is set: the line is in the thread's batch
    alone (the test let go of it) before the write finishes."""

    name = "gated"

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.wrote: list[str] = []  # what reached it (``close`` closes the StringIO)

    def write(self, text: str, /) -> int:
        assert self.gate.wait(_WAIT), "the test never opened the gate"
        self.wrote.append(text)
        return super().write(text)

    def fileno(self) -> int:
        return -1


def test_coverage_a_batch_is_let_go_of_before_it_is_taken_off_the_count() -> None:
    stream = _Gated()
    failures = WriteFailures("the findings log", lambda: None, logging.getLogger(__name__))
    output = BackgroundOutput(stream, failures)
    seen: list[tuple[int, int]] = []  # (_chars, _done_items) when the line was let go of

    class _Tracked(str):
        """A line that records, as its last reference goes, what the output counts."""

        def __del__(self) -> None:
            seen.append((output._chars, output._done_items))

    text = "x" * 99 + "\n"
    try:
        output.write(_Tracked(text))  # held by the output alone from here
        stream.gate.set()
        assert output.written(_WAIT)
        assert seen, "the output still holds a line it wrote"
    finally:
        stream.gate.set()
        output.close(_WAIT)
    assert stream.wrote == [text]
    # Let go of while still counted: the count (and ``written``) only then say it is gone.
    assert seen == [(len(text), 0)], (
        f"the line was let go of with _chars={seen[0][0]}, _done_items={seen[0][1]}: the"
        " thread held it after taking it off the memory count"
    )
