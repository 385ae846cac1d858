"""Property: whatever the evaluators find, no argument or result value reaches the findings
log or stream unless the configuration shows it (the ``Finding.details`` contract that
``Redaction`` relies on)."""

from __future__ import annotations

import dataclasses
import json

import eval_factories
from eval_factories import TOOLS, as_case, call, trace
from hypothesis import given, settings
from hypothesis import strategies as st

from toolwatch.evaluation import EvaluationPipeline, EvaluationSettings
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolTrace
from toolwatch.sinks.findings import Redaction, finding_record, render_details

SECRET = "S3CR3T"
# The shared policy, with a schema whose messages quote values and keys from the data.
POLICY = {
    **eval_factories.POLICY,
    "dangerous_tools": ["issue_refund", "send_email"],
    "invariants": [
        {"kind": "forbidden", "tool": "send_email"},
        {
            "kind": "arguments",
            "tool": "search",
            "schema": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"maxLength": 2}},
                "additionalProperties": {"type": "object", "maxProperties": 0},
                "maxProperties": 1,
            },
        },
        {"kind": "arguments", "tool": "issue_refund", "schema": {"type": "object"}},
    ],
}
PIPELINE = EvaluationPipeline(EvaluationSettings.model_validate({"policy": POLICY}))

#: Values (and keys below the top level) that only arguments and results hold.
secrets = st.integers(0, 99).map(lambda n: f"{SECRET}{n}")
secret_values = st.recursive(
    secrets,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(secrets, inner, max_size=2),
    max_leaves=5,
)
secret_arguments = st.one_of(
    secrets, st.dictionaries(st.sampled_from("abcd"), secret_values, min_size=1, max_size=3)
)


@st.composite
def secret_runs(draw: st.DrawFn) -> ToolTrace:
    names = draw(st.lists(st.sampled_from(TOOLS), min_size=1, max_size=5))
    calls = [
        dataclasses.replace(
            call(name, draw(secret_arguments), index=i, ok=draw(st.booleans())),
            result=draw(secret_values),
        )
        for i, name in enumerate(names)
    ]
    return trace(*calls)


def written(run: ToolTrace, findings: tuple[Finding, ...], redaction: Redaction) -> str:
    """What the findings log and the findings stream would carry of ``findings``."""
    records = [finding_record(run, f, redaction, 0) for f in findings]
    streamed = [render_details(redaction.details(f)) for f in findings]
    return json.dumps([records, streamed])


def findings_of(run: ToolTrace, source: ToolTrace, case_of: ToolTrace) -> tuple[Finding, ...]:
    against_source = PIPELINE.evaluate(run, source=source)
    against_case = PIPELINE.evaluate(run, expected=as_case(case_of))
    assert against_source.failures == () and against_case.failures == ()
    return against_source.findings + against_case.findings


@settings(max_examples=150)
@given(secret_runs(), secret_runs(), secret_runs())
def test_no_argument_or_result_value_is_written_unless_shown(
    run: ToolTrace, source: ToolTrace, case_of: ToolTrace
) -> None:
    findings = findings_of(run, source, case_of)
    assert SECRET not in written(run, findings, Redaction())
    others = Redaction(show_fields=frozenset({"e", "search.zz", "fields", "value"}))
    assert SECRET not in written(run, findings, others)


def test_the_property_can_fail_values_are_there_to_hide() -> None:
    """The same findings, with every value shown, do carry the secrets: so the property
    above checks redaction, not evaluators that happen to keep no values."""
    run = trace(
        ("search", {"a": f"{SECRET}1", "d": {f"{SECRET}2": 1}}),
        ("issue_refund", {"a": f"{SECRET}3"}),
        ("issue_refund", {"a": f"{SECRET}3"}),
    )
    source = trace(("lookup_order", {"a": f"{SECRET}4"}), ("issue_refund", {"a": f"{SECRET}5"}))
    findings = findings_of(run, source, source)
    shown = written(run, findings, Redaction(show_values=True))
    hidden = written(run, findings, Redaction())
    assert {f"{SECRET}{n}" for n in (1, 2, 3, 5)} <= set(_secrets_in(shown))
    assert _secrets_in(hidden) == []
    categories = {str(f.category) for f in findings}
    wanted = {"INVARIANT_VIOLATION", "ARGUMENT_VALUE_DRIFT", "MISSING_VERIFICATION_STEP"}
    assert wanted <= categories


def _secrets_in(text: str) -> list[str]:
    found: list[str] = []
    start = text.find(SECRET)
    while start >= 0:
        end = start + len(SECRET)
        while end < len(text) and text[end].isdigit():
            end += 1
        found.append(text[start:end])
        start = text.find(SECRET, end)
    return found


def test_a_shown_field_shows_only_its_own_values() -> None:
    run = trace(("issue_refund", {"a": f"{SECRET}1", "b": f"{SECRET}2"}))
    source = trace(("issue_refund", {"a": f"{SECRET}3", "b": f"{SECRET}4"}))
    findings = findings_of(run, source, source)
    text = written(run, findings, Redaction(show_fields=frozenset({"issue_refund.a"})))
    assert set(_secrets_in(text)) == {f"{SECRET}1", f"{SECRET}3"}
