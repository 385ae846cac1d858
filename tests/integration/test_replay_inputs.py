"""``toolwatch replay`` given what a Collector writes beside OTLP/JSON traces: the other
signals' lines, and OTLP protobuf."""

from __future__ import annotations

import base64
import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.integration.cli_support import EXAMPLES, run_cli
from tests.unit.config_warnings_support import HALF_POLICY
from tests.unit.evaluation.eval_factories import trace
from toolwatch.cli_replay import REPLAY_DEFAULTS_NOTE
from toolwatch.sinks.tooltraces import tooltrace_to_dict

REQUEST = EXAMPLES / "unverified-refund.otlp.json"
LOGS = {
    "resourceLogs": [
        {
            "resource": {"attributes": []},
            "scopeLogs": [
                {
                    "scope": {},
                    "logRecords": [
                        {"timeUnixNano": "1764448346000000000", "body": {"stringValue": "hi"}}
                    ],
                }
            ],
        }
    ]
}
METRICS = {"resourceMetrics": [{"resource": {"attributes": []}, "scopeMetrics": []}]}


def test_the_logs_and_metrics_lines_of_a_file_export_are_skipped_and_counted(
    tmp_path: Path,
) -> None:
    """docs/commands.md: replay reads "OTLP/JSON as the Collector's `file` exporter writes
    it". One `file` exporter listed in the traces, metrics and logs pipelines writes all
    three to its file, a request per line; replay refused the whole file at the first logs
    or metrics line, as "not a ToolTrace line: no "format" field"."""
    request = json.loads(REQUEST.read_text())
    capture = tmp_path / "collector-export.jsonl"
    lines = [LOGS, request, METRICS, LOGS]
    capture.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = run_cli("replay", "--no-progress", str(capture))
    assert result.returncode == 0, result.stderr
    assert re.search(r"1 ToolTrace\(s\) evaluated", result.stdout), result.stdout
    assert result.stderr == (
        f"toolwatch replay: {capture}:1: skipped 3 line(s) of OTLP logs, metrics or profiles"
        " (logs=2, metrics=1), the first here: replay evaluates traces only\n"
        f"{REPLAY_DEFAULTS_NOTE}\n"
    )


def test_a_report_judged_by_the_built_in_defaults_says_so(tmp_path: Path) -> None:
    """README, Quick start: a `--dump-tooltraces` file is read back with `replay`. Without
    `--config` replay judges by the built-in defaults, which have no policy: the example's
    unverified refund gave an empty report, and a gate on it passed, without a word."""
    gate = ("--max-findings", "MISSING_VERIFICATION_STEP=0")
    bare = run_cli("replay", "--no-progress", *gate, str(REQUEST))
    assert bare.returncode == 0, bare.stderr
    assert "MISSING_VERIFICATION_STEP" not in bare.stdout.split("Gates")[0], bare.stdout
    assert bare.stderr == f"{REPLAY_DEFAULTS_NOTE}\n"

    config = str(EXAMPLES / "toolwatch.yaml")
    judged = run_cli("replay", "--no-progress", "--config", config, *gate, str(REQUEST))
    assert judged.returncode == 1, judged.stderr
    assert re.search(r"MISSING_VERIFICATION_STEP +1", judged.stdout), judged.stdout
    assert REPLAY_DEFAULTS_NOTE not in judged.stderr


