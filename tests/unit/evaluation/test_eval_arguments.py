"""tool_arguments: pairing, field strategies and overrides, one-sided fields, findings."""

from __future__ import annotations

import re
from typing import Any

import pytest
from eval_factories import call, case, trace

from toolwatch.evaluation.arguments import ArgumentScorer, ToolArguments, _nameable
from toolwatch.evaluation.base import RefCall, Reference
from toolwatch.evaluation.settings import ToolArgumentsSettings
from toolwatch.model import Category, ReferenceKind, Severity
from toolwatch.model_evaluation import EvalResult, ExpectedCall
from toolwatch.names import NameNormalizer


def evaluate(expected: Any, run: Any, **settings: Any) -> EvalResult:
    evaluator = ToolArguments(ToolArgumentsSettings.model_validate(settings), NameNormalizer())
    reference = (
        Reference(expected=expected)
        if not hasattr(expected, "calls")
        else Reference(source=expected)
    )
    result = evaluator(run, reference)
    assert result is not None
    return result


@pytest.mark.parametrize(
    ("expected", "actual", "settings", "score"),
    [
        ({"q": "x"}, {"q": "x"}, {}, 1.0),
        ({}, {}, {}, 1.0),  # no fields on either side
        ({"q": "x"}, {"q": "y"}, {}, 0.0),
        ({"q": "x", "n": 1}, {"q": "x"}, {}, 0.5),  # a value dropped: 0.5, and it decides
        ({"q": "x"}, {"q": "x", "extra": 1}, {}, 1.0),  # a field only the run sent: ignored
        ({"q": "x"}, {"q": "x", "extra": 1}, {"strict": True}, 0.5),  # strict: it scores 0
        ({"q": "x", "n": 1}, {"q": "x"}, {"strict": True}, 0.0),  # strict: 0
        ({"q": "x"}, {"q": "x", "extra": 1}, {"default_strategy": "subset"}, 1.0),  # key subset
        ({"q": "x", "n": 1}, {"q": "x"}, {"default_strategy": "subset"}, 0.5),
        ({"q": "Paris"}, {"q": "weather in paris"}, {"strategies": {"search": "contains"}}, 1.0),
        ({"q": "Paris"}, {"q": "weather in paris"}, {"strategies": {"*.q": "contains"}}, 1.0),
        ({"q": "Paris"}, {"q": "weather in paris"}, {"strategies": {"search.q": "contains"}}, 1.0),
        ({"q": "Paris"}, {"q": "weather in paris"}, {"strategies": {"other.q": "contains"}}, 0.0),
        ({"n": 5}, {"n": 5.0}, {"default_strategy": "fuzzy"}, 1.0),  # equal, as exact says
        ({"order_id": 123}, {"order_id": "123"}, {}, 1.0),  # the number sent as its text
        ({"amount": 12.0}, {"amount": "12"}, {}, 1.0),
        ({"order_id": 123}, {"order_id": "0123"}, {}, 0.0),  # not its text: another id
        ({"order_id": "123"}, {"order_id": 123}, {}, 0.5),  # the case's text: type differs
        ({"order": {"id": "7", "qty": 1}}, {"order": {"id": 7, "qty": 1.0}}, {}, 0.5),
        ({"ids": ["7", "8"]}, {"ids": [8, 7]}, {"default_strategy": "subset"}, 0.5),
    ],
)
def test_field_scoring(
    expected: dict[str, Any], actual: dict[str, Any], settings: dict[str, Any], score: float
) -> None:
    result = evaluate(case(("search", expected)), trace(("search", actual)), **settings)
    assert result.scores["score"] == pytest.approx(score)


def test_numeric_field_override_with_default_tolerance() -> None:
    expected = case(("issue_refund", {"order_id": "A1", "amount_usd": 40.0}))
    run = trace(("issue_refund", {"order_id": "A1", "amount_usd": 41.0}))  # 2.5% off
    result = evaluate(expected, run, strategies={"issue_refund.amount_usd": "numeric"})
    assert result.scores["score"] == pytest.approx(0.5)  # the amount's: a value field


