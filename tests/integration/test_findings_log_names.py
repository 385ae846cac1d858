"""From a page to its findings, and from a finding to what it was judged against.

A real server on loopback (``start_server``), runs sent with the OpenTelemetry SDK's OTLP
exporter, the findings log read back as an on-call engineer would read it: its ``agent`` and
``tool`` are the alert's labels.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integration import agents
from tests.integration.agents import AgentRun, Call, Turn
from tests.integration.conftest import RunningServer
from tests.integration.test_ingest_to_tooltrace import send_grpc

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "toolwatch.yaml"
MINIMAL_POLICY = """\
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
"""


def findings_log(server: RunningServer) -> list[dict[str, Any]]:
    path = Path(server.app.config.output.findings or "")
    return [json.loads(line) for line in path.read_text().splitlines()]


def regression_series(server: RunningServer) -> list[dict[str, str]]:
    return [
        dict(sample.labels)
        for family in server.registry.collect()
        if family.name == "toolwatch_regressions"
        for sample in family.samples
        if sample.name == "toolwatch_regressions_total"
    ]


def test_findings_log_agent_is_the_alerts_agent_label(
    start_server: Callable[..., RunningServer],
) -> None:
    """The policy names the agent ``refund-bot``; the agent's framework spells it
    ``Refund-Bot``. The metric reports the configured spelling (README, Metrics: "an agent
    under another spelling of a configured name ... reports as configured"), so the page says
    agent="refund-bot"; README, Output formats, documents the log's ``agent`` as the run's
    agent "as the ``agent`` label of toolwatch_regressions_total": an engineer selecting the
    page's agent in the log (``jq 'select(.agent == "refund-bot")'``) finds the finding. The
    name as sent stays in the ToolTrace dump."""
    server = start_server(EXAMPLE)
    refund = Call("issue_refund", {"order_id": "A-1001", "amount_usd": 25.0}, "call_2")
    run = AgentRun("Refund-Bot", (Turn((refund,)), Turn(text="Refunded.")))
    send_grpc(server, agents.record(run, "genai"))
    server.settle()

    (finding,) = findings_log(server)
    (labels,) = regression_series(server)
    assert finding["category"] == labels["category"] == "MISSING_VERIFICATION_STEP"
    assert labels["agent"] == "refund-bot"
    assert finding["agent"] == labels["agent"]
    (streamed_finding,) = server.call(lambda: list(server.app.broker.held))
    assert streamed_finding.message.agent == "refund-bot"
    (dumped,) = server.tooltraces()
    assert dumped["agent"] == "Refund-Bot"


def test_an_agent_the_configuration_does_not_name_is_logged_as_sent(
    start_server: Callable[..., RunningServer],
) -> None:
    server = start_server(EXAMPLE)
    refund = Call("issue_refund", {"order_id": "A-1001", "amount_usd": 25.0}, "call_2")
    run = AgentRun("Billing-Bot", (Turn((refund,)), Turn(text="Refunded.")))
    send_grpc(server, agents.record(run, "genai"))
    server.settle()

    (finding,) = findings_log(server)
    (labels,) = regression_series(server)
    assert finding["agent"] == labels["agent"] == "Billing-Bot"


def test_findings_log_tool_is_the_alerts_tool_label(
    start_server: Callable[..., RunningServer],
) -> None:
    """The span names the tool ``Issue_Refund``: the label and the log both say the
    normalized name the policy uses."""
    server = start_server(EXAMPLE)
    refund = Call("Issue_Refund", {"order_id": "A-1001", "amount_usd": 25.0}, "call_2")
    run = AgentRun("refund-bot", (Turn((refund,)), Turn(text="Refunded.")))
    send_grpc(server, agents.record(run, "genai"))
    server.settle()

    (finding,) = findings_log(server)
    (labels,) = regression_series(server)
    assert finding["tool"] == labels["tool"] == "issue_refund"


def test_a_reload_that_names_an_agent_spells_its_later_findings_as_its_label(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """Before the policy names it, ``Refund-Bot`` is logged and labelled as sent; once a
    reload names ``refund-bot``, its findings and its label both say ``refund-bot``."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    run = AgentRun("Refund-Bot", (Turn((agents.REFUND,)), Turn(text="Refunded.")))
    send_grpc(server, agents.record(run, "genai"))
    server.settle()
    allowed = "  allowed_tools:\n    refund-bot: [lookup_order, issue_refund]\n"
    config.write_text(MINIMAL_POLICY + allowed)
    assert server.reload()
    send_grpc(server, agents.record(run, "genai", start_ns=agents.BASE_NS + 10**9))
    server.settle()

    assert [f["agent"] for f in findings_log(server)] == ["Refund-Bot", "refund-bot"]
    assert sorted(labels["agent"] for labels in regression_series(server)) == [
        "Refund-Bot",
        "refund-bot",
    ]
