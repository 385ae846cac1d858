"""What the tests of an output written to a FIFO share: a reader's non-blocking look at what
it can read, and a log collector in a child process reading its FIFO as collectors do."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path
from typing import IO

__all__ = ["COLLECTOR", "Collector", "available"]

#: A log collector reading its FIFO: it opens it without waiting for a writer, keeps a writer
#: of its own open (no end of file while toolwatch is away, as collectors do), says "ready",
#: then prints each line it reads.
COLLECTOR = """
import os, sys
reader = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
own_writer = os.open(sys.argv[1], os.O_WRONLY)
os.set_blocking(reader, True)
print("ready", flush=True)
for line in os.fdopen(reader, "rb"):
    sys.stdout.write(line.decode())
    sys.stdout.flush()
"""


def available(reader: int) -> bytes:
    """What the FIFO's reader (a non-blocking descriptor) can read now (nothing: ``b""``)."""
    try:
        return os.read(reader, 100)
    except BlockingIOError:
        return b""


class Collector:
    """A collector process reading the FIFO at ``path`` (``COLLECTOR``), started and waited
    for until it has opened it; each wait for it bounded by ``wait`` seconds."""

    def __init__(self, path: Path, wait: float) -> None:
        self._wait = wait
        self._process = subprocess.Popen(
            [sys.executable, "-c", COLLECTOR, str(path)], stdout=subprocess.PIPE, bufsize=0
        )
        assert self._process.stdout is not None
        self._stdout: IO[bytes] = self._process.stdout
        assert self.printed() == "ready\n"

    def printed(self) -> str:
        """The next line it printed, waited for up to ``wait`` seconds."""
        ready, _, _ = select.select([self._stdout], [], [], self._wait)
        assert ready, f"the collector printed nothing in {self._wait} s"
        return self._stdout.readline().decode()

    def end(self) -> None:
        """Ends it, as a restart does (its FIFO's ends closed)."""
        if self._process.returncode is None:
            self._process.kill()
            self._process.wait(self._wait)
            self._stdout.close()
