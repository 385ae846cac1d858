"""Label values stay bounded: configured names, then a cap, then ``_other``."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from tests import factories
from toolwatch.model import Category, ReferenceKind, Severity, Traffic
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolTrace
from toolwatch.sinks.label_limits import OTHER, LabelLimiter, PairLimiter
from toolwatch.sinks.prometheus import PrometheusMetrics


def test_known_values_pass_even_past_the_cap() -> None:
    limit = LabelLimiter(known=["issue_refund"], cap=1)
    assert limit("first") == "first"
    assert limit("second") == OTHER
    assert limit("issue_refund") == "issue_refund"


def test_a_folded_limit_reports_a_known_names_other_spellings_as_it() -> None:
    """The policy's "Refund-Bot" is the agent refund-bot: kept past the cap, as configured."""
    limit = LabelLimiter(known=["Refund-Bot"], cap=1, folded=True)
    assert limit("weather-bot") == "weather-bot"
    assert [limit(v) for v in ("refund-bot", " REFUND-BOT ", "Refund-Bot")] == ["Refund-Bot"] * 3
    assert limit("billing-bot") == OTHER
    limit.know(["Billing-Bot"])
    assert limit("billing-bot") == "Billing-Bot"
    assert LabelLimiter(known=["Refund-Bot"], cap=0)("refund-bot") == OTHER  # not folded
    # Two configured spellings of one name: the first in sorted order, before a reload and
    # after it.
    both = LabelLimiter(known=["refund-bot", "Refund-Bot"], cap=0, folded=True)
    assert both("REFUND-BOT") == "Refund-Bot"
    both.know(["REFUND-bot"])
    assert both("Refund-BOT") == "Refund-Bot"


def test_an_admitted_spelling_of_a_name_a_reload_configures_reports_as_configured() -> None:
    """Seen before the configuration named it, ``Refund-Bot`` reports as ``refund-bot`` once
    a reload names that agent, as every other spelling of it does (and as its findings name
    it: ``names.Spellings``)."""
    limit = LabelLimiter(cap=5, folded=True)
    assert limit("Refund-Bot") == "Refund-Bot"
    limit.know(["refund-bot"])
    assert [limit(v) for v in ("Refund-Bot", "REFUND-BOT")] == ["refund-bot"] * 2


def test_admitted_values_stay_admitted() -> None:
    limit = LabelLimiter(cap=2)
    assert [limit(v) for v in ("a", "b", "c", "a", "b")] == ["a", "b", OTHER, "a", "b"]
    assert limit.admitted == frozenset({"a", "b"})


def test_none_reports_as_empty_and_does_not_use_the_cap() -> None:
    limit = LabelLimiter(cap=1)
    assert limit(None) == ""
    assert limit("") == ""
    assert limit("a") == "a"


def test_long_values_are_free_text_and_report_other() -> None:
    limit = LabelLimiter(cap=10)
    assert limit("x" * 129) == OTHER
    assert limit("x" * 128) == "x" * 128


def test_a_negative_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="cap"):
        LabelLimiter(cap=-1)


def test_pairs_of_unconfigured_names_are_capped_the_tool_reports_other() -> None:
    pair = PairLimiter(agents=["refund-bot"], tools=["issue_refund"], cap=2)
    assert pair.tool_label("a", "x") == "x"
    assert pair.tool_label("a", "y") == "y"
    assert pair.tool_label("b", "x") == OTHER
    assert pair.tool_label("a", "x") == "x"  # admitted pairs stay admitted
    assert pair.tool_label("a", "y") == "y"


def test_pairs_with_a_configured_or_absent_side_do_not_use_the_cap() -> None:
    pair = PairLimiter(agents=["refund-bot"], tools=["issue_refund"], cap=0)
    assert pair.tool_label("b", "issue_refund") == "issue_refund"
    assert pair.tool_label("refund-bot", "z") == "z"
    assert pair.tool_label("", "z") == "z"
    assert pair.tool_label(OTHER, "z") == "z"
    assert pair.tool_label("b", "") == ""
    assert pair.tool_label("b", "z") == OTHER


def test_a_negative_pair_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="pair cap"):
        PairLimiter(cap=-1)


def _trace(agent: str, tool: str) -> ToolTrace:
    return factories.tool_trace(
        trace_id="0" * 31 + "1",
        agent=agent,
        calls=(factories.tool_call(tool_name=tool),),
        span_count=1,
    )


def _finding(agent: str, tool: str, evaluator: str = "selection") -> Finding:
    return factories.finding(
        category=Category.TOOL_SELECTION_DRIFT,
        severity=Severity.LOW,
        evaluator=evaluator,
        reference=ReferenceKind.POLICY,
        score=0.5,
        explanation="a finding",
        trace_id="0" * 31 + "1",
        tool=tool,
        agent=agent,
    )


def _label_values(registry: CollectorRegistry, metric: str, label: str) -> set[str]:
    return {
        sample.labels[label]
        for family in registry.collect()
        for sample in family.samples
        if sample.name == metric
    }


