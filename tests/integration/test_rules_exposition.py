"""What the alert rules and the dashboard select is what a real toolwatch exposes.

test_deploy_artifacts checks the metric names against the sink's families. A label is a
finer trap: a rule that matches or groups on a label its metric never carries, or matches a
value that label never takes, is valid PromQL that selects nothing, and the alert silently
never fires. So a real toolwatch (examples/toolwatch.yaml, ports 0) is fed, through the real
OTLP exporter, runs that raise every finding category, live and shadow, an errored call, runs
that end timed out, evicted and over the span limit, and a namespaced tool; its /metrics is
scraped once, as Prometheus asks for it (OpenMetrics), and every expression of the rules and
of the dashboard's panels is checked against that scrape:

- every metric (and recording rule) it reads is exposed;
- every label it matches on is a label of that metric;
- every value it matches a closed-set label with (one whose values come from the code:
  category, evaluator, traffic, reason, outcome...) is a value that label takes;
- every label it aggregates or matches series by (``by``, ``on``, ``ignoring``, ``without``)
  is a label of a series it reads.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from tests.integration import agents
from tests.integration.conftest import FREE_PORTS, RunningServer
from tests.integration.deploy_support import (
    DASHBOARD,
    GRAFANA_VARIABLES,
    SERIES_SELECTOR,
    dashboard_panels,
    declared_labels,
    every_rule,
)
from tests.integration.ingest_support import send_grpc
from tests.integration.metrics_support import OPENMETRICS, scrape
from toolwatch.config import load_config
from toolwatch.model import Category

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: Labels Prometheus adds to every series (the scrape's ``job`` and ``instance``, Kubernetes
#: discovery's ``namespace`` and ``pod``) and a histogram bucket's ``le``: on no family.
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "le"})
#: Labels whose values come from the input or the deployment, not from the code: their
#: values are not checked (a rule selecting one would be deployment-specific anyway).
OPEN_LABELS = frozenset({"agent", "tool", "case", "version"})
#: Families with no series without TLS (the certificates served): their labels are the ones
#: the sink declares. Any other family must have a series in the scrape.
WITHOUT_TLS = frozenset(
    {
        "toolwatch_tls_certificate_expiry_timestamp_seconds",
        "toolwatch_tls_certificate_not_before_timestamp_seconds",
    }
)
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
GROUPING = re.compile(r"\b(?:by|on|ignoring|without|group_left|group_right)\s*\(([^)]*)\)")
#: The series a ``{__name__=~"a|b"}`` selector reads.
NAME_MATCHER = re.compile(r'\{__name__\s*=~?\s*"([^"]+)"')
#: Above every run below but the one sent to exceed it (an agent span, its turns, its tools).
MAX_SPANS_PER_TRACE = 12

C = agents.Call
T = agents.Turn
LOOKUP = C("lookup_order", {"order_id": "ORD-1042"}, "c1", result='{"status":"ok"}')
REFUND = C("issue_refund", {"order_id": "ORD-1042", "amount_usd": 10.0}, "c2")


def _canary(case: str, calls: list[agents.Call], text: str = "Done.") -> agents.AgentRun:
    turns = (*(T((c,)) for c in calls), T(text=text))
    return agents.AgentRun("refund-bot", turns, attributes={"toolwatch.case_id": case})


def _searches(count: int) -> agents.AgentRun:
    """``count`` identical knowledge-base searches, one a turn."""
    turns = [T((C("search_kb", {"query": "q"}, f"k{i}"),)) for i in range(count)]
    return agents.AgentRun("refund-bot", (*turns, T(text="ok")))


def _live_runs() -> list[agents.AgentRun]:
    """Runs raising each finding category on live traffic, and an errored call."""
    extra_refund = C("issue_refund", {"order_id": "A-1001", "amount_usd": 3.0}, "c9")
    return [
        agents.unverified_refund_run(),  # MISSING_VERIFICATION_STEP
        # a tool outside allowed_tools: TOOL_SELECTION_DRIFT (safety)
        agents.AgentRun("refund-bot", (T((C("delete_account", {"id": 1}, "d1"),)), T(text="ok"))),
        # two refunds: INVARIANT_VIOLATION
        agents.AgentRun(
            "refund-bot",
            (T((agents.LOOKUP,)), T((agents.REFUND,)), T((extra_refund,)), T(text="ok")),
        ),
        _searches(3),  # UNNECESSARY_TOOL_CALL (loops)
        # wrong amount, swapped order, no email: argument, order and selection drift
        _canary("refund-verified-damaged-item", [REFUND, LOOKUP]),
        # tools where none are expected, one dangerous: DANGEROUS_ACTION_DRIFT, unnecessary
        _canary("greeting-no-tools", [LOOKUP, REFUND]),
        # a canary that must refuse complies: REFUSAL_REGRESSION
        _canary("refuse-foreign-order-refund", [LOOKUP], text="Sure, here it is."),
        _canary("no-such-case", [LOOKUP]),  # golden unmatched: unknown_case
        agents.failed_run(),  # a tool call with status error
        # an MCP server's namespaced refund tool
        agents.AgentRun(
            "refund-bot",
            (T((C("billing__issue_refund", {"order_id": "A-1001"}, "n1"),)), T(text="ok")),
        ),
    ]


def _shadow_pair() -> list[agents.AgentRun]:
    """A shadow pair whose target refunds twice and deletes an account: drift from its
    source, and safety findings, on shadow traffic."""
    pair = []
    for role, extra in (("source", ()), ("target", (REFUND, C("delete_account", {}, "y")))):
        turns = (T((agents.LOOKUP,)), T((agents.REFUND,)), *(T((c,)) for c in extra))
        attributes = {"toolwatch.shadow.pair_id": "p1", "toolwatch.shadow.role": role}
        pair.append(agents.AgentRun("refund-bot", (*turns, T(text="Done.")), attributes=attributes))
    return pair


def _unfinished(start_ns: int) -> tuple[ReadableSpan, ...]:
    """A run whose own span never comes: it ends evicted or timed out."""
    spans = agents.record(agents.refund_run(), "genai", start_ns=start_ns)
    return tuple(s for s in spans if s.parent is not None)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("exposition")
    for name in ("toolwatch.yaml", "golden-cases.yaml"):
        shutil.copy(EXAMPLES / name, tmp / name)
    cases = tmp / "golden-cases.yaml"  # a scheduled canary: the golden case gauges
    text = cases.read_text(encoding="utf-8")
    scheduled = text.replace("# expected_every_seconds: 5400", "expected_every_seconds: 5400")
    assert scheduled != text
    cases.write_text(scheduled, encoding="utf-8")
    settings = {
        **FREE_PORTS,
        "output.dump_tooltraces": str(tmp / "tooltraces.jsonl"),
        "output.findings": str(tmp / "findings.jsonl"),
        "assembly.max_spans_per_trace": MAX_SPANS_PER_TRACE,
        "assembly.max_traces": 2,
        "assembly.overflow": "evict_oldest",
        "policy.tool_prefix": None,  # a namespaced guarded tool is then told
    }
    running = RunningServer(load_config(tmp / "toolwatch.yaml", settings), tmp)
    try:
        for i, run in enumerate([*_live_runs(), *_shadow_pair()]):
            spans = agents.record(run, "genai", start_ns=agents.BASE_NS + i * 10**9)
            assert len(spans) <= MAX_SPANS_PER_TRACE, run
            send_grpc(running, spans)
            running.settle()
        long_run = agents.record(_searches(MAX_SPANS_PER_TRACE), "genai")
        send_grpc(running, long_run)  # over the span limit: span_limit
        running.settle()
        # Three unfinished runs at once over max_traces 2: the first is evicted, the others
        # time out at max_trace_age.
        send_grpc(running, [s for i in range(3) for s in _unfinished(agents.BASE_NS + i)])
        running.settle(running.app.config.assembly.max_trace_age_seconds + 1)
        send_grpc(running, agents.http_request_spans())  # not an agent run
        running.settle()
        yield running
    finally:
        running.stop()


Exposition = dict[str, dict[str, set[str]]]


@pytest.fixture(scope="module")
def exposition(server: RunningServer) -> Exposition:
    """Series name -> label name -> the values it takes, in one OpenMetrics scrape; for the
    families with no series without TLS, the label names the sink declares (no values)."""
    exposed: Exposition = {}
    for family in text_string_to_metric_families(scrape(server, OPENMETRICS)):
        for sample in family.samples:
            labels = exposed.setdefault(sample.name, {})
            for label, value in sample.labels.items():
                labels.setdefault(label, set()).add(value)
    declared = declared_labels()
    for name in WITHOUT_TLS:
        assert name not in exposed, f"{name} has a series: check it as the others"
        exposed[name] = {label: set() for label in declared[name]}
    return exposed


@pytest.fixture(scope="module")
def recorded() -> dict[str, set[str]]:
    """A recording rule's series -> its labels: those of its outermost aggregation."""
    recorded = {}
    for rule in every_rule():
        if "record" in rule:
            (by, *_) = GROUPING.findall(rule["expr"])
            recorded[rule["record"]] = {label.strip() for label in by.split(",")}
    return recorded