def test_strategy_resolution_most_specific_first() -> None:
    expected = case(ExpectedCall("search", {"q": "Paris"}, match="exact"))
    run = trace(("search", {"q": "paris!"}))
    tool_field = evaluate(expected, run, strategies={"search.q": "fuzzy", "*.q": "contains"})
    star_field = evaluate(expected, run, strategies={"*.q": "contains", "search": "fuzzy"})
    call_match = evaluate(expected, run, strategies={"search": "contains"})
    assert tool_field.scores["score"] == pytest.approx(10 / 11)  # fuzzy("paris", "paris!")
    assert star_field.scores["score"] == 1.0  # *.q beats the call's match
    assert call_match.scores["score"] == 0.0  # the call's match beats the tool's


def test_a_strategy_for_a_dotted_tool_name_is_applied_or_refused() -> None:
    """``strategies: {mcp.search: fuzzy}`` for a tool named ``mcp.search`` loaded without a
    word and was read as tool ``mcp``, field ``search``: the strategy never applied, the
    search's ``q`` was compared ``exact``, and a run that asked ``refund policies`` for the
    golden ``refund policy`` was a ``critical`` ARGUMENT_VALUE_DRIFT. A key with one dot is
    read both ways, the call's tool saying which; one with more dots is refused at load."""
    strategies = {"mcp.search": "fuzzy"}
    dotted = evaluate(
        case(("mcp.search", {"q": "refund policy"})),
        trace(("mcp.search", {"q": "refund policies"})),
        strategies=strategies,
    )
    assert dotted.findings == ()
    fuzzy = dotted.scores["score"]
    assert 0.8 < fuzzy < 1.0  # fuzzy, not exact (0)
    # The same key still names the field search of a tool mcp.
    field = evaluate(
        case(("mcp", {"search": "refund policy", "n": 1})),
        trace(("mcp", {"search": "refund policies", "n": 1})),
        strategies=strategies,
    )
    assert field.scores["score"] == pytest.approx((fuzzy + 1.0) / 2)
    with pytest.raises(ValueError, match="for a tool whose name holds a dot"):
        ToolArgumentsSettings.model_validate(
            {"strategies": {"billing.issue_refund.amount_usd": "numeric"}}
        )


def golden(tool: str) -> RefCall:
    return RefCall(tool, {}, True, None, 0)


def test_a_dotted_keys_whole_name_yields_to_a_plain_key_and_to_a_second_reading() -> None:
    """With ``tool_prefix: '[a-z0-9_-]+?\\.'`` the whole names of ``lookup_order.reason`` and
    ``issue_refund.reason`` both normalize to ``reason``: each still names its tool's field,
    and neither names a tool ``reason`` (which of the two would be a guess); a plain key
    ``reason`` names that tool for certain, whatever dotted key comes first."""
    normalize = NameNormalizer(prefix=re.compile(r"[a-z0-9_-]+?\."))
    strategies = {"lookup_order.reason": "contains", "issue_refund.reason": "fuzzy"}
    scorer = ArgumentScorer(ToolArgumentsSettings(strategies=strategies), normalize)
    assert scorer.field_strategy(golden("lookup_order"), "reason") == "contains"
    assert scorer.field_strategy(golden("issue_refund"), "reason") == "fuzzy"
    assert scorer.call_strategy(golden("reason")) == "exact"
    plain = ToolArgumentsSettings(strategies={**strategies, "reason": "subset"})
    assert ArgumentScorer(plain, normalize).call_strategy(golden("reason")) == "subset"


def test_expected_call_never_made_scores_zero() -> None:
    expected = case(("lookup_order", {"id": 1}), ("issue_refund", {"id": 1}))
    result = evaluate(expected, trace(("lookup_order", {"id": 1})))
    assert result.scores["score"] == pytest.approx(0.5)
    assert result.findings == ()  # a missing call is tool_selection's finding
    assert result.explanation == "Arguments: 50% over 2 expected calls; 1 expected calls not made."


