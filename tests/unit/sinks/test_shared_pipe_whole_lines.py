"""Outputs that share one pipe write whole lines between each other's (review of the outputs'
threads, 89e28d3). Was: they tore each other's lines (below). Now: each write takes the lock
of the file it writes (``toolwatch.sinks.destinations``), the log thread's too.

``output.findings`` is ``-`` by default and ``output.dump_tooltraces`` may be ``-`` too
(docs/configuration.md: "`-` for stdout"); both then write standard output, a pipe under a
container runtime (its log driver) or a shell's ``|``. Each output has a thread of its own, and
each thread writes a batch (up to 64 Ki characters, or one longer ToolTrace) in one ``write``. A
write to a pipe of more than ``PIPE_BUF`` (4 KiB) bytes is not atomic: while the pipe is full
(the reader is slow: the very case the threads are for) the kernel takes it a page at a time as
room comes, and another writer's write goes in between. Before the threads, the event loop wrote
both outputs one write after the other, so no line was torn. Now a findings batch lands inside a
ToolTrace line: both are counted written, neither is JSON, a log shipper drops them and
``replay`` refuses the dump (what ``LineFile`` exists to prevent: "a line that is no JSON with
the next finding inside it").

The same goes for standard error and the log thread (``queued_logging``) when standard error is
that pipe too (``2>&1 |``): the log line telling that the findings log could not be written
lands inside a finding (second test).

A FIFO both outputs open stands for the shared pipe (it is one pipe, as ``-`` for both is);
the test reads it only once both threads are blocked writing (``written``/``queued_logging``'s
own bounded waits), then reads it to the end. No sleeps."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import resource
import select
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipes import drained, is_json, non_blocking_page
from toolwatch.config import OutputSettings
from toolwatch.outputs import open_outputs
from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.findings import Redaction
from toolwatch.sinks.linefile import LineFile, WriteFailures
from toolwatch.sinks.logqueue import queued_logging

_WAIT = 10.0  # seconds: a bound on each wait, never reached when the code works


def _fifo(tmp_path: Path, capacity: int | None = None) -> tuple[str, int]:
    """A FIFO and its read end (opened, not read yet)."""
    path = str(tmp_path / "stdout.fifo")
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    if capacity is not None:
        fcntl.fcntl(reader, fcntl.F_SETPIPE_SZ, capacity)
    return path, reader


class _Reader:
    """Reads the FIFO in a thread of its own until ``stop``, then what is left."""

    def __init__(self, reader: int) -> None:
        self._fd = reader
        self.data = bytearray()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.05)
            if ready:
                self._read()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                return
            self.data += chunk

    def stop(self) -> bytes:
        self._stop.set()
        self._thread.join(_WAIT)
        self._read()
        return bytes(self.data)


def _not_json(data: bytes) -> list[str]:
    torn = []
    for line in data.decode().splitlines():
        try:
            json.loads(line)
        except ValueError:
            torn.append(line[:60] + "..." + line[-60:])
    return torn


def test_findings_and_tooltraces_on_one_pipe_are_written_whole_lines(tmp_path: Path) -> None:
    """Scenario: the findings log and the ToolTrace dump both write standard output, a pipe
    whose reader is slow; a tick publishes 200 findings of 1 KiB and a ToolTrace of 1 MiB;
    the reader catches up.
    Expected: 201 lines, each JSON (a torn line is not "written").
    Found: the findings thread's batches land inside the ToolTrace line and the dump's pages
    inside findings: lines that are no JSON (four here), all counted written (no failure)."""
    path, reader = _fifo(tmp_path)
    failures: list[str] = []
    outputs = open_outputs(
        OutputSettings(findings=path, dump_tooltraces=path),
        [],
        [],
        Redaction(),
        wall_clock=lambda: 0,
        failed=failures.append,
        clock=lambda: 0.0,
    )
    findings, dump = (file.output for file in outputs.files)
    for i in range(200):  # 200 runs' findings: the thread writes 64 Ki characters at once
        findings.write(json.dumps({"finding": i, "pad": "f" * 1000}) + "\n")
    dump.write(json.dumps({"trace_id": "t1", "pad": "t" * (1024 * 1024)}) + "\n")
    outputs.write_queued()
    try:
        assert not outputs.written(0.5)  # both threads blocked in their writes: the pipe full
        read = _Reader(reader)
        assert outputs.written(_WAIT)
        outputs.close(_WAIT)
        data = read.stop()
    finally:
        os.close(reader)
    assert failures == []
    assert len(data.decode().splitlines()) == 201
    torn = _not_json(data)
    assert torn == [], f"{len(torn)} lines torn by the other output's writes: {torn[:2]}"


def test_a_log_line_about_the_findings_log_does_not_land_inside_a_finding(
    tmp_path: Path,
) -> None:
    """Scenario: ``serve 2>&1 | shipper``: the findings log (``-``) and standard error are one
    pipe, whose reader stalled; the findings thread is blocked in a batch of findings; the
    shutdown's grace runs out, so ``close`` logs "could not write the findings log ...", which
    the log thread writes to standard error; the reader catches up.
    Expected: the log line between two findings, each finding whole.
    Found: the log line is inside a finding: the findings log holds a line that is no JSON
    (the very line that says the file "may hold in part" the lines being written)."""
    path, reader = _fifo(tmp_path, capacity=4096)  # a page: the batch waits for the reader
    stderr = open(path, "w")  # noqa: SIM115  # standard error, the same pipe
    handler = logging.StreamHandler(stderr)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    stream = LineFile(path)
    failures = []
    output = BackgroundOutput(
        stream,
        WriteFailures("the findings log", lambda: failures.append(1), logging.getLogger("t")),
    )
    try:
        with queued_logging(close_timeout=0.5):
            for i in range(200):  # 200 publications: the thread takes 64 Ki characters at once
                output.write(json.dumps({"finding": i, "pad": "f" * 1000}) + "\n")
            output.write_queued()
            assert not output.written(0.5)  # blocked in its first batch
            output.close(0.1)  # the rest counted lost, logged
        # queued_logging gave its thread 0.5 s: it is blocked writing that log line
        read = _Reader(reader)
        output._thread.join(_WAIT)  # the batch written once read; nothing more after close
        handler.close()
        logged = [t for t in threading.enumerate() if t.name == "toolwatch-log"]
        for thread in logged:
            thread.join(_WAIT)
        data = read.stop()
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
        stream.close()
        stderr.close()
        os.close(reader)
    lines = data.decode().splitlines()
    told = [line for line in lines if "could not write the findings log" in line]
    assert len(told) == 1, lines[-3:]
    assert told[0].startswith("could not write the findings log"), told[0][:120]
    assert [line[:60] for line in lines if line not in told and not is_json(line)] == []


@contextlib.contextmanager
def _stderr_on(fd: int) -> Iterator[None]:
    """The root logger's one handler a plain ``StreamHandler`` on ``fd`` (standard error as
    ``basicConfig`` sets it), its records written by ``queued_logging``'s thread."""
    stream = open(os.dup(fd), "w")  # noqa: SIM115
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
        stream.close()


