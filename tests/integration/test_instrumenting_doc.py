"""docs/instrumenting.md's example, run: ``examples/instrumented_agent.py`` as a user runs it
(a process of its own, the OpenTelemetry SDK's batch processor and OTLP/gRPC exporter),
pointed at a real server on loopback (``start_server``, the example policy
``examples/toolwatch.yaml``) through ``OTEL_EXPORTER_OTLP_ENDPOINT``.

The ToolTrace the server rebuilt must hold exactly the calls the example's model asked for,
in its order, with their arguments and call ids; the refund without its lookup must page
MISSING_VERIFICATION_STEP; without content, what the page says of content capture holds;
each run is a conversation of its own unless one is named; and the doc shows the example as
it is. The page's other statements: ``test_instrumenting_doc_claims``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import RunningServer
from toolwatch.model import Category, ReferenceKind
from toolwatch.model_evaluation import Finding

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "instrumented_agent.py"
POLICY = ROOT / "examples" / "toolwatch.yaml"
DOC = ROOT / "docs" / "instrumenting.md"

LOOKUP = ("lookup_order", {"order_id": "A-1001"}, "call_1")
REFUND = ("issue_refund", {"order_id": "A-1001", "amount_usd": 25.0}, "call_2")


def run_example(server: RunningServer, *flags: str) -> str:
    """Runs the example against ``server``, then completes its run; returns the trace id it
    printed. The exporter reads no other ``OTEL_*`` setting of the test's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://{server.address('grpc')}"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    printed = re.fullmatch(r"sent trace ([0-9a-f]{32}) to \S+: .*\n", done.stdout)
    assert printed is not None, done.stdout + done.stderr
    assert server.settle() == 1
    return printed.group(1)


def only_trace(server: RunningServer, trace_id: str) -> dict[str, Any]:
    (trace,) = server.tooltraces()
    assert trace["trace_id"] == trace_id
    return trace


def calls(trace: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Each call's tool, arguments and call id, in the rebuilt order."""
    ordered = sorted(trace["calls"], key=lambda c: c["sequence_index"])
    assert [c["sequence_index"] for c in ordered] == list(range(len(ordered)))
    return [(c["tool_name"], c["arguments"], c["call_id"]) for c in ordered]


def findings(server: RunningServer) -> list[Finding]:
    return server.findings.findings


def test_the_run_is_rebuilt_as_the_example_sent_it(
    start_server: Callable[..., RunningServer],
) -> None:
    server = start_server(POLICY)
    trace_id = run_example(server)

    trace = only_trace(server, trace_id)
    assert calls(trace) == [LOOKUP, REFUND]
    assert [c["status"] for c in trace["calls"]] == ["ok", "ok"]
    assert all(c["span_id"] is not None and c["parallel_group"] is None for c in trace["calls"])
    assert (trace["service"], trace["agent"], trace["model"]) == (
        "refund-agent",
        "refund-bot",
        "gpt-4o",
    )
    assert re.fullmatch(r"conv-[0-9a-f-]{36}", trace["conversation_id"])
    assert trace["final_text"] == "Order A-1001 is refunded: $25.00."
    assert (trace["complete"], trace["refusal"]) == (True, False)
    assert findings(server) == []


def test_the_refund_without_its_lookup_pages(
    start_server: Callable[..., RunningServer],
) -> None:
    server = start_server(POLICY)
    trace_id = run_example(server, "--skip-lookup")

    trace = only_trace(server, trace_id)
    assert calls(trace) == [REFUND]
    (finding,) = findings(server)
    assert finding.category is Category.MISSING_VERIFICATION_STEP
    assert (finding.tool, finding.field) == ("issue_refund", "order_id")
    assert finding.agent == "refund-bot"
    assert finding.span_id == trace["calls"][0]["span_id"]
    assert finding.trace_id == trace_id


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), [("lookup_order", None, "call_1"), ("issue_refund", None, "call_2")]),
        (("--skip-lookup",), [("issue_refund", None, "call_2")]),
    ],
)
def test_without_content_calls_keep_their_ids_and_lose_their_arguments(
    start_server: Callable[..., RunningServer],
    flags: tuple[str, ...],
    expected: list[tuple[Any, ...]],
) -> None:
    """Content capture off: the calls come from the tool spans alone, with no arguments. The
    binding cannot be compared, so any successful lookup verifies the refund; a refund with
    no lookup at all still pages."""
    server = start_server(POLICY)
    trace_id = run_example(server, "--no-content", *flags)

    trace = only_trace(server, trace_id)
    assert calls(trace) == expected
    assert trace["final_text"] is None
    categories = [f.category for f in findings(server)]
    assert categories == ([Category.MISSING_VERIFICATION_STEP] if flags else [])


@pytest.mark.parametrize("shared", [False, True], ids=["own-ids", "shared-id"])
def test_each_run_is_a_conversation_of_its_own_unless_one_is_named(
    start_server: Callable[..., RunningServer], shared: bool
) -> None:
    """Doc, "One run, as toolwatch wants it": "Each run is a conversation of its own (a new
    `gen_ai.conversation.id`, from a uuid) unless `--conversation-id ID` makes it a turn of
    `ID`", and the agent span's table, why: with `verification_scope: conversation`, "runs
    that share an id verify each other's refunds".

    A run (lookup and refund), then a refund alone: with ids of their own, the refund pages
    MISSING_VERIFICATION_STEP; as turns of one conversation, the first run's lookup verifies
    it."""
    server = start_server(POLICY, policy__verification_scope="conversation")
    named = ("--conversation-id", "conv-7") if shared else ()
    first = run_example(server, *named)
    second = run_example(server, "--skip-lookup", *named)

    traces = server.tooltraces()
    assert [t["trace_id"] for t in traces] == [first, second]
    ids = [t["conversation_id"] for t in traces]
    if shared:
        assert ids == ["conv-7", "conv-7"]
    else:
        assert all(re.fullmatch(r"conv-[0-9a-f-]{36}", i) for i in ids)
        assert ids[0] != ids[1]
    categories = [(f.category, f.trace_id) for f in findings(server)]
    assert categories == ([] if shared else [(Category.MISSING_VERIFICATION_STEP, second)])


def test_a_case_id_makes_the_run_a_canary_of_its_case(
    start_server: Callable[..., RunningServer],
) -> None:
    """``--case-id`` sets ``toolwatch.case_id`` on the agent span: the run is compared with
    that golden case (examples/golden-cases.yaml: lookup_order, issue_refund, send_email),
    whose send_email it did not make."""
    server = start_server(POLICY)
    trace_id = run_example(server, "--case-id", "refund-verified-damaged-item")

    trace = only_trace(server, trace_id)
    assert trace["reference_keys"] == {"toolwatch.case_id": "refund-verified-damaged-item"}
    against_case = [f for f in findings(server) if f.reference is ReferenceKind.EXPECTED]
    assert {f.case_id for f in against_case} == {"refund-verified-damaged-item"}
    selection = [f for f in against_case if f.category is Category.TOOL_SELECTION_DRIFT]
    assert [f.tool for f in selection] == ["send_email"]


def test_the_doc_shows_the_example_as_it_is() -> None:
    """A ``python`` block of the doc is the example file, whole."""
    blocks = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), re.MULTILINE | re.DOTALL)
    assert EXAMPLE.read_text() in blocks
