"""Findings and ToolTrace lines published outside a tick of the engine (runs evicted from a full
buffer as spans arrive) reach the files with the metrics that count them (review of 9d0ee2e)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.conftest import until
from tests.integration.faults_support import (
    GRACE_SECONDS,
    ServeProcess,
    export,
    long_unverified_refund_run,
    read_jsonl,
    trace_id,
    write_config,
)


def test_a_run_evicted_and_counted_has_its_tooltrace_in_the_dump(
    tmp_path: Path, serve_process: Callable[[Path], ServeProcess]
) -> None:
    """Scenario: ``serve`` with ``overflow: evict_oldest`` and room for one trace writes its
    ToolTrace dump to a file. A run is exported, then a second one: admitting it evicts the
    first, judged on the receiver's call (``Engine.admit``), not by a tick: as it came
    (``complete``), since its end had come. The observer waits until
    ``toolwatch_tool_traces_total{outcome="complete"}`` counts it, then reads the dump (the
    pattern of test_outputs_written_by_tick.py).

    Was: the dump is still empty: ``write_queued`` is called only by ``App.tick`` after a
    tick that completed runs; an eviction's lines wait the writer thread's
    ``GATHER_SECONDS`` (50 ms) while ``/metrics`` already counts the run.
    Now: the line is in the file by the time the run is counted, as for a tick's (have
    ``App._offer`` call ``Outputs.write_queued`` when ``admit`` evicted, or the engine say
    it published).
    Regression (d72c877, left by 9d0ee2e, which covered only the tick): before d72c877 the
    thread wrote each publication at once."""
    config = write_config(
        tmp_path / "evict.yaml",
        {},
        assembly={
            # Nothing becomes due by a tick while the test runs: only eviction completes.
            "completion_wait_seconds": 60,
            "max_trace_age_seconds": 120,
            "max_traces": 1,
            "overflow": "evict_oldest",
            "tick_seconds": 0.01,
        },
        shutdown_grace_seconds=GRACE_SECONDS,
    )
    document = yaml.safe_load(config.read_text())
    document["output"]["findings"] = "-"
    config.write_text(yaml.safe_dump(document))
    dump = Path(document["output"]["dump_tooltraces"])
    server = serve_process(config)

    first = agents.record(long_unverified_refund_run(), "genai")
    second = agents.record(long_unverified_refund_run(), "genai")
    assert export(server.addresses["grpc"], first) is SpanExportResult.SUCCESS
    assert export(server.addresses["grpc"], second) is SpanExportResult.SUCCESS
    # The first run had ended (its root came): evicted, it is judged as it came, complete.
    judged = {"agent": "refund-bot", "outcome": "complete", "reference": "none", "traffic": "live"}
    assert until(lambda: server.sample("toolwatch_tool_traces_total", judged) == 1)
    assert server.sample("toolwatch_trace_evictions_total", {"reason": "max_traces"}) == 1
    assert [line["trace_id"] for line in read_jsonl(dump)] == [trace_id(first)]
