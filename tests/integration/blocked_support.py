"""A ``toolwatch serve`` process whose standard output and standard error are pipes a test fills
and leaves unread (``Pipe``, ``serve_on_pipes``), as a container log driver whose collector is
slow or down leaves them, and its ``/metrics`` read meanwhile (``scraped_sample``)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.cli_support import LISTENING
from tests.integration.conftest import until
from tests.integration.faults_support import START_TIMEOUT

#: Bytes ``Pipe.fill`` writes into a pipe before toolwatch does: more than it holds (64 KiB by
#: default), so that the writer blocks until the test reads.
_FILLER = 1024 * 1024


class Pipe:
    """A pipe whose write end a child inherits; ``fill`` blocks a thread writing blank lines
    into it until the test reads; ``read_until`` reads it, blank lines dropped. ``close``
    (once the child is gone) joins every thread before it closes the descriptors: a
    descriptor closed later by a thread could be another test's by then."""

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()
        self._data = bytearray()
        self._filler: threading.Thread | None = None
        self._reader: threading.Thread | None = None
        self._draining = False  # the reader reads to the end

    def fill(self) -> None:
        """Fills the pipe: a thread writes into it until the pipe is read."""

        def write() -> None:
            data = memoryview(b"\n" * _FILLER)
            with contextlib.suppress(OSError):
                while data:
                    data = data[os.write(self.write_end, data) :]

        self._filler = threading.Thread(target=write, daemon=True)
        self._filler.start()
        assert until(lambda: _queued(self.read_end) >= 65536, 10), "the pipe never filled"

    def drain(self) -> None:
        """Reads the pipe to its end in a thread of its own."""
        self._read_in_thread(None)

    def read_until(self, wanted: bytes, timeout: float = 20.0) -> list[bytes]:
        """Reads until ``wanted`` is in a line; the lines so far, but blank ones."""
        reader = self._read_in_thread(wanted)
        reader.join(timeout)
        return [line for line in bytes(self._data).split(b"\n") if line]

    def _read_in_thread(self, wanted: bytes | None) -> threading.Thread:
        reader = self._reader
        if reader is not None and reader.is_alive():
            if self._draining:
                return reader  # reads to the end already
            reader.join(20)  # one reader at a time
            assert not reader.is_alive(), "the pipe's last read never ended"
        self._draining = wanted is None
        self._reader = threading.Thread(target=self._read, args=(wanted,), daemon=True)
        self._reader.start()
        return self._reader

    def _read(self, wanted: bytes | None) -> None:
        while wanted is None or wanted not in self._data:
            chunk = os.read(self.read_end, 65536)
            if not chunk:
                return
            self._data += chunk

    def close(self) -> None:
        """Once the child is gone: read to the end (the filler's rest too), then closed."""
        self.drain()
        if self._filler is not None:
            self._filler.join(20)
        os.close(self.write_end)  # the last writer: the reader sees the end
        if self._reader is not None:
            self._reader.join(20)
        os.close(self.read_end)


def _queued(fd: int) -> int:
    """Bytes waiting in the pipe ``fd`` reads (FIONREAD)."""
    import termios  # noqa: PLC0415  # POSIX-only, as the pipes are

    buffer = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buffer)
    return int.from_bytes(buffer, sys.byteorder)


def serve_on_pipes(
    config: Path, out: Pipe, err: Pipe
) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """``toolwatch serve --config config``, its stdout ``out`` and stderr ``err``, once it has
    started; the process and its listeners' addresses by name."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWATCH_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolwatch.cli", "serve", "--config", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=out.write_end,
        stderr=err.write_end,
        env=env,
    )
    lines = err.read_until(b"hot path:", START_TIMEOUT)
    started = [m for line in lines if (m := LISTENING.search(line.decode()))]
    if not started:
        proc.kill()
        raise AssertionError("no start-up line:\n" + b"\n".join(lines).decode())
    return proc, started[0].groupdict()


def scraped_sample(addresses: dict[str, str], name: str, labels: dict[str, str]) -> float:
    """Of a ``/metrics`` scrape, the sum of the samples ``name`` whose labels include
    ``labels``."""
    with urllib.request.urlopen(f"http://{addresses['metrics']}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )
