"""A file for the output-thread tests that takes one write for each permit the test gives (a
log driver's collector that reads a little now and then): the test decides when the writer
thread's next write returns, and waits on ``entered`` for it to reach the next one. Every wait
is bounded by ``WAIT`` seconds, never reached when the code works."""

from __future__ import annotations

import io
import threading

__all__ = ["WAIT", "PermitFile", "WaitClock"]

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


class WaitClock:
    """An output's clock (``BackgroundOutput(clock=...)``), read once when the output is made
    and then twice around each wait for room: each wait lasts ``step`` seconds by it, and at
    its start ``file`` is given one write (a permit), which the output's thread makes once
    the wait lets go of the lock: an output that makes room ``step`` seconds into each wait.
    ``now`` may be moved on by the test (time passing outside the waits)."""

    def __init__(self, file: PermitFile, step: float) -> None:
        self._file = file
        self._step = step
        self._reads = 0
        self.now = 0.0
        self.waits = 0

    def __call__(self) -> float:
        self._reads += 1
        now = self.now
        if self._reads % 2 == 0:  # a wait starts: the 1st read is the constructor's
            self.waits += 1
            self._file.permits.release()
            self.now += self._step
        return now