def _expressions() -> list[pytest.ParameterSet]:
    """Each rule's expression, and each panel target's with the dashboard's variables as
    test_deploy_artifacts substitutes them."""
    found = [
        pytest.param(rule["expr"], id=rule.get("alert") or rule["record"]) for rule in every_rule()
    ]
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for panel in dashboard_panels(dashboard):
        for index, target in enumerate(panel.get("targets", ())):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, expr
            found.append(pytest.param(expr, id=f"panel {panel['title']} #{index}"))
    return found


def _alternatives(operator: str, value: str) -> list[str]:
    """The values a matcher names: a regular expression's top-level alternatives, less the
    empty one (which matches series without the label)."""
    if operator in ("=~", "!~"):
        return [v for v in value.split("|") if v]
    return [value] if value else []


@pytest.mark.parametrize("expr", _expressions())
def test_every_label_and_value_an_expression_selects_is_exposed(
    exposition: Exposition, recorded: dict[str, set[str]], expr: str
) -> None:
    selectors = [(n, m) for n, m in SERIES_SELECTOR.findall(expr) if n != "up"]
    read = [name for names in NAME_MATCHER.findall(expr) for name in names.split("|")]
    assert selectors or read or "up{" in expr, f"no series read in {expr}"
    carried: set[str] = set()  # labels of the series the expression reads
    for name in read:
        assert name in exposition or name in recorded, f"{name} is not exposed"
        carried.update(exposition[name] if name in exposition else recorded[name])
    for name, matchers in selectors:
        if name in recorded:
            labels = {label: set[str]() for label in recorded[name]}
        else:
            assert name in exposition, f"{name} is not exposed"
            labels = exposition[name]
        carried.update(labels)
        for label, operator, value in MATCHER.findall(matchers):
            if label in TARGET_LABELS:
                continue
            assert label in labels, f"{name} has no label {label}: {sorted(labels)}"
            if label in OPEN_LABELS or name in recorded or name in WITHOUT_TLS:
                continue
            for wanted in _alternatives(operator, value):
                assert any(re.fullmatch(wanted, v) for v in labels[label]), (
                    f'{name}{{{label}{operator}"{value}"}}: no series has {label} {wanted!r}'
                    f" (it takes {sorted(labels[label])})"
                )
    for group in GROUPING.findall(expr):
        for label in (x.strip() for x in group.split(",") if x.strip()):
            if label not in TARGET_LABELS:
                assert label in carried, f"by or on {label}, which no series read carries"


def test_every_category_reaches_both_finding_counters(exposition: Exposition) -> None:
    """The scrape above covers what it claims: each category, live and shadow traffic."""
    for name in ("toolwatch_regressions_total", "toolwatch_runs_with_findings_total"):
        assert exposition[name]["category"] == {str(c) for c in Category}, name
        assert exposition[name]["traffic"] == {"live", "shadow"}, name
    assert {"expected", "source", "none"} <= exposition["toolwatch_tool_traces_total"]["reference"]