def test_expected_calls_without_arguments_are_paired_but_not_scored() -> None:
    expected = case(("search", None), ("search", {"q": "b"}))
    result = evaluate(expected, trace(("search", {"q": "b"}), ("search", {"q": "zzz"})))
    assert result.scores["score"] == 1.0  # the scored call took its best partner


def test_no_scored_expected_call_means_not_applicable() -> None:
    evaluator = ToolArguments(ToolArgumentsSettings(), NameNormalizer())
    assert evaluator(trace(("search", {"q": 1})), Reference(expected=case("search"))) is None


def test_pairing_is_optimal_not_positional() -> None:
    expected = case(("search", {"q": "a"}), ("search", {"q": "b"}))
    result = evaluate(expected, trace(("search", {"q": "b"}), ("search", {"q": "a"})))
    assert result.scores["score"] == 1.0


def test_repeated_calls_pair_one_to_one() -> None:
    expected = case(("search", {"q": "a"}), ("search", {"q": "a"}))
    result = evaluate(expected, trace(("search", {"q": "a"})))
    assert result.scores["score"] == pytest.approx(0.5)


def test_unparsable_arguments_score_zero_against_an_object() -> None:
    result = evaluate(case(("search", {"q": "a"})), trace(("search", '{"q": "a"')))
    assert result.scores["score"] == 0.0


def test_drift_finding_names_call_and_field_and_keeps_values_out_of_the_explanation() -> None:
    expected = case(("issue_refund", {"order_id": "SECRET-1", "amount_usd": 40}))
    run = trace(("lookup_order", {}), ("issue_refund", {"order_id": "SECRET-2", "amount_usd": 40}))
    result = evaluate(expected, run)
    (finding,) = result.findings
    assert finding.category is Category.ARGUMENT_VALUE_DRIFT
    assert (finding.span_id, finding.tool, finding.field) == ("s1", "issue_refund", "order_id")
    assert finding.severity is Severity.CRITICAL  # the wrong order id's score, 0
    assert "SECRET" not in finding.explanation and "SECRET" not in result.explanation
    assert finding.explanation == (
        "Arguments of issue_refund: 0% against the expected call, decided by the value of"
        " order_id (differs: order_id)."
    )
    assert finding.details["fields"]["order_id"]["expected"] == "SECRET-1"
    assert finding.details["fields"]["order_id"]["actual"] == "SECRET-2"


def test_a_case_number_sent_as_its_text_raises_no_finding() -> None:
    """Many tool schemas take "1042" for 1042 (pydantic does): the same order."""
    result = evaluate(
        case(("lookup_order", {"order_id": 1042})), trace(("lookup_order", {"order_id": "1042"}))
    )
    assert (result.scores, result.findings) == ({"score": 1.0}, ())


def test_a_case_text_sent_as_a_number_differs_in_type_only_and_is_no_page() -> None:
    """The case says text; the model sent the number it spells. A schema that wants text may
    refuse it, so it is a finding, but of the same order: never critical (was: 0%)."""
    expected = case(("lookup_order", {"order_id": "1042"}))
    result = evaluate(expected, trace(("lookup_order", {"order_id": 1042})))
    (finding,) = result.findings
    assert (finding.score, finding.severity) == (0.5, Severity.HIGH)
    assert finding.field == "order_id"
    assert finding.explanation == (
        "Arguments of lookup_order: 50% against the expected call (type differs: order_id)."
    )
    other = evaluate(expected, trace(("lookup_order", {"order_id": 1043})))
    assert other.findings[0].severity is Severity.CRITICAL  # another order
    assert other.findings[0].explanation.endswith("(differs: order_id).")


