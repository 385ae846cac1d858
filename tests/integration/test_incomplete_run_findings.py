"""A finding of a run evaluated incomplete says so wherever the on-call reads it: the findings
log line, the findings stream (tail's line and --json), and the explanation.

The on-call audit sent runs whose root span never came: they were evaluated at
``assembly.max_trace_age_seconds`` (``timed_out``) and paged MISSING_VERIFICATION_STEP, their
finding lines, tail's lines and the page identical to a whole run's; only the ToolTrace dump
said ``"complete": false``. Here a real server (port 0, injected clock) is sent such a run by
the OpenTelemetry SDK's exporter, and a subscriber reads the stream through a real channel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc

from tests.integration import agents
from tests.integration.conftest import RunningServer
from tests.integration.evaluation_support import unverified_refund_dump
from tests.integration.ingest_support import send_grpc
from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc
from toolwatch.tail_format import format_finding_line, stream_finding_record

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "toolwatch.yaml"
NOTE = (
    " [run evaluated incomplete (timed_out: its root span had not come within"
    " assembly.max_trace_age_seconds); judged on the spans that came]"
)


def _findings_log(server: RunningServer) -> list[dict[str, object]]:
    assert server.app.outputs_written()
    text = Path(server.app.config.output.findings or "").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def test_a_rootless_runs_page_says_it_was_judged_incomplete(
    start_server: Callable[..., RunningServer],
) -> None:
    server = start_server(EXAMPLE)
    spans = agents.record(agents.unverified_refund_run(), "genai")
    rootless = [span for span in spans if span.parent is not None]
    assert len(rootless) == len(spans) - 1  # the agent's root span never comes
    with grpc.insecure_channel(server.address("stream")) as channel:
        stub = findings_pb2_grpc.FindingsServiceStub(channel)
        stream = stub.Subscribe(findings_pb2.SubscribeRequest(), timeout=30)
        next(iter(stream.initial_metadata()), None)  # subscribed before the finding
        assert send_grpc(server, rootless).name == "SUCCESS"
        server.settle(server.app.config.assembly.max_trace_age_seconds + 1)
        message = next(stream)
        stream.cancel()
    [logged] = _findings_log(server)
    assert (logged["category"], logged["incomplete_reason"]) == (
        "MISSING_VERIFICATION_STEP",
        "timed_out",
    )
    assert str(logged["explanation"]).endswith(NOTE)
    assert message.incomplete_reason == "timed_out"
    assert stream_finding_record(message)["incomplete_reason"] == "timed_out"
    assert " MISSING_VERIFICATION_STEP incomplete=timed_out tool=issue_refund " in (
        format_finding_line(message)
    )


def test_a_whole_runs_finding_names_no_incomplete_reason(
    start_server: Callable[..., RunningServer],
) -> None:
    server = start_server(EXAMPLE)
    assert send_grpc(server, agents.record(agents.unverified_refund_run(), "genai")).name == (
        "SUCCESS"
    )
    server.settle()
    [logged] = _findings_log(server)
    assert (logged["category"], logged["incomplete_reason"]) == (
        "MISSING_VERIFICATION_STEP",
        None,
    )
    assert "incomplete" not in str(logged["explanation"])


def _replay_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWATCH_")}
    if os.environ.get("TOOLWATCH_PURE_PYTHON"):
        env["TOOLWATCH_PURE_PYTHON"] = os.environ["TOOLWATCH_PURE_PYTHON"]
    return env


def test_replay_json_lists_the_incomplete_reason_of_a_finding_of_an_incomplete_run(
    tmp_path: Path,
) -> None:
    """Was: ``replay --format json`` listed findings with the findings log's names but no
    ``incomplete_reason``: replaying a ``--dump-tooltraces`` capture of a timed-out run, a
    program could only grep the explanation's note. Now: each listed finding has it."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        "policy:\n  dangerous_tools: [issue_refund]\n  verification_tools: [lookup_order]\n"
    )
    dump = unverified_refund_dump(tmp_path, 1)
    run = json.loads(dump.read_text())
    run.update(complete=False, incomplete_reason="timed_out")
    dump.write_text(json.dumps(run) + "\n")
    command = [sys.executable, "-m", "toolwatch", "replay", "--no-progress", "--format", "json"]
    done = subprocess.run(
        [*command, "--config", str(config), str(dump)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_replay_env(),
    )
    assert done.returncode == 0, done.stderr[-600:]
    [finding] = json.loads(done.stdout)["findings"]
    assert finding["incomplete_reason"] == "timed_out"
    assert finding["explanation"].endswith(NOTE)
