"""What the alerts' annotations tell the on-call engineer, against what a real server writes
(a server on loopback, the findings log read back).

ToolwatchToolCallDriftBurst says per category what the agent does differently. A golden case of
mode ``expected`` (the first case of examples/golden-cases.yaml) raises TOOL_SELECTION_DRIFT
for an agent that calls exactly the expected tools in another order (``tool_selection`` scores
LCS/len in that mode): the annotation must not send the engineer looking for a wrong tool.
The alerts on one call are labelled with the run's agent; the call may be another agent's of
the run, named in ``details.call_agent``, and the annotations must say so."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.integration import agents
from tests.integration.agents import AgentRun, Call, Turn
from tests.integration.conftest import RunningServer
from tests.integration.evaluation_support import email_first_canary_run
from tests.integration.ingest_support import send_grpc

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "toolwatch.yaml"
RULES = ROOT / "deploy" / "prometheus" / "toolwatch-rules.yaml"


def _description(alert: str) -> str:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    (rule,) = [r for g in groups for r in g["rules"] if r.get("alert") == alert]
    return str(rule["annotations"]["description"])


def _selection_branch(description: str) -> str:
    """What the description says for TOOL_SELECTION_DRIFT: its if/else chain's last branch."""
    match = re.search(r"\{\{ else \}\}([^{]*)\{\{ end \}\} its golden cases", description)
    assert match is not None, description
    return " ".join(match.group(1).split())


def test_selection_drift_burst_does_not_say_other_tools_for_an_order_only_change(
    start_server: Callable[..., RunningServer],
) -> None:
    server = start_server(EXAMPLE)
    send_grpc(server, agents.record(email_first_canary_run(), "genai"))
    server.settle()
    log = Path(server.app.config.output.findings or "").read_text().splitlines()
    order_only = [
        f
        for f in map(json.loads, log)
        if f["category"] == "TOOL_SELECTION_DRIFT"
        and (f["details"]["missed"], f["details"]["extra"]) == ([], [])
    ]
    if not order_only:  # fixed in the evaluator: an order-only change is no selection drift
        return
    # The same tools, none missed, none extra: only their order differs.
    said = _selection_branch(_description("ToolwatchToolCallDriftBurst"))
    assert "order" in said, said


#: Alerts on a call, labelled with the run's agent: ToolwatchShadowCandidateUnsafe, a ticket on a
#: candidate's run, reads the same findings as the first two.
ALERTS_ON_A_CALL = (
    "ToolwatchDangerousActionDrift",
    "ToolwatchMissingVerificationStep",
    "ToolwatchToolNotAllowed",
    "ToolwatchShadowCandidateUnsafe",
)


def test_pages_on_a_call_say_a_sub_agent_may_have_made_it(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """support-bot asks billing-bot (an agent used as a tool), and billing-bot refunds, a
    tool outside its own allowed_tools. The page is labelled agent="support-bot" (the run's
    agent, by design: docs/output-formats.md); support-bot never called issue_refund, so the
    annotations point to the caller, ``details.call_agent``, or the engineer would take the
    tool from the wrong agent."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        "policy:\n"
        "  dangerous_tools: [issue_refund]\n"
        "  verification_tools: [lookup_order]\n"
        "  allowed_tools:\n"
        "    support-bot: [ask_billing]\n"
        "    billing-bot: [lookup_order]\n",
        encoding="utf-8",
    )
    server = start_server(config)
    lookup = Call("lookup_order", {"order_id": "B-7"}, "n1", result='{"status": "ok"}')
    refund = Call("issue_refund", {"order_id": "B-7", "amount_usd": 5.0}, "n2")
    billing = AgentRun("billing-bot", (Turn((lookup,)), Turn((refund,)), Turn(text="Done.")))
    ask = Call("ask_billing", {"question": "refund B-7"}, "o1", nested=billing)
    run = AgentRun("support-bot", (Turn((ask,)), Turn(text="Refunded.")))
    send_grpc(server, agents.record(run, "genai"))
    server.settle()
    log = Path(server.app.config.output.findings or "").read_text().splitlines()
    (finding,) = [f for f in map(json.loads, log) if f["category"] == "DANGEROUS_ACTION_DRIFT"]
    assert finding["agent"] == "support-bot"  # the alert's agent label
    assert finding["details"]["call_agent"] == "billing-bot"  # who called it

    silent = [a for a in ALERTS_ON_A_CALL if "call_agent" not in _description(a)]
    assert silent == []