def test_a_field_name_that_may_be_data_is_counted_not_named() -> None:
    # The agent keyed its arguments by the customer's e-mail address: the name is data.
    expected = case(("notify", {"message": "hi"}))
    run = trace(("notify", {"message": "hi", "jane.doe@example.com": True, "urgent": True}))
    (finding,) = evaluate(expected, run, strict=True).findings
    assert finding.explanation == (
        "Arguments of notify: 33% against the expected call "
        "(unexpected: urgent, 1 field not named)."
    )
    assert finding.field is None  # the worst field (the first at 0) is the one not named
    assert set(finding.details["fields"]) == {"[field 1]", "urgent"}
    assert finding.details["fields"]["[field 1]"]["actual"] is True
    assert "jane" not in repr(finding)

    # An identifier-shaped API key or number is data too; field names with acronyms are not.
    keys = ("sk_live_51HxYzQ2eZ", "AKIAIOSFODNN7EXAMPLE", "HqLyjWDarjtT", "ssn_078051120")
    for key in (*keys, "requestQmTokenxyz"):  # the last: a one-letter word between capitals
        assert not _nameable(key), key
    for name in ("order_id", "pageURL", "isOK", "XMLHttpRequest", "address_2", "line2", "MAX_N"):
        assert _nameable(name), name
    run = trace(
        ("notify", {"message": "hi", "sk_live_51HxYzQ2eZvKYlo2C0KEY": 1, "ssn_078051120": 2})
    )
    (finding,) = evaluate(expected, run, strict=True).findings
    assert finding.explanation.endswith("(unexpected: 2 fields not named).")

    # Against a shadow source every name is live data; identifiers are still named.
    source = trace(("notify", {"to": "x", "Jane Doe": 1}))
    (finding,) = evaluate(source, trace(("notify", {"to": "y", "Jane Doe": 2}))).findings
    assert finding.explanation.endswith("(differs: to, 1 field not named).")
    assert "Jane" not in repr(finding)
    # A golden case's own names are an operator's, shown whatever they look like.
    golden = case(("notify", {"e-mail": "a@b"}))
    (finding,) = evaluate(golden, trace(("notify", {"e-mail": "c@d"}))).findings
    assert (finding.field, finding.explanation.endswith("(differs: e-mail).")) == ("e-mail", True)


def test_threshold_controls_findings() -> None:
    expected = case(("search", {"q": "a", "n": 1}))
    run = trace(("search", {"q": "a"}))
    assert evaluate(expected, run).findings != ()  # 0.5 < 0.8
    assert evaluate(expected, run, threshold=0.5).findings == ()


def test_against_source_compares_with_the_source_calls() -> None:
    source = trace(("search", {"q": "a"}), ("search", {"q": "b"}))
    result = evaluate(source, trace(("search", {"q": "a"}), ("search", {"q": "c"})))
    assert result.scores["score"] == pytest.approx(0.5)
    assert result.findings[0].reference is ReferenceKind.SOURCE
    assert result.findings[0].span_id == "s1"


def test_source_calls_recorded_without_arguments_are_not_scored() -> None:
    evaluator = ToolArguments(ToolArgumentsSettings(), NameNormalizer())
    source = trace(call("search", None, index=0))
    assert evaluator(trace(("search", {"q": 1})), Reference(source=source)) is None


def test_run_calls_recorded_without_arguments_are_not_scored() -> None:
    """Unknown arguments are not wrong ones: a pair whose run call has none recorded is left
    out of the score and raises nothing; the calls that were recorded are still judged."""
    expected = case(("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"}))
    unrecorded = trace(("get_weather", None), ("get_weather", None))
    assert (
        ToolArguments(ToolArgumentsSettings(), NameNormalizer())(
            unrecorded, Reference(expected=expected)
        )
        is None
    )
    one_recorded = evaluate(
        expected, trace(("get_weather", None), ("get_weather", {"city": "Oslo"}))
    )
    assert one_recorded.scores == {"score": 0.0}
    assert [f.span_id for f in one_recorded.findings] == ["s1"]


