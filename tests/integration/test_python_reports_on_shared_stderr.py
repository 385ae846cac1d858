"""What Python reports itself on standard error, in a ``serve`` whose findings log and ToolTrace
dump share standard error (``findings: /dev/stderr``, as ``2>&1`` or the journal share it):
a warning, an exception that ends a thread, one raised in ``__del__``, and asyncio's "Task
exception was never retrieved". Every line of standard error must belong to a whole record:
a JSON line of an output, or a log record in the CLI's format, its traceback's lines together
under it.

Was: warnings, thread exceptions and unraisable exceptions were written to ``sys.stderr`` by
the thread that reported them, a traceback a line at a time, past the lock the log thread and
the outputs take per file (``toolwatch.sinks.destinations``). Seen running this scenario at
71198c8: ``Exception in thread 2026-12-06 21:24:17,938 ERROR asyncio: Task exception was never
retrieved``, the asyncio record written into the middle of the thread's first line, its
traceback after the record's. Now: they are log records (``toolwatch.sinks.python_reports``).

The faults are made in the real ``toolwatch serve`` process by a ``sitecustomize`` module the
test puts first on its ``PYTHONPATH`` (Python imports it at start-up): on SIGUSR1, which
toolwatch leaves alone, the main thread (the event loop's) warns, starts a thread that raises,
drops an object whose ``__del__`` raises and a task that fails, each message longer than a
pipe's atomic 4 KiB. The rest of ``PYTHONPATH`` is this test's ``sys.path``, so the child runs
this checkout's toolwatch. The process runs on the real clock: the test waits for its lines
with deadlines (``until``)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.integration.conftest import until
from tests.integration.faults_support import (
    GRACE_SECONDS,
    ServeProcess,
    send_long_run,
    write_config,
)
from tests.pipes import is_json

_LONG = 5000  # characters of each report's message: more than a pipe writes atomically

_SITECUSTOMIZE = f"""
import asyncio, itertools, signal, threading, warnings

_faults = itertools.count(1)


def _fail(n):
    raise RuntimeError(f"thread {{n}} " + "t" * {_LONG})


class _Finalizer:
    def __init__(self, n):
        self.n = n

    def __del__(self):
        raise ValueError(f"finalizer {{self.n}} " + "d" * {_LONG})


async def _task(n):
    raise ConnectionError(f"task {{n}} " + "c" * {_LONG})


def _make_faults(signum, frame):
    n = next(_faults)
    warnings.warn(f"warning {{n}} " + "w" * {_LONG}, UserWarning)
    threading.Thread(target=_fail, args=(n,), name=f"fault-{{n}}").start()
    _Finalizer(n)
    asyncio.get_running_loop().create_task(_task(n))


signal.signal(signal.SIGUSR1, _make_faults)
"""

#: The line of ``_SITECUSTOMIZE`` that warns, as the warning names it.
_WARN_LINE = next(
    number for number, line in enumerate(_SITECUSTOMIZE.splitlines(), 1) if "warnings.warn(" in line
)

#: The first line of a log record in the CLI's format (``toolwatch.cli.main``).
_RECORD = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: "
)
_TRACEBACK = "Traceback (most recent call last):"


def _entries(lines: list[str]) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """Standard error's lines as the outputs' JSON objects and the log records (each its
    lines); fails at a line that is neither, nor a record's next line (a torn line, or a
    record's line that came after another writer's)."""
    outputs: list[dict[str, Any]] = []
    records: list[list[str]] = []
    in_record = False
    for number, line in enumerate(lines):
        if _RECORD.match(line):
            records.append([line])
            in_record = True
        elif is_json(line):
            outputs.append(json.loads(line))
            in_record = False
        else:
            assert in_record, f"line {number} belongs to no record: {line[:200]!r}"
            records[-1].append(line)
    return outputs, records


def _report(record: list[str]) -> tuple[str, str, bool, str]:
    """A record as the test compares it: its first line without time and level, its
    "Traceback" line (the second line, but for asyncio's record, whose message has two),
    whether every line between that and the last is a frame's (indented), the last line
    (the exception's)."""
    said = record[0].split(" ", 3)[3]  # after the date, the time and the level
    if len(record) == 1:
        return said, "", False, ""
    start = record.index(_TRACEBACK)
    frames = record[start + 1 : -1]
    return said, record[start], bool(frames) and all(f.startswith("  ") for f in frames), record[-1]


def test_python_reports_are_whole_log_records_among_the_outputs_lines(
    tmp_path: Path, serve_process: Callable[..., ServeProcess]
) -> None:
    """Scenario: ``serve`` with both outputs on standard error; twice, the faults are made
    (SIGUSR1) and a run with a ToolTrace line of 20 KiB is sent and judged; then SIGTERM.
    Now: each report is one record in the CLI's format, its traceback whole under it; the
    runs' findings and ToolTrace lines are whole JSON; no line belongs to nothing."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    config = write_config(
        tmp_path / "stderr.yaml",
        {},
        assembly={"completion_wait_seconds": 0.01, "tick_seconds": 0.01},
        shutdown_grace_seconds=GRACE_SECONDS,
    )
    document = yaml.safe_load(config.read_text())
    document["output"] = {"findings": "/dev/stderr", "dump_tooltraces": "/dev/stderr"}
    config.write_text(yaml.safe_dump(document))
    server = serve_process(config, env={"PYTHONPATH": os.pathsep.join([str(hooks), *sys.path])})
    sent: list[str] = []
    for _ in range(2):
        server.proc.send_signal(signal.SIGUSR1)
        send_long_run(server, sent)
    kinds = (
        "UserWarning: warning",
        "Exception in thread",
        "Exception ignored in",
        "never retrieved",
    )
    assert until(lambda: [sum(k in line for line in server.log) for k in kinds] == [2] * 4), (
        "".join(server.log)[-2000:]
    )
    code, _ = server.terminate(timeout=GRACE_SECONDS + 10)
    assert code == 0

    outputs, records = _entries([line.removesuffix("\n") for line in server.log])
    assert [o["trace_id"] for o in outputs if "calls" in o] == sent  # the ToolTraces
    assert {o["trace_id"] for o in outputs if "category" in o} == set(sent)  # their findings
    site = hooks / "sitecustomize.py"
    reports = sorted(
        report for report in map(_report, records) if report[0].startswith(("py.", "asyncio:"))
    )
    expected = []
    for n in (1, 2):
        expected += [
            (
                f"py.warnings: {site}:{_WARN_LINE}: UserWarning: warning {n} " + "w" * _LONG,
                "",
                False,
                "",
            ),
            (
                f"py.threading: Exception in thread fault-{n}",
                _TRACEBACK,
                True,
                f"RuntimeError: thread {n} " + "t" * _LONG,
            ),
            (
                "py.unraisable: Exception ignored in: <function _Finalizer.__del__",
                _TRACEBACK,
                True,
                f"ValueError: finalizer {n} " + "d" * _LONG,
            ),
            (
                "asyncio: Task exception was never retrieved",
                _TRACEBACK,
                True,
                f"ConnectionError: task {n} " + "c" * _LONG,
            ),
        ]
    assert [(r[0].split(" at 0x")[0], *r[1:]) for r in reports] == sorted(expected)
    # toolwatch's own records are one line each here: the reports are the only longer ones.
    assert sum(len(r) > 1 for r in records) == 2 * 3