def test_a_flood_of_names_keeps_every_label_bounded() -> None:
    registry = CollectorRegistry()
    known_agents, known_tools = ["refund-bot", "triage"], ["issue_refund", "lookup_order"]
    cap = 100
    metrics = PrometheusMetrics(
        registry, agents=known_agents, tools=known_tools, label_value_cap=cap
    )
    for i in range(10_000):
        metrics.tool_trace(_trace(f"agent-{i}", f"tool-{i}"), "none", traffic=Traffic.LIVE)
        metrics.finding(
            _finding(f"agent-{i}", f"tool-{i}", f"evaluator-{i}"), None, traffic=Traffic.LIVE
        )
    metrics.tool_trace(_trace("refund-bot", "issue_refund"), "none", traffic=Traffic.LIVE)

    calls = "toolwatch_tool_calls_total"
    tools = _label_values(registry, calls, "tool")
    agents = _label_values(registry, calls, "agent")
    assert len(tools) <= cap + len(known_tools) + 1
    assert len(agents) <= cap + len(known_agents) + 1
    assert {OTHER, "issue_refund", "tool-0", "tool-99"} <= tools
    assert "tool-100" not in tools
    assert {OTHER, "refund-bot"} <= agents
    regressions = "toolwatch_regressions_total"
    assert len(_label_values(registry, regressions, "evaluator")) == cap + 1
    assert len(_label_values(registry, regressions, "tool")) <= cap + len(known_tools) + 1
    other = {"agent": OTHER, "tool": OTHER, "status": "ok", "traffic": "live"}
    assert registry.get_sample_value(calls, other) == 10_000 - cap


def test_values_reported_as_other_are_counted_by_label_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A page whose agent reads _other names no one: the cap filling must show somewhere."""
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(
        registry, agents=["refund-bot"], label_value_cap=2, agent_tool_pair_cap=1
    )
    other = "toolwatch_label_values_other_total"
    assert [registry.get_sample_value(other, {"label": x}) for x in ("agent", "tool", "pair")] == [
        0,
        0,
        0,
    ]
    with caplog.at_level(logging.WARNING, logger="toolwatch.sinks.prometheus"):
        for i in range(5):
            metrics.tool_trace(_trace(f"agent-{i}", "t"), "none", traffic=Traffic.LIVE)
        metrics.tool_trace(_trace("refund-bot", "x" * 129), "none", traffic=Traffic.LIVE)

    # agent-2, -3, -4 past the cap of 2; the tool's 129 characters are free text; the pair
    # (agent-1, t) is the second of two unconfigured names, past the pair cap of 1.
    counts = [registry.get_sample_value(other, {"label": x}) for x in ("agent", "tool", "pair")]
    assert counts == [3, 1, 1]
    said = [r.getMessage().split(":")[0] for r in caplog.records]
    assert said == ["(agent, tool) pair label", "agent label", "tool label"]
    assert "metrics.agents" in caplog.records[1].getMessage()


def test_churning_agent_and_tool_names_grow_the_series_linearly_not_as_a_product() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(
        registry, tools=["issue_refund"], label_value_cap=100, agent_tool_pair_cap=50
    )
    for a in range(100):
        for t in range(100):
            metrics.tool_trace(_trace(f"agent-{a}", f"tool-{t}"), "none", traffic=Traffic.LIVE)
    metrics.tool_trace(_trace("agent-7", "issue_refund"), "none", traffic=Traffic.LIVE)

    calls = "toolwatch_tool_calls_total"
    series = {
        (s.labels["agent"], s.labels["tool"]): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == calls
    }
    # agent-0 with tool-0..49 (the 50 admitted pairs), then every agent with _other,
    # and the configured tool whatever the agent.
    admitted = {("agent-0", f"tool-{t}") for t in range(50)}
    others = {(f"agent-{a}", OTHER) for a in range(100)}
    assert set(series) == admitted | others | {("agent-7", "issue_refund")}
    assert series[("agent-0", OTHER)] == 50
    assert series[("agent-1", OTHER)] == 100
    assert sum(series.values()) == 100 * 100 + 1  # every call still counted


def test_findings_share_the_pair_cap() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, label_value_cap=100, agent_tool_pair_cap=1)
    for agent, tool in (("a", "x"), ("a", "y"), ("b", "x")):
        metrics.finding(_finding(agent, tool), None, traffic=Traffic.LIVE)
    tools = {
        (s.labels["agent"], s.labels["tool"])
        for family in registry.collect()
        for s in family.samples
        if s.name == "toolwatch_regressions_total"
    }
    assert tools == {("a", "x"), ("a", OTHER), ("b", OTHER)}


def test_a_value_no_exposition_can_write_reports_as_other() -> None:
    """A lone surrogate cannot be written as UTF-8: admitted, it failed every scrape."""
    limit = LabelLimiter(cap=5)
    assert limit("web\ud800search") == OTHER
    assert (limit.others, limit("websearch")) == (1, "websearch")
