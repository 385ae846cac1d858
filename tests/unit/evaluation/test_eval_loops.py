"""loops: identical calls repeated after a successful result, beyond a limit."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from eval_factories import call, trace
from hypothesis import given
from hypothesis import strategies as st

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.loops import (
    Loops,
    acted,
    acted_reference,
    action_key,
    call_key,
    retried,
)
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.settings import LoopsSettings
from toolwatch.jsontext import decimal_text
from toolwatch.model import Category, ReferenceKind
from toolwatch.model_evaluation import EvalResult
from toolwatch.model_traces import ToolCall
from toolwatch.names import NameNormalizer


def evaluate(*calls: ToolCall, **policy: Any) -> EvalResult:
    return Loops(LoopsSettings(), PolicySettings.model_validate(policy))(trace(*calls), Reference())


def same(n: int, *, ok: bool = True, start: int = 0, args: Any = None) -> list[ToolCall]:
    return [call("lookup", args or {"id": 1}, index=start + i, ok=ok) for i in range(n)]


@pytest.mark.parametrize(
    ("calls", "limit", "flagged_spans"),
    [
        (same(2), 1, []),  # one repeat tolerated by default
        (same(3), 1, ["s2"]),
        (same(2), 0, ["s1"]),
        (same(4), 1, ["s2", "s3"]),
        (same(3, ok=False), 0, []),  # retries after failures are never repeats
        ([*same(2, ok=False), *same(1, start=2)], 0, []),  # retry, retry, success
        ([*same(1), *same(1, start=1, args={"id": 2})], 0, []),  # different arguments
        (  # the same arguments in another key order are identical
            [call("lookup", {"a": 1, "b": 2}, index=0), call("lookup", {"b": 2, "a": 1}, index=1)],
            0,
            ["s1"],
        ),
        (  # issued in parallel: neither saw the other's result
            [
                call("lookup", {"id": 1}, index=0, group=1),
                call("lookup", {"id": 1}, index=1, group=1),
            ],
            0,
            [],
        ),
        (  # one nested agent after the other: the second saw the first's result
            [
                call("ask", index=0),
                call("lookup", {"id": 1}, index=1, parent=0),
                call("ask", index=2),
                call("lookup", {"id": 1}, index=3, parent=2),
            ],
            0,
            ["s3"],
        ),
        (  # two nested agents issued in parallel: neither saw the other's lookup
            [
                call("ask", index=0, group=1),
                call("ask", index=1, group=1),
                call("lookup", {"id": 1}, index=2, parent=0),
                call("lookup", {"id": 1}, index=3, parent=1),
            ],
            0,
            [],
        ),
    ],
)
def test_repeats_after_success(calls: list[ToolCall], limit: int, flagged_spans: list[str]) -> None:
    result = evaluate(*calls, repeat_limit=limit)
    spans = [s for f in result.findings for s in f.details["spans"]]
    assert spans == flagged_spans
    assert all(f.category is Category.UNNECESSARY_TOOL_CALL for f in result.findings)
    assert result.scores["score"] == pytest.approx(1 - len(flagged_spans) / len(calls))


def test_one_finding_per_repeated_call_on_its_first_flagged_span() -> None:
    result = evaluate(*same(4), repeat_limit=1)
    (finding,) = result.findings
    assert (finding.span_id, finding.tool, finding.reference) == (
        "s2",
        "lookup",
        ReferenceKind.POLICY,
    )
    assert finding.details["repeats"] == 3
    assert finding.explanation == (
        "Loops: lookup repeated 3 times with identical arguments after a successful result "
        "(limit 1)."
    )


@pytest.mark.parametrize(
    ("calls", "retry_limit", "flagged_spans"),
    [
        (same(4, ok=False), None, []),  # no retry limit: retries are never flagged
        (same(4, ok=False), 3, []),  # three retries, the limit
        (same(5, ok=False), 3, ["s4"]),
        ([*same(4, ok=False), *same(1, start=4)], 2, ["s3", "s4"]),  # the success a retry too
        # s1 retries s0; s2 repeats s1's success (a repeat, not a retry), reported first
        ([*same(1, ok=False), *same(2, start=1)], 0, ["s2", "s1"]),
        (  # failures of other arguments are other calls
            [call("lookup", {"id": n}, index=n, ok=False) for n in range(5)],
            0,
            [],
        ),
        (  # issued at once after one failure: each saw it, none saw each other's
            [
                call("lookup", {"id": 1}, index=0, ok=False),
                call("lookup", {"id": 1}, index=1, group=1, ok=False),
                call("lookup", {"id": 1}, index=2, group=1, ok=False),
            ],
            1,
            ["s2"],
        ),
        (  # issued together with the failure: saw none of it
            [
                call("lookup", {"id": 1}, index=0, group=1, ok=False),
                call("lookup", {"id": 1}, index=1, group=1, ok=False),
            ],
            0,
            [],
        ),
    ],
)
def test_retries_after_failures_beyond_the_retry_limit(
    calls: list[ToolCall], retry_limit: int | None, flagged_spans: list[str]
) -> None:
    result = evaluate(*calls, repeat_limit=0, retry_limit=retry_limit)
    spans = [s for f in result.findings for s in f.details["spans"]]
    assert spans == flagged_spans
    assert all(f.category is Category.UNNECESSARY_TOOL_CALL for f in result.findings)
    assert result.scores["score"] == pytest.approx(1 - len(flagged_spans) / len(calls))


def test_a_retry_storm_says_it_retried_after_failures() -> None:
    result = evaluate(*same(6, ok=False), retry_limit=2)
    (finding,) = result.findings
    assert (finding.span_id, finding.details["repeats"], finding.details["limit"]) == ("s3", 5, 2)
    assert finding.explanation == (
        "Loops: lookup retried 5 times with identical arguments after failed results"
        " (retry limit 2)."
    )


def test_calls_without_recorded_arguments_are_not_retries() -> None:
    unrecorded = [call("lookup", None, index=i, ok=False) for i in range(5)]
    assert evaluate(*unrecorded, retry_limit=0).findings == ()


def test_a_request_that_never_ran_is_no_successful_result_to_repeat() -> None:
    """The model requested ``lookup(1)`` and the agent never ran it (no tool span while the
    run's other ``lookup`` calls have one, not hosted: what ``safety`` reads as requested,
    never run, verifying nothing); then it ran, once, and once more. The request was counted
    as an earlier successful result: "lookup repeated 2 times with identical arguments after
    a successful result (limit 1)", an UNNECESSARY_TOOL_CALL claiming a result that never
    existed. It returned nothing: one repeat, within the limit."""
    unrun = call("lookup", {"id": 1}, index=0, executed=False)
    result = evaluate(unrun, *same(2, start=1))
    assert (result.scores["score"], result.findings) == (1.0, ())
    # A provider-run (hosted) call did run; a tool no call of which has a span says nothing.
    hosted = call("lookup", {"id": 1}, index=0, executed=False, hosted=True)
    assert [f.span_id for f in evaluate(hosted, *same(2, start=1)).findings] == ["s2"]
    unspanned = [call("lookup", {"id": 1}, index=i, executed=False) for i in range(3)]
    assert len(evaluate(*unspanned).findings) == 1


def test_per_tool_limit_overrides_the_default() -> None:
    assert evaluate(*same(5), repeat_limit=0, repeat_limits={"Lookup": 10}).findings == ()


def test_run_without_calls_scores_one() -> None:
    result = evaluate()
    assert (result.scores["score"], result.findings) == (1.0, ())


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.0, -0.0, 1.0, 1e16, math.inf, -math.inf, math.nan])
    | st.floats()
    | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
_arguments = st.one_of(
    st.dictionaries(st.sampled_from("abc"), st.sampled_from(["x", "y", "1"]), max_size=3),
    _json_values,
)


@given(_arguments, _arguments)
def test_two_calls_have_one_key_exactly_when_their_canonical_json_is_one(a: Any, b: Any) -> None:
    def integral(value: Any) -> Any:  # a number is its decimal text; text is trimmed
        if type(value) in (int, float) and math.isfinite(value):
            return decimal_text(value)
        if isinstance(value, str):
            return value.strip()
        if isinstance(value, dict):
            return {key: integral(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [integral(item) for item in value]
        return value

    def canonical(value: Any) -> str:
        return json.dumps(integral(value), sort_keys=True, default=repr)

    same_json = canonical(a) == canonical(b)
    assert (call_key("lookup_order", a) == call_key("lookup_order", b)) is same_json
    assert call_key("lookup_order", a) != call_key("issue_refund", a)


def test_nested_arguments_in_another_key_order_are_identical() -> None:
    first = call_key("t", {"order": {"id": 7, "lines": [1, 2.5, None, True]}, "note": "x"})
    assert first == call_key("t", {"note": "x", "order": {"lines": [1, 2.5, None, True], "id": 7}})
    assert first != call_key("t", {"note": "x", "order": {"lines": [1, 2.5, None, 1], "id": 7}})
    assert call_key("t", [0.5]) != call_key("t", [-0.5])
    assert call_key("t", [0.0]) == call_key("t", [-0.0]) == call_key("t", [0])
    assert call_key("t", [math.nan]) == call_key("t", [math.nan])


def test_numbers_equal_as_json_values_make_one_call() -> None:
    assert call_key("t", {"order": {"id": 12.0}}) == call_key("t", {"order": {"id": 12}})
    assert call_key("t", {"amount": 1e20}) == call_key("t", {"amount": 10**20})
    assert call_key("t", {"id": 12.5}) != call_key("t", {"id": 12})
    assert call_key("t", {"id": True}) != call_key("t", {"id": 1.0})
    assert call_key("t", {"id": "12"}) == call_key("t", {"id": 12.0})  # what schemas make of it
    assert call_key("t", {"id": " 12"}) == call_key("t", {"id": 12})  # trimmed, as entity_key
    assert call_key("t", {"id": "1 2"}) != call_key("t", {"id": 12})
    assert call_key("t", {"id": 1e308}) == ("t", ("d", (("id", "1e+308"),)))  # not 309 digits


@pytest.mark.parametrize("again", [12.0, "12"])
def test_a_failed_call_made_again_with_its_number_written_otherwise_is_a_retry(again: Any) -> None:
    # A refund that failed with 12 and was made again with 12.0, or "12" after a schema
    # error, is one action, not two.
    calls = [
        call("issue_refund", {"order_id": 12}, index=0, ok=False),
        call("issue_refund", {"order_id": again}, index=1),
    ]
    assert retried(calls, ["issue_refund", "issue_refund"]) == frozenset({0})
    assert evaluate(*calls, retry_limit=0).findings[0].span_id == "s1"


def test_a_run_read_as_actions_leaves_out_the_failed_calls_it_made_again() -> None:
    """What the comparing evaluators count (``acted``): the retry stands for the failures
    before it; a failure not made again is an action of its own, and a run with nothing to
    leave out is itself, not a copy (the usual run costs no more)."""
    normalize = NameNormalizer()
    flaky = trace(
        call("lookup_order", {"id": 1}, index=0, ok=False),
        call("lookup_order", {"id": 1}, index=1),
        call("issue_refund", {"id": 1}, index=2, ok=False),
    )
    assert [c.span_id for c in acted(flaky, normalize).calls] == ["s1", "s2"]
    steady = trace(call("lookup_order", {"id": 1}, index=0), call("issue_refund", index=1))
    assert acted(steady, normalize) is steady
    reference = Reference(source=steady)
    assert acted_reference(reference, normalize) is reference
    shared = acted_reference(Reference(source=flaky), normalize)
    assert shared.source is not None and len(shared.source.calls) == 2


def test_a_value_json_has_no_type_for_is_not_taken_for_the_string_of_its_repr() -> None:
    assert call_key("t", {"blob": b"1"}) == call_key("t", {"blob": b"1"})
    assert call_key("t", {"blob": b"1"}) != call_key("t", {"blob": "b'1'"})
    assert call_key("t", {1: "x"}) == call_key("t", {1: "x"})  # a key JSON would make text


def test_arguments_deeper_than_the_key_goes_are_keyed_by_their_json() -> None:
    deep: Any = "leaf"
    for _ in range(100):
        deep = {"a": [deep]}
    assert call_key("t", deep) == ("t", json.dumps(deep, sort_keys=True, default=repr))


def test_flat_string_arguments_in_another_key_order_are_identical() -> None:
    first = call_key("t", {"order_id": "A-1", "reason": "late"})
    assert first == call_key("t", {"reason": "late", "order_id": "A-1"})
    assert first != call_key("t", {"order_id": "A-1", "reason": "early"})
    assert call_key("t", {"n": "1"}) == call_key("t", {"n": 1})  # a number is its text
    assert call_key("t", {"n": "true"}) != call_key("t", {"n": True})


def test_calls_recorded_without_arguments_are_not_repeats() -> None:
    """Content capture is often off: calls with no recorded arguments are not known to be
    identical, however many there are."""
    unrecorded = [call("get_weather", None, index=i) for i in range(3)]
    assert evaluate(*unrecorded, repeat_limit=0).findings == ()


def test_the_action_key_of_a_bound_call_is_its_bound_values_when_all_are_recorded() -> None:
    """A dangerous call with every bound field recorded is keyed by those values as
    ``entity_key`` compares them (12 and "12" one order); one missing a bound field, or
    without arguments, by all its arguments, as any other call."""
    bound = {"issue_refund": ("order_id", "customer.id")}
    full = call("issue_refund", {"order_id": 12, "customer": {"id": "C1"}, "amount": 5})
    same = call("issue_refund", {"order_id": "12", "customer": {"id": " C1"}, "amount": 9})
    other = call("issue_refund", {"order_id": "13", "customer": {"id": "C1"}, "amount": 5})
    partial = call("issue_refund", {"order_id": 12, "amount": 5})
    partial_again = call("issue_refund", {"order_id": 12, "amount": 9})
    key = action_key("issue_refund", full, bound)
    assert key == action_key("issue_refund", same, bound)
    assert key != action_key("issue_refund", other, bound)
    assert action_key("issue_refund", partial, bound) == call_key("issue_refund", partial.arguments)
    assert action_key("issue_refund", partial, bound) != action_key(
        "issue_refund", partial_again, bound
    )
    assert action_key("lookup_order", full, bound) == call_key("lookup_order", full.arguments)
