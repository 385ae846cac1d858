"""A file for the output-thread tests that takes one write for each permit the test gives (a
log driver's collector that reads a little now and then): the test decides when the writer
thread's next write returns, and waits on ``entered`` for it to reach the next one. Every wait
is bounded by ``WAIT`` seconds, never reached when the code works."""

from __future__ import annotations

import io
import threading

__all__ = ["WAIT", "PermitFile"]

WAIT = 10.0


class PermitFile(io.StringIO):
    """Takes one write for each permit the test gives (``permits.release()``); ``entered``
    is released as each write reaches the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.permits = threading.Semaphore(0)
        self.entered = threading.Semaphore(0)

    def write(self, text: str, /) -> int:
        self.entered.release()
        assert self.permits.acquire(timeout=WAIT), "the test gave no permit"
        return super().write(text)

    def fileno(self) -> int:
        return -1
