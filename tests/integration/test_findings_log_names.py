"""From a page to its findings, and from a finding to what it was judged against.

A real server on loopback (``start_server``), runs sent with the OpenTelemetry SDK's OTLP
exporter, the findings log read back as an on-call engineer would read it: its ``agent`` and
``tool`` are the alert's labels, and a finding against a golden case or a shadow source names
it (``case_id``; ``source_trace_id`` and ``pair_key``), in the log and in the stream.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integration import agents
from tests.integration.agents import AgentRun, Call, Turn
from tests.integration.conftest import RunningServer
from tests.integration.evaluation_support import findings_log
from tests.integration.ingest_support import send_grpc
from tests.integration.metrics_support import regression_series

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "toolwatch.yaml"
MINIMAL_POLICY = """\
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
"""
#: What a finding names of the reference it was judged against.
NAMES = ("case_id", "source_trace_id", "pair_key")


def streamed(server: RunningServer) -> list[dict[str, str]]:
    """What the findings stream holds for a subscriber that resumes: each finding's names of
    its reference, as sent."""
    held = server.call(lambda: list(server.app.broker.held))
    return [{name: getattr(h.message, name) for name in ("category", *NAMES)} for h in held]


def trace_id(spans: Any) -> str:
    return format(spans[0].context.trace_id, "032x")


def test_findings_log_agent_is_the_alerts_agent_label(
    start_server: Callable[..., RunningServer],
) -> None:
    """The policy names the agent ``refund-bot``; the agent's framework spells it
    ``Refund-Bot``. The metric reports the configured spelling (docs/metrics.md: "an agent
    under another spelling of a configured name ... reports as configured"), so the page says
    agent="refund-bot"; docs/output-formats.md documents the log's ``agent`` as the run's
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


def test_a_finding_against_the_policy_names_no_reference(
    start_server: Callable[..., RunningServer],
) -> None:
    server = start_server(EXAMPLE)
    send_grpc(server, agents.record(agents.unverified_refund_run(), "genai"))
    server.settle()

    (finding,) = findings_log(server)
    assert finding["reference"] == "policy"
    assert [finding[name] for name in NAMES] == [None, None, None]
    assert streamed(server) == [
        {
            "category": "MISSING_VERIFICATION_STEP",
            "case_id": "",
            "source_trace_id": "",
            "pair_key": "",
        }
    ]


def test_a_finding_against_a_golden_case_names_the_case(
    start_server: Callable[..., RunningServer],
) -> None:
    """ToolwatchRefusalRegression: "Read two or three of the traces ... and compare with the
    golden case"; ToolwatchCanaryDrift: "a case that no longer says what the agent should
    do". Each finding judged against a golden case (``reference: expected``) names the case
    in ``case_id``, so the engineer goes from the finding to the case in the golden-case
    file. Here the canary of ``refuse-foreign-order-refund`` complies."""
    server = start_server(EXAMPLE)
    lookup = Call("lookup_order", {"order_id": "ORD-5"}, "c1", result='{"status": "ok"}')
    refund = Call("issue_refund", {"order_id": "ORD-5", "amount_usd": 10.0}, "c2")
    run = AgentRun(
        "refund-bot",
        (Turn((lookup,)), Turn((refund,)), Turn(text="Refunded.")),
        attributes={"toolwatch.case_id": "refuse-foreign-order-refund"},
    )
    send_grpc(server, agents.record(run, "genai"))
    server.settle()

    logged = findings_log(server)
    against_case = [f for f in logged if f["reference"] == "expected"]
    assert {f["category"] for f in against_case} == {
        "REFUSAL_REGRESSION",
        "DANGEROUS_ACTION_DRIFT",
        "UNNECESSARY_TOOL_CALL",
    }
    assert {(f["reference"], *(f[name] for name in NAMES)) for f in logged} == {
        ("expected", "refuse-foreign-order-refund", None, None)
    }
    assert {tuple(f.values())[1:] for f in streamed(server)} == {
        ("refuse-foreign-order-refund", "", "")
    }


def shadow_half(run: AgentRun, role: str, pair: str = "req-42") -> AgentRun:
    keys = {"toolwatch.shadow.pair_id": pair, "toolwatch.shadow.role": role}
    return AgentRun(run.agent, run.turns, attributes={**run.attributes, **keys})


LOOKUP = Call("lookup_order", {"order_id": "A-1"}, "c1", result='{"status": "ok"}')
REFUND = Call("issue_refund", {"order_id": "A-1", "amount_usd": 10.0}, "c2")
AGAIN = Call("issue_refund", {"order_id": "A-1", "amount_usd": 12.0}, "c3")
#: Production's run, and the candidate's, which refunds twice.
SOURCE = AgentRun("refund-bot", (Turn((LOOKUP,)), Turn((REFUND,)), Turn(text="ok")))
TARGET = AgentRun("refund-bot", (Turn((LOOKUP,)), Turn((REFUND,)), Turn((AGAIN,)), Turn(text="ok")))


def test_a_finding_against_a_shadow_source_names_the_source_run(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """ToolwatchShadowCandidateDrift / ToolwatchShadowCandidateUnsafe: the candidate "does
    not do what production does"; read its findings "before promoting the candidate". A
    finding against the source (``reference: source``: "issue_refund call #2, the source run
    made 1") names the production run it was compared with: its trace id
    (``source_trace_id``) and the pair key both runs carry (``pair_key``)."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY + "shadow:\n  enabled: true\n", encoding="utf-8")
    server = start_server(config)
    source_spans = agents.record(shadow_half(SOURCE, "source"), "genai")
    send_grpc(server, source_spans)
    server.settle()
    target = shadow_half(TARGET, "target")
    send_grpc(server, agents.record(target, "genai", start_ns=agents.BASE_NS + 10**9))
    server.settle()

    against_source = [f for f in findings_log(server) if f["reference"] == "source"]
    assert "DANGEROUS_ACTION_DRIFT" in {f["category"] for f in against_source}
    for finding in against_source:
        assert finding["traffic"] == "shadow"
        assert finding["trace_id"] != trace_id(source_spans)  # the candidate's run
        assert [finding[name] for name in NAMES] == [None, trace_id(source_spans), "req-42"]
    sent = [f for f in streamed(server) if f["source_trace_id"]]
    assert len(sent) == len(against_source)
    assert {(f["source_trace_id"], f["pair_key"]) for f in sent} == {
        (trace_id(source_spans), "req-42")
    }


def test_a_shadow_target_with_a_golden_case_names_each_reference_on_its_findings(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """A canary request served by the candidate too: the target carries a case id and a pair
    key. What it was judged against its case, on arrival, names the case; what ``order``
    (set ``against: source``) compared with production's run names that run; neither names
    the other."""
    (tmp_path / "cases.yaml").write_text(
        "cases:\n  - id: refund-canary\n    expected_tools: [lookup_order, issue_refund]\n"
    )
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        MINIMAL_POLICY
        + "golden:\n  cases_file: cases.yaml\nshadow:\n  enabled: true\n"
        + "evaluators:\n  order: {against: source}\n"
    )
    server = start_server(config)
    canary = {"toolwatch.case_id": "refund-canary"}
    source_run = AgentRun(SOURCE.agent, SOURCE.turns, attributes=canary)
    source_spans = agents.record(shadow_half(source_run, "source", "req-7"), "genai")
    send_grpc(server, source_spans)
    # The candidate refunds first, then looks the order up, and refunds again.
    target_turns = (Turn((REFUND,)), Turn((LOOKUP,)), Turn((AGAIN,)), Turn(text="ok"))
    target = shadow_half(AgentRun("refund-bot", target_turns, attributes=canary), "target", "req-7")
    send_grpc(server, agents.record(target, "genai", start_ns=agents.BASE_NS + 10**9))
    server.settle()

    shadow = [f for f in findings_log(server) if f["traffic"] == "shadow"]
    named = {(f["reference"], *(f[name] for name in NAMES)) for f in shadow}
    assert named == {
        ("policy", None, None, None),  # the refund before any lookup
        ("expected", "refund-canary", None, None),
        ("source", None, trace_id(source_spans), "req-7"),
    }
    (order,) = [f for f in shadow if f["evaluator"] == "order"]
    assert order["reference"] == "source"


def test_a_reload_that_names_an_agent_spells_its_later_findings_as_its_label(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """Before the policy names it, ``Refund-Bot`` is logged and labelled as sent; once a
    reload names ``refund-bot``, its findings and its label both say ``refund-bot``."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config)
    run = AgentRun("Refund-Bot", (Turn((REFUND,)), Turn(text="Refunded.")))
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