def test_a_report_judged_by_half_a_policy_is_followed_by_the_warning_serve_logs(
    tmp_path: Path,
) -> None:
    """Was: a CI gate on MISSING_VERIFICATION_STEP passed the unverified refund without a
    word, judged by ``dangerous_tools`` with nothing to verify them, which check-config and
    serve warn of. Now replay prints the warnings of how runs are judged after its report,
    as it prints its note of the built-in defaults."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text("policy:\n  dangerous_tools: [issue_refund]\n")
    gate = ("--max-findings", "MISSING_VERIFICATION_STEP=0")
    judged = run_cli("replay", "--no-progress", "--config", str(config), *gate, str(REQUEST))
    assert judged.returncode == 0, judged.stderr
    assert re.search(r"1 ToolTrace\(s\) evaluated", judged.stdout), judged.stdout
    assert judged.stderr == f"toolwatch replay: warning: {HALF_POLICY}\n"

    config.write_text(
        "policy:\n  dangerous_tools: [issue_refund]\n  verification_tools: [lookup_order]\n"
    )
    judged = run_cli("replay", "--no-progress", "--config", str(config), *gate, str(REQUEST))
    assert (judged.returncode, judged.stderr) == (1, "")


def _request_bytes() -> bytes:
    """examples/unverified-refund.otlp.json as the protobuf the OTLP exporters send."""
    document = json.loads(REQUEST.read_text())

    def ids_as_base64(value: Any) -> None:  # OTLP/JSON ids are hex; proto3 JSON's base64
        if isinstance(value, dict):
            for key in ("traceId", "spanId", "parentSpanId"):
                if isinstance(value.get(key), str) and value[key]:
                    value[key] = base64.b64encode(bytes.fromhex(value[key])).decode()
            for item in value.values():
                ids_as_base64(item)
        elif isinstance(value, list):
            for item in value:
                ids_as_base64(item)

    ids_as_base64(document)
    return json_format.ParseDict(document, ExportTraceServiceRequest()).SerializeToString()


@pytest.mark.parametrize(
    "framing",
    [
        "raw",  # a saved OTLP/HTTP protobuf body (curl --data-binary, an SDK's request)
        "length_prefixed",  # the Collector's file exporter with `format: proto`
    ],
)
def test_an_otlp_protobuf_file_is_named_as_protobuf(tmp_path: Path, framing: str) -> None:
    """Such a file was refused (2) as "not UTF-8 text" on line 2 (a request's first byte is
    0x0a, a newline) or "not JSON: Expecting value (column 1)", which did not tell the
    engineer that the file is OTLP protobuf and replay wants OTLP/JSON."""
    body = _request_bytes()
    data = body if framing == "raw" else struct.pack(">I", len(body)) + body
    capture = tmp_path / "capture.bin"
    capture.write_bytes(data)
    result = run_cli("replay", "--no-progress", str(capture))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"toolwatch replay: {capture}: looks like OTLP protobuf")
    assert "format: json" in result.stderr


def test_a_json_file_that_is_no_protobuf_keeps_its_json_error(tmp_path: Path) -> None:
    capture = tmp_path / "capture.jsonl"
    capture.write_text("\n\n\n{nope\n")  # starts with newlines, as a request's 0x0a would
    result = run_cli("replay", "--no-progress", str(capture))
    assert result.returncode == 2
    assert "protobuf" not in result.stderr
    assert f"{capture}:4: not JSON" in result.stderr, result.stderr


def test_a_dump_lines_nan_argument_shown_by_show_fields_does_not_crash_replay_json(
    tmp_path: Path,
) -> None:
    """The JSON report's ``details`` are the findings log's, the fields
    ``output.show_fields`` names shown (examples/toolwatch.yaml shows
    ``issue_refund.order_id``). Was (review): replay read ToolTrace lines with
    ``json.loads``, which takes ``NaN``: an unverified refund whose ``order_id`` is ``NaN``
    made ``replay --format json`` fail with a traceback (``Out of range float values are
    not JSON compliant``). Now: read as the server reads JSON text (``jsontext.loads``),
    ``NaN`` kept as its text."""
    line = tooltrace_to_dict(
        trace(("issue_refund", {"order_id": "PLACEHOLDER", "amount_usd": 5}), agent="refund-bot")
    )
    text = json.dumps(line).replace('"PLACEHOLDER"', "NaN")
    dump = tmp_path / "tooltraces.jsonl"
    dump.write_text(text + "\n")
    config = EXAMPLES / "toolwatch.yaml"

    as_text = run_cli("replay", "--config", str(config), "--no-progress", str(dump))
    assert as_text.returncode == 0, as_text.stderr
    assert "MISSING_VERIFICATION_STEP" in as_text.stdout

    result = run_cli(
        "replay", "--config", str(config), "--format", "json", "--no-progress", str(dump)
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    (listed,) = [f for f in report["findings"] if f["category"] == "MISSING_VERIFICATION_STEP"]
    assert listed["details"]["fields"] == {"order_id": "NaN"}
