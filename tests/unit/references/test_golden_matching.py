"""Matching live runs to golden cases through the configured attribute."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from tests import factories
from toolwatch.model import GoldenCase, ToolTrace
from toolwatch.references.golden import GoldenCaseSet

REFUND = GoldenCase(case_id="refund-1", expected_no_tools=False, expected_tool_count=2)
GREETING = GoldenCase(case_id="greeting", expected_no_tools=True)


def _run(keys: Mapping[str, str]) -> ToolTrace:
    return factories.tool_trace(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        run_span_id="b7ad6b7169203331",
        service="support-agent",
        agent="refunds",
        model="gpt-4o",
        start_ns=1,
        end_ns=2,
        span_count=1,
        reference_keys=keys,
    )


def test_a_run_carrying_a_case_id_matches_that_case() -> None:
    cases = GoldenCaseSet([REFUND, GREETING])

    assert cases.match(_run({"toolwatch.case_id": "greeting"})) is GREETING


def test_a_run_without_the_attribute_matches_nothing() -> None:
    cases = GoldenCaseSet([REFUND], case_id_attribute="toolwatch.case_id")

    assert cases.match(_run({"other": "refund-1"})) is None


def test_an_unknown_case_id_matches_nothing() -> None:
    cases = GoldenCaseSet([REFUND])

    assert cases.match(_run({"toolwatch.case_id": "refund-2"})) is None


def test_case_ids_match_exactly() -> None:
    cases = GoldenCaseSet([REFUND])

    assert cases.match(_run({"toolwatch.case_id": "Refund-1"})) is None


def test_matching_uses_the_configured_attribute() -> None:
    cases = GoldenCaseSet([REFUND], case_id_attribute="canary.case")

    assert cases.match(_run({"canary.case": "refund-1"})) is REFUND
    assert cases.match(_run({"toolwatch.case_id": "refund-1"})) is None


def test_set_has_length_and_iterates_in_given_order() -> None:
    cases = GoldenCaseSet([GREETING, REFUND])

    assert len(cases) == 2
    assert list(cases) == [GREETING, REFUND]
    assert cases.get("refund-1") is REFUND
    assert cases.get("missing") is None


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate golden case id 'refund-1'"):
        GoldenCaseSet([REFUND, GoldenCase(case_id="refund-1", expected_no_tools=True)])
