"""Matching live runs to golden cases through the configured attribute."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from tests import factories
from toolwatch.model_evaluation import GoldenCase
from toolwatch.model_traces import ToolTrace
from toolwatch.references.golden import CaseTally, GoldenCaseSet, Lookup

REFUND = GoldenCase(case_id="refund-1", expected_no_tools=False, expected_tool_count=2)
GREETING = GoldenCase(case_id="greeting", expected_no_tools=True)


def _run(
    keys: Mapping[str, str],
    shared: Mapping[str, str] | None = None,
    agent: str | None = "refunds",
    agents: tuple[str, ...] = (),
) -> ToolTrace:
    return factories.tool_trace(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        run_span_id="b7ad6b7169203331",
        service="support-agent",
        agent=agent,
        model="gpt-4o",
        start_ns=1,
        end_ns=2,
        span_count=1,
        reference_keys=keys,
        shared_keys=shared or {},
        agents=agents,
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


CANARY = GoldenCase(case_id="kb-1", expected_tools=(), expected_min_steps=1, agent=" Support-Bot ")
ID = "toolwatch.case_id"


@pytest.mark.parametrize(
    ("run", "found"),
    [
        (_run({ID: "kb-1"}, agent="support-bot"), (CANARY, None)),
        # the agent it handed over to: the case's run too (names trimmed, case-folded)
        (_run({ID: "kb-1"}, agent="triage", agents=("triage", "SUPPORT-BOT")), (CANARY, None)),
        # a title agent given the id by the resource: no run of the case
        (_run({ID: "kb-1"}, agent="title-bot", agents=("title-bot",)), (None, "agent_not_run")),
        (_run({ID: "kb-1"}, agent=None), (None, "agent_not_run")),  # the handler's own calls
        # the id on a request span above several runs: the agent says which is its run
        (_run({}, {ID: "kb-1"}, agent="support-bot"), (CANARY, None)),
        (_run({}, {ID: "kb-1"}, agent="title-bot"), (None, "agent_not_run")),
    ],
    ids=["own", "handed-to", "other-agent", "no-agent", "shared", "shared-other-agent"],
)
def test_a_case_that_names_its_agent_judges_that_agents_run_alone(
    run: ToolTrace, found: tuple[GoldenCase | None, str | None]
) -> None:
    cases = GoldenCaseSet([REFUND, CANARY])
    assert cases.lookup(run) == Lookup(found[0], "kb-1", found[1])
    assert cases.match(run) is found[0]


def test_an_id_above_several_runs_is_no_runs_when_its_case_names_no_agent() -> None:
    cases = GoldenCaseSet([REFUND])
    assert cases.lookup(_run({}, {ID: "refund-1"})) == (None, "refund-1", "several_runs")
    assert cases.lookup(_run({ID: "hi"}, {ID: "refund-1"})) == (None, "hi", "unknown_case")
    assert cases.lookup(_run({ID: "refund-1"}, {ID: "hi"})) == (REFUND, "refund-1", None)


def test_an_unknown_case_id_is_told_own_or_shared() -> None:
    cases = GoldenCaseSet([REFUND, CANARY])
    assert cases.lookup(_run({ID: "refund-2"})) == (None, "refund-2", "unknown_case")
    assert cases.lookup(_run({}, {ID: "refund-2"})) == (None, "refund-2", "unknown_case")
    assert cases.lookup(_run({"other": "refund-1"})) == (None, None, None)


def test_a_trace_tells_the_ids_no_run_of_it_was_matched_to() -> None:
    """A title agent's run beside the canary's is no problem when the canary's run is
    matched; an id no run of the trace was matched to is told once, with the agents seen."""
    cases = GoldenCaseSet([REFUND, CANARY])
    tally = CaseTally()
    runs = [
        _run({}, {ID: "refund-1"}, agent="title-bot"),  # several_runs, but...
        _run({ID: "refund-1"}, {ID: "refund-1"}, agent="refunds"),  # ...this one is matched
        _run({ID: "kb-1"}, agent="Support Bot"),  # not the case's support-bot
        _run({ID: "kb-1"}, agent="title-bot"),
        _run({}, {ID: "typo"}, agent="title-bot"),
        _run({}, {ID: "typo"}, agent=None),
    ]
    for run in runs:
        tally.add(cases.lookup(run), run)
    assert tally.unmatched() == [
        ("kb-1", "agent_not_run", ["Support Bot", "title-bot"]),
        ("typo", "unknown_case", ["title-bot"]),
    ]
