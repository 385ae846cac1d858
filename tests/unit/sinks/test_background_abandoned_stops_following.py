"""An output ``close`` gave up on follows its path no more. Was: its thread, blocked in a
write when the shutdown's grace ran out, went on once the write failed; a FIFO's reader gone
(EPIPE) had it look at its path at once (``follow``), and open what it found there. An output
written to ``/dev/fd/N`` whose descriptor was closed and then reused (by a test's next
``Popen`` exec-status pipe) opened that pipe and held its write end: the next test hung.
Now: once ``close`` gave up, the thread looks at nothing, opens nothing, writes nothing and
ends.

The write is held by a ``PermitFile`` until the test lets it fail with EPIPE; the waits are
bounded (``WAIT``), no sleeps."""

from __future__ import annotations

import errno
import logging
import threading

from permit_file import WAIT, PermitFile

from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.background_thread import TextOutput
from toolwatch.sinks.linefile import WriteFailures


class _ReaderGoes(PermitFile):
    """A FIFO whose reader goes away while a write waits: the write fails with EPIPE."""

    def write(self, text: str, /) -> int:
        super().write(text)
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def test_an_output_close_gave_up_on_does_not_look_at_its_path_again() -> None:
    looked: list[TextOutput] = []

    def follow(stream: TextOutput) -> TextOutput | OSError | None:
        looked.append(stream)
        return None

    stream = _ReaderGoes()
    failures = WriteFailures("the findings log", lambda: None, logging.getLogger(__name__))
    before = set(threading.enumerate())
    output = BackgroundOutput(stream, failures, follow=follow)
    (thread,) = set(threading.enumerate()) - before  # the output's
    output.write("taken\n")
    assert stream.entered.acquire(timeout=WAIT)  # the thread blocks in its write
    output.close(timeout=0.01)  # the grace runs out: given up on
    stream.permits.release()  # the write returns: EPIPE
    thread.join(WAIT)
    assert not thread.is_alive()
    assert looked == []
    assert stream.getvalue() == "taken\n"  # the one write, nothing after it