def test_a_non_blocking_shared_pipe_gets_every_line_whole_and_loses_none() -> None:
    """Scenario: ``serve 2>&1 | reader`` where the pipe is non-blocking (``O_NONBLOCK`` is the
    open pipe's: a parent that set it on its own standard output, as Node.js does, sets it
    for ``serve``) and holds one page; a finding of 10 KiB, a log record of 10 KiB, another
    finding; the reader reads as it can.
    Was (review of f14ef64): a write that did not fit went in part and failed (EAGAIN): the
    finding counted lost with its first 4 KiB in the pipe and the log record glued to them,
    or the log record dropped in part and the next finding glued to it (no JSON, counted
    written). Now: the writer threads wait for room as a blocking write would
    (``destinations.wait_writable``): every line whole, none lost."""
    read_end, write_end = non_blocking_page()
    data, reader = drained(read_end)
    failures: list[int] = []
    output = BackgroundOutput(
        LineFile("<stdout>", fd=os.dup(write_end)),
        WriteFailures("the findings log", lambda: failures.append(1), logging.getLogger("t")),
    )
    first = json.dumps({"finding": 1, "pad": "f" * 10_000})
    try:
        with _stderr_on(write_end), queued_logging(close_timeout=_WAIT):
            output.write(first + "\n")
            logging.getLogger("toolwatch.app").error("a long record %s", "r" * 10_000)
            output.write(json.dumps({"finding": 2}) + "\n")
            output.write_queued()
            assert output.written(_WAIT)
    finally:
        output.close(_WAIT)
        os.close(write_end)
        reader.join(_WAIT)
        os.close(read_end)
    lines = data.decode().split("\n")
    assert failures == []
    assert sorted(lines) == sorted(
        ["", first, '{"finding": 2}', "ERROR a long record " + "r" * 10_000]
    )


def test_a_descriptor_past_1024_waits_for_room_too() -> None:
    """A server with many connections holds descriptors past ``select``'s 1,024: standard
    output's copy (``LineFile.standard_output``) can be one. The wait for room on a
    non-blocking pipe uses ``poll``: a 10 KiB line to a one-page pipe is written whole."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"at most {hard} descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    read_end, write_end = non_blocking_page()
    high = os.dup2(write_end, 1500)
    os.close(write_end)
    data, reader = drained(read_end)
    line = json.dumps({"finding": 1, "pad": "f" * 10_000}) + "\n"
    try:
        assert LineFile("<stdout>", fd=high).write(line) == len(line)
    finally:
        os.close(high)
        reader.join(_WAIT)
        os.close(read_end)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert data.decode() == line