@pytest.mark.parametrize("unknown_first", [True, False])
def test_a_call_recorded_without_arguments_does_not_hide_a_wrong_one(unknown_first: bool) -> None:
    """Its similarity read 0, tied with the wrong call's, and its place won it the expected
    call: then it was dropped as unknown and the wrong refund never judged. The pairing
    judges the call whose arguments are known, wherever the unknown one stands."""
    expected = case(("issue_refund", {"order_id": "A1", "amount": 10}))
    wrong = ("issue_refund", {"order_id": "B7", "amount": 999})
    unknown = ("issue_refund", None)
    result = evaluate(expected, trace(unknown, wrong) if unknown_first else trace(wrong, unknown))
    assert result.scores == {"score": 0.0}
    (finding,) = result.findings
    assert finding.category is Category.ARGUMENT_VALUE_DRIFT
    assert finding.span_id == ("s1" if unknown_first else "s0")


def test_a_call_without_arguments_on_either_side_does_not_hide_a_wrong_one() -> None:
    """An expected call naming no arguments matched any call at 1.0: it tied for the wrong
    refund with the scored one, and its place won it."""
    expected = case(("issue_refund", None), ("issue_refund", {"order_id": "A1"}))
    run = trace(("issue_refund", {"order_id": "B7"}), ("issue_refund", None))
    result = evaluate(expected, run)
    assert result.scores == {"score": 0.0}
    assert [(f.category, f.span_id) for f in result.findings] == [
        (Category.ARGUMENT_VALUE_DRIFT, "s0")
    ]


def test_integers_past_the_float_range_are_compared_exactly() -> None:
    big, other = 10**400, 10**400 + 1
    same_big = evaluate(
        case(("lookup_order", {"order_id": big})), trace(("lookup_order", {"order_id": big}))
    )
    assert same_big.scores == {"score": 1.0}
    for strategy in ("exact", "numeric", "subset", "contains"):
        drifted = evaluate(
            case(("lookup_order", {"order_id": big})),
            trace(("lookup_order", {"order_id": other})),
            default_strategy=strategy,
        )
        assert drifted.scores == {"score": 0.0}, strategy
        assert [f.category for f in drifted.findings] == [Category.ARGUMENT_VALUE_DRIFT]


def test_a_strategy_per_field_of_a_golden_call_leaves_the_others_exact() -> None:
    """``match: contains`` for the whole call let a wrong order id through as a substring
    ("ORD-22135" contains "ORD-2213"); ``match: {reason: contains}`` does not."""
    escalate = ExpectedCall(
        "escalate_to_human",
        {"order_id": "ORD-2213", "reason": "chargeback"},
        field_match={"reason": "contains"},
    )
    right = ("escalate_to_human", {"order_id": "ORD-2213", "reason": "Chargeback threat"})
    wrong = ("escalate_to_human", {"order_id": "ORD-22135", "reason": "Chargeback threat"})
    assert evaluate(case(escalate), trace(right)).scores["score"] == 1.0
    result = evaluate(case(escalate), trace(wrong))
    assert result.scores["score"] == 0.0  # the order id's: a value field
    (finding,) = result.findings
    assert (finding.category, finding.field) == (Category.ARGUMENT_VALUE_DRIFT, "order_id")


def test_a_shadow_sources_amount_sent_as_text_is_a_number_under_numeric() -> None:
    """Models send amounts as text as often as not; only a golden case's text is text."""
    source = trace(("issue_refund", {"order_id": "A-1", "amount_usd": "49.99"}))
    target = trace(("issue_refund", {"order_id": "A-1", "amount_usd": 49.99}))
    strategies = {"strategies": {"issue_refund.amount_usd": "numeric"}}
    assert evaluate(source, target, **strategies).scores["score"] == 1.0
    assert evaluate(target, source, **strategies).scores["score"] == 1.0


def test_a_sources_failed_call_made_again_is_no_call_the_run_left_out() -> None:
    """The source asked for order A-1 twice, the first time failing: one lookup, which the
    run made once with the same arguments, not a second one it never made (scored 0)."""
    order = {"order_id": "A-1"}
    source = trace(
        call("lookup_order", order, index=0, ok=False),
        call("lookup_order", order, index=1),
    )
    result = evaluate(source, trace(("lookup_order", order)))
    assert (result.scores["score"], result.findings) == (1.0, ())
