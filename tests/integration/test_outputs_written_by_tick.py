"""The findings a tick of the engine counted reach the output files with the metrics: an
observer outside the process learns a run was judged from ``/metrics``
(``toolwatch_tool_traces_total``), then reads the findings log or its failure counter. The
writer thread gathers lines for up to ``GATHER_SECONDS`` (one write for many), but the end of
each tick has it write what the tick published at once (``App.tick``,
``Outputs.write_queued``). Review of d72c877, whose gathering alone let those reads come
first: six tests of ``test_faults.py`` and ``test_faults_stdout.py`` failed.

A real ``toolwatch serve`` child, its gRPC exporter from the OpenTelemetry SDK, its
``/metrics`` scraped over HTTP; waits are bounded (``send_long_run`` polls the metric the
network decides).
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from pathlib import Path

from tests.integration.conftest import until
from tests.integration.faults_support import (
    ServeProcess,
    file_size_limit,
    read_jsonl,
    send_long_run,
    serve_one_output,
)


def test_a_run_counted_in_metrics_has_its_finding_in_the_findings_log(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    """Scenario: ``serve`` writes its findings log to a file; a run with a finding is
    exported, and the observer waits until ``toolwatch_tool_traces_total`` counts it (what
    ``send_long_run`` in test_faults does), then reads the log.

    Was: the log is still empty: the writer thread gathers for 50 ms after the line is
    queued, and the scrape saw the count first (deterministic here: 3 of 3 runs).
    Now: either the line is in the file by the time the run is counted (not gathering a
    lone line), or the tests that read the file right after the count wait for it (poll
    the file's lines or the failure counter with ``until``, as for what a real process
    decides). Regression (d72c877): it broke five existing integration tests."""

    server, path = serve_one_output(tmp_path / "gather.yaml", serve_process, "findings")
    sent: list[str] = []
    send_long_run(server, sent)
    assert [line["trace_id"] for line in read_jsonl(path)] == sent


def test_a_write_failure_is_counted_by_the_time_the_run_is(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    """Scenario: the ToolTrace dump's disk is full (RLIMIT_FSIZE at its size); a run is
    exported and counted in ``/metrics``; an alert or test reads
    ``toolwatch_output_failures_total{output="tooltraces"}`` then.

    Was: 0: the failed write happens up to 50 ms after the run was counted.
    Now: 1 by then, as before d72c877 (or the observers poll for it).
    Regression (d72c877): ``test_a_dump_file_on_a_full_disk_does_not_stop_completing_later_
    traces`` fails the same way."""

    server, path = serve_one_output(tmp_path / "full.yaml", serve_process, "dump_tooltraces")
    sent: list[str] = []
    send_long_run(server, sent)
    assert until(lambda: len(read_jsonl(path)) == 1)  # the first line is in: the disk is
    try:  # full from here on
        file_size_limit(server.proc.pid, path.stat().st_size)
        send_long_run(server, sent)
        failed = server.sample("toolwatch_output_failures_total", {"output": "tooltraces"})
    finally:
        file_size_limit(server.proc.pid, resource.RLIM_INFINITY)
    assert failed == 1
