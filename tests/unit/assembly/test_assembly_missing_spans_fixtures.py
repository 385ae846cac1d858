"""``missing_spans`` over the spans real instrumentations exported (``tests/fixtures/otlp``):
never said of a whole trace (no false evidence), and said of the part of a run a rollout
leaves on one replica wherever the producer records the model's input history.

The part a rollout leaves: every span that ended before the trace's second model span started
went to another replica (the run's first model call, its first tools), the rest stayed.
``UNDETECTED`` lists the fixtures where that part is not judged ``missing_spans``, and why;
every other fixture with two model spans is."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from tests.unit.assembly.assembly_support import NORMALIZE
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.ingest.otlp_json import decode_otlp_json
from toolwatch.model import SpanRecord, SpanRole

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "otlp"
NAMES = sorted(
    p.name
    for p in FIXTURES.iterdir()
    if p.suffix in {".json", ".jsonl"} and ".expected" not in p.name
)

_NO_HISTORY = "its model spans carry no input history (or only the run's own input)"
_OTHER_AGENT = (
    "the second model span is another agent's (a sub-agent, the next agent, a guardrail's"
    " check) or the same call's second record: the model spans left still number as many as"
    " the later spans' histories show"
)
_LOOP_SPANS = "one model span for each agent's whole loop: nothing of it is cut"
#: Fixture -> why the part of a run a rollout leaves is not judged missing_spans.
UNDETECTED: dict[str, str] = {
    "conversation-turn1.otlp.jsonl": _NO_HISTORY,
    "conversation-turn2.otlp.jsonl": _NO_HISTORY,
    **{
        f"{producer}__{scenario}.json": _NO_HISTORY
        for producer, scenarios in {
            "google_adk__native_v1": (
                "agent_tool parallel refund refusal tool_crash tool_error transfer"
            ),
            "langgraph__langsmith": "agent_as_tool parallel refund tool_error",
            "openai_agents__otel_contrib": (
                "agent_as_tool handoff output_guardrail_tripped_client parallel refund"
                " refund_mcp refund_stream refusal_input_guardrail refusal_output_guardrail"
                " tool_error tool_error_mcp"
            ),
            "openai_agents__otel_contrib_mcp_v2": "refund_mcp tool_error_mcp",
        }.items()
        for scenario in scenarios.split()
    },
    **{
        f"{name}.json": _OTHER_AGENT
        for name in (
            "crewai__openllmetry__crew_hierarchical",
            "google_adk__native__agent_tool",
            "langgraph__openinference__agent_as_tool",
            "langgraph__openllmetry__agent_as_tool",
            "openai_agents__logfire__agent_as_tool",
            "openai_agents__logfire__refusal_input_guardrail",
            "openai_agents__logfire__refusal_output_guardrail",
            "openai_agents__logfire__refusal_output_guardrail_client",
            "openai_agents__logfire__tool_output_guardrail_client",
            "openai_agents__openinference__agent_as_tool",
            "openai_agents__openinference__output_guardrail_tripped_client",
            "openai_agents__openinference__refusal_input_guardrail",
            "openai_agents__openinference__refusal_output_guardrail",
            "openai_agents__openinference__refusal_output_guardrail_client",
            "openai_agents__openinference__tool_output_guardrail_client",
            "openai_agents__openllmetry__agent_as_tool",
            "openai_agents__openllmetry__output_guardrail_tripped_client",
            "openai_agents__openllmetry__refusal_input_guardrail",
            "openai_agents__openllmetry__refusal_output_guardrail",
            "openai_agents__openllmetry__refusal_output_guardrail_client",
            "openai_agents__openllmetry__tool_output_guardrail_client",
            "openai_client__logfire__refund_stream",
            "pydantic_ai__native_v2__agent_as_tool",
            "pydantic_ai__native_v5__agent_as_tool",
            "strands__native__agent_as_tool",
            "strands__native_latest__agent_as_tool",
        )
    },
    "google_adk__openinference__agent_tool.json": _LOOP_SPANS,
    "google_adk__openinference__transfer.json": _LOOP_SPANS,
}


def _traces(name: str) -> list[list[SpanRecord]]:
    by_trace: dict[bytes, list[SpanRecord]] = defaultdict(list)
    for line in (FIXTURES / name).read_bytes().splitlines():
        if line.strip():
            for span in decode_otlp_json(line, DecodeOptions(read_histories=True)).spans:
                by_trace[span.trace_id].append(span)
    return list(by_trace.values())


def _reasons(spans: list[SpanRecord]) -> list[str | None]:
    trace = CompletedTrace(spans[0].trace_id, tuple(spans), True, None, 0, 0)
    return [t.incomplete_reason for t in build_tool_traces(trace, NORMALIZE, from_history=True)]


def _rollout_leaves(spans: list[SpanRecord]) -> list[SpanRecord] | None:
    """The spans that did not end before the second model span started; ``None`` for a
    trace with fewer than two model spans."""
    models = sorted(s.start_ns for s in spans if s.role is SpanRole.LLM)
    if len(models) < 2:
        return None
    return [s for s in spans if s.end_ns >= models[1]]


def test_the_fixtures_are_there() -> None:
    assert len(NAMES) > 180
    assert set(UNDETECTED) <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_no_whole_trace_is_judged_missing_spans(name: str) -> None:
    for spans in _traces(name):
        assert "missing_spans" not in _reasons(spans)


@pytest.mark.parametrize("name", NAMES)
def test_the_part_a_rollout_leaves_is_judged_missing_spans(name: str) -> None:
    left = [part for part in map(_rollout_leaves, _traces(name)) if part is not None]
    if not left:
        assert name not in UNDETECTED, "no trace with two model spans: nothing to list"
        pytest.skip("no trace with two model spans")
    detected = any("missing_spans" in _reasons(part) for part in left)
    assert detected is (name not in UNDETECTED), UNDETECTED.get(name)


def _unrecorded_first_call(spans: list[SpanRecord]) -> list[SpanRecord] | None:
    """The trace as if its first model call went through a client no instrumentation wraps
    (case (a) of ``missing``): no span of it, the spans below it (a producer's tool spans
    under the model span that asked for them) hanging from its parent; ``None`` for a trace
    with fewer than two model spans."""
    models = sorted((s for s in spans if s.role is SpanRole.LLM), key=lambda s: s.start_ns)
    if len(models) < 2:
        return None
    first = models[0]
    kept = [s for s in spans if s is not first]
    for s in kept:
        if s.parent_span_id == first.span_id:
            s.parent_span_id = first.parent_span_id
    return kept


def _named_by_tool_spans(spans: list[SpanRecord]) -> bool:
    """Whether the second model span's history names ids and its run's tool spans ran
    each: what case (a) needs to be told from a lost span."""
    second = sorted((s for s in spans if s.role is SpanRole.LLM), key=lambda s: s.start_ns)[1]
    ran = {s.call_id for s in spans if s.role is SpanRole.TOOL}
    return bool(second.prior_call_ids) and set(second.prior_call_ids) <= ran


#: The producers whose fixtures show case (a) told apart: their histories name the calls'
#: ids and their tool spans carry them. Elsewhere the ids are missing from the tool spans
#: (the OpenAI Agents SDK's function spans, CrewAI's, a failed LangGraph tool's), differ
#: from them (Google ADK's native history, OpenLLMetry's OpenAI Agents history naming the
#: Responses item ``fc_`` id), or the history names none (OpenInference's ADK spans).
TOLD_APART: frozenset[str] = frozenset(
    {
        "langgraph__openinference",
        "langgraph__openllmetry",
        "pydantic_ai__native_v2",
        "pydantic_ai__native_v5",
        "strands__native",
        "strands__native_latest",
        "vercel_ai__legacy",
        "vercel_ai__otel",
    }
)


def test_an_unrecorded_model_call_whose_tool_spans_name_its_ids_leaves_its_run_complete() -> None:
    """Over every fixture: where the second model span's history names ids that tool spans
    ran, the trace without its first model span (no span of that call anywhere, its tools'
    spans here) is judged whole, not ``missing_spans``; and the producers where that holds
    are ``TOLD_APART``."""
    told: set[str] = set()
    for name in NAMES:
        for spans in _traces(name):
            cut = _unrecorded_first_call(spans)
            if cut is None or not _named_by_tool_spans(spans):
                continue
            assert "missing_spans" not in _reasons(cut), name
            told.add("__".join(name.split("__")[:2]))
    assert told == TOLD_APART
