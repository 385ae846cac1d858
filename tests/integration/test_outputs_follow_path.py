"""The findings log and the ToolTrace dump follow their paths without a SIGHUP: a file removed
(a cleanup) or renamed away (a rotation whose postrotate sends no signal) is opened again at its
path at the next write a second later or more (``background_thread.FOLLOW_SECONDS``, on the injected
clock); a file removed with its directory loses its lines, counted, rather than fill a file no
one can read, until the path can be created again."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.integration import agents
from tests.integration.conftest import RunningServer
from tests.integration.faults_support import POLICY, trace_id
from tests.integration.ingest_support import send_grpc

FAILURES = "toolwatch_output_failures_total"


def _refund(server: RunningServer) -> str:
    """An unverified refund, judged: one finding and one ToolTrace line; its trace id."""
    spans = agents.record(agents.unverified_refund_run(), "genai")
    send_grpc(server, spans)
    assert server.settle() == 1
    return trace_id(spans)


def _traces(path: Path) -> list[str]:
    return [json.loads(line)["trace_id"] for line in path.read_text().splitlines()]


def _server(
    start_server: Callable[..., RunningServer], tmp_path: Path, logs: Path
) -> RunningServer:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(yaml.safe_dump({"policy": POLICY}))
    logs.mkdir(exist_ok=True)
    return start_server(
        config,
        output__findings=str(logs / "findings.jsonl"),
        output__dump_tooltraces=str(logs / "tooltraces.jsonl"),
    )


def test_a_removed_findings_log_is_created_again_at_its_path(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    server = _server(start_server, tmp_path, logs)
    _refund(server)
    (logs / "findings.jsonl").unlink()
    (logs / "tooltraces.jsonl").unlink()
    second = _refund(server)  # settle advanced the clock past FOLLOW_SECONDS
    assert _traces(logs / "findings.jsonl") == [second]
    assert _traces(logs / "tooltraces.jsonl") == [second]
    assert server.sample(FAILURES, {"output": "findings_log"}) == 0


def test_a_log_renamed_away_without_a_sighup_gets_the_later_lines_at_its_path(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    server = _server(start_server, tmp_path, logs)
    first = _refund(server)
    (logs / "findings.jsonl").rename(logs / "findings.jsonl.1")
    second = _refund(server)
    assert _traces(logs / "findings.jsonl.1") == [first]
    assert _traces(logs / "findings.jsonl") == [second]


def test_a_log_whose_directory_was_removed_counts_its_lines_lost_until_it_is_back(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """Before: the findings went on into the deleted file, which no one could read, and
    nothing said so."""
    logs = tmp_path / "logs"
    server = _server(start_server, tmp_path, logs)
    _refund(server)
    shutil.rmtree(logs)
    _refund(server)
    assert server.sample(FAILURES, {"output": "findings_log"}) == 1
    assert server.sample(FAILURES, {"output": "tooltraces"}) == 1
    logs.mkdir()
    third = _refund(server)
    assert _traces(logs / "findings.jsonl") == [third]
    assert _traces(logs / "tooltraces.jsonl") == [third]
    assert server.sample(FAILURES, {"output": "findings_log"}) == 1
