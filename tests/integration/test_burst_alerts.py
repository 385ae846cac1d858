"""The burst alerts count runs, not findings: one run that strays is no burst.

``tool_arguments`` raises a finding per drifting call and ``loops`` one per repeated call, all
on one (agent, tool, category) series of ``toolwatch_regressions_total``: ToolwatchToolCall-
DriftBurst and ...LoopBurst, dividing those findings by runs, read one run that drifted on
three calls among 25 as 12% of the runs and opened a ticket. Each test sends agent runs
through the real engine (decoding, assembly, the evaluation pipeline, the Prometheus metrics),
gives the series it exposed to the shipped rules beside 25 runs of the agent in 10 minutes,
and runs ``promtool test rules``: one such run is no burst; three are (12% of the runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from prometheus_client import CollectorRegistry

from tests.integration import agents
from tests.integration.prometheus_server import promtool_expr_case, requires_promtool
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.engine import DiscardToolTraces, Engine, EngineParts
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode_requests import decode_request
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.model import ManualClock
from toolwatch.model_evaluation import ExpectedCall, GoldenCase
from toolwatch.references.golden import GoldenCaseSet
from toolwatch.references.settings import DEFAULT_CASE_ID_ATTRIBUTE
from toolwatch.sinks.findings import InMemoryFindingSink
from toolwatch.sinks.prometheus import PrometheusMetrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "toolwatch-rules.yaml"
SCRAPE = {"job": "toolwatch", "instance": "10.0.0.1:9464"}
#: The families the regression alerts read, with their ``_created`` series.
FAMILIES = ("toolwatch_regressions", "toolwatch_runs_with_findings")
#: The minute of the promtool timeline at which the runs' counts are first scraped.
SCRAPED_AT = 15

pytestmark = [pytest.mark.prometheus, requires_promtool]

CASE = GoldenCase(
    "kb-lookups",
    expected_tools=tuple(
        ExpectedCall("search_kb", {"q": q}) for q in ("refund policy", "shipping", "returns")
    ),
)


def _search(q: str, index: int) -> agents.Call:
    return agents.Call("search_kb", {"q": q}, f"call_{index}", result='{"hits": 1}')


def _drifting_run() -> agents.AgentRun:
    """A canary of CASE that searches three times, each time for something else."""
    turns = tuple(agents.Turn((_search(q, i),)) for i, q in enumerate(("x", "y", "z")))
    return agents.AgentRun(
        "support",
        (*turns, agents.Turn(text="Here you go.")),
        attributes={DEFAULT_CASE_ID_ATTRIBUTE: "kb-lookups"},
    )


def _looping_run() -> agents.AgentRun:
    """Four searches, each made three times: loops flags each repeated one."""
    queries = [q for q in ("a", "b", "c", "d") for _ in range(3)]
    turns = tuple(agents.Turn((_search(q, i),)) for i, q in enumerate(queries))
    return agents.AgentRun("support", (*turns, agents.Turn(text="Done.")))


def _exposed(run: agents.AgentRun, runs: int) -> tuple[CollectorRegistry, InMemoryFindingSink]:
    """``runs`` traces of ``run`` through a real engine; its registry and findings."""
    registry = CollectorRegistry()
    settings = EvaluationSettings.model_validate({"policy": {}})
    clock = ManualClock()
    findings = InMemoryFindingSink()
    parts = EngineParts(
        limits=AssemblyLimits(),
        evaluation=EvaluationPipeline(settings),
        normalize=settings.policy.normalizer(),
        findings=findings,
        tooltraces=DiscardToolTraces(),
        golden=GoldenCaseSet([CASE]),
    )
    engine = Engine(parts, clock, PrometheusMetrics(registry))
    options = DecodeOptions(reference_keys=frozenset({DEFAULT_CASE_ID_ATTRIBUTE}))
    for _ in range(runs):  # each record() is a new trace
        request = encode_spans(agents.spans_of(agents.record(run, "genai")))
        engine.offer(decode_request(request, options), "grpc")
    clock.advance(3)
    assert engine.tick() == runs
    return registry, findings


def _series(labels: dict[str, str], name: str) -> str:
    pairs = ",".join(f'{key}="{value}"' for key, value in {**labels, **SCRAPE}.items())
    return f"{name}{{{pairs}}}"


def _promtool(tmp_path: Path, registry: CollectorRegistry, reference: str, alert: str) -> str:
    """promtool's failure report ('' when it passes) of the shipped rules over 40 minutes:
    the agent's runs at a steady 2.5 a minute (25 per 10m, compared with ``reference``), and
    the regression series ``registry`` exposes, scraped from minute ``SCRAPED_AT`` on
    (created then). Expects ``alert`` to fire at minute 23, after its ``for``, with the value
    of ``ALERTS`` (1, or none)."""
    inputs: list[dict[str, Any]] = [
        {
            "series": _series(
                {"agent": "support", "outcome": "complete", "reference": reference},
                "toolwatch_tool_traces_total",
            ),
            "values": "0+2.5x40",
        }
    ]
    for family in registry.collect():
        if family.name not in FAMILIES:
            continue
        for sample in family.samples:
            value = SCRAPED_AT * 60 if sample.name.endswith("_created") else sample.value
            values = f"_x{SCRAPED_AT} {value:g}x{40 - SCRAPED_AT}"
            inputs.append({"series": _series(sample.labels, sample.name), "values": values})
    return promtool_expr_case(
        tmp_path / "runs.test.yaml",
        rules=RULES,
        series=inputs,
        expr=f'count(ALERTS{{alertname="{alert}",alertstate="firing"}})',
        eval_time="23m",
        samples=[{"labels": "{}", "value": 1}],
    )


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return sum(
        sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


@pytest.mark.parametrize(("runs", "burst"), [(1, False), (3, True)], ids=["one run", "three"])
def test_a_run_drifting_on_three_calls_counts_once_among_the_runs(
    tmp_path: Path, runs: int, burst: bool
) -> None:
    registry, findings = _exposed(_drifting_run(), runs)
    drift = [f for f in findings.findings if f.category == "ARGUMENT_VALUE_DRIFT"]
    assert len(drift) == 3 * runs and {f.tool for f in drift} == {"search_kb"}
    labels = {"category": "ARGUMENT_VALUE_DRIFT", "tool": "search_kb"}
    assert _sample(registry, "toolwatch_regressions_total", **labels) == 3 * runs
    assert _sample(registry, "toolwatch_runs_with_findings_total", **labels) == runs

    failed = _promtool(tmp_path, registry, "expected", "ToolwatchToolCallDriftBurst")
    assert (failed == "") is burst, failed


@pytest.mark.parametrize(("runs", "burst"), [(1, False), (3, True)], ids=["one run", "three"])
def test_a_run_repeating_four_calls_counts_once_among_the_runs(
    tmp_path: Path, runs: int, burst: bool
) -> None:
    registry, findings = _exposed(_looping_run(), runs)
    loops = [f for f in findings.findings if f.evaluator == "loops"]
    assert len(loops) == 4 * runs and {f.tool for f in loops} == {"search_kb"}
    labels = {"category": "UNNECESSARY_TOOL_CALL", "evaluator": "loops"}
    assert _sample(registry, "toolwatch_regressions_total", **labels) == 4 * runs
    assert _sample(registry, "toolwatch_runs_with_findings_total", **labels) == runs

    failed = _promtool(tmp_path, registry, "none", "ToolwatchToolCallLoopBurst")
    assert (failed == "") is burst, failed
