"""The timeline: the request spans above a run and the keys they carry (case ids, conversation
keys) belong to that run alone, also for a residual run and runs under a gateway."""

from __future__ import annotations

import pytest
from assembly_support import agent, build, llm, only, span, tool

from toolwatch.model import SpanRecord, SpanRole


def test_a_case_id_on_the_request_span_above_the_agent_is_the_runs() -> None:
    """A canary's case id set on the HTTP handler's span (or a workflow's) above the agent:
    read from the run's own spans alone, the canary was judged by the policy only."""
    case_id, pair = ("toolwatch.case_id", "refund-1"), ("toolwatch.shadow.pair_id", "p-9")
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="POST /chat", reference_keys=(case_id, pair)),
        span(
            2,
            1,
            SpanRole.OTHER,
            1,
            99,
            name="workflow",
            reference_keys=(("toolwatch.case_id", "near"),),
        ),
        agent(
            3,
            2,
            "support",
            2,
            98,
            reference_keys=((pair[0], "own"),),
        ),
        tool(4, 3, "lookup_order", 3, 4),
    ]
    assert only(spans).reference_keys == {
        "toolwatch.shadow.pair_id": "own",  # the run's own first
        "toolwatch.case_id": "near",  # then the nearest span above
    }


@pytest.mark.parametrize(
    "beside",
    [
        [agent(4, 1, "title-bot", 60, 99)],  # a title agent after the request's agent
        [agent(4, 1, "moderation-bot", 0, 1)],  # a moderation agent before it
    ],
    ids=["title", "moderation"],
)
def test_a_case_id_above_several_runs_is_none_of_theirs(beside: list[SpanRecord]) -> None:
    """Whose it is the spans do not say, and a wrong guess pages: the run given the canary's
    case id did not do the canary's work."""
    case_id = (("toolwatch.case_id", "kb-return-window"),)
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="POST /chat", reference_keys=case_id),
        agent(2, 1, "refund-bot", 1, 50),
        tool(3, 2, "search_kb", 2, 3),
        *beside,
    ]
    assert [t.reference_keys for t in build(spans)] == [{}, {}]
    assert [t.shared_keys for t in build(spans)] == [dict(case_id), dict(case_id)]


def test_a_request_span_above_one_of_several_runs_is_that_runs() -> None:
    """Two requests under one trace (a batch job's root): each request's span is above its
    own agent only, so its case id is that run's; the root's key is shared by both."""
    batch, first, second = ("batch", "b-1"), ("toolwatch.case_id", "a"), ("toolwatch.case_id", "b")
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="batch", reference_keys=(batch,)),
        span(2, 1, SpanRole.OTHER, 1, 40, name="POST /chat", reference_keys=(first,)),
        agent(3, 2, "refund-bot", 2, 39),
        span(4, 1, SpanRole.OTHER, 50, 90, name="POST /chat", reference_keys=(second,)),
        agent(5, 4, "refund-bot", 51, 89),
    ]
    traces = build(spans)
    assert [t.reference_keys for t in traces] == [dict([first]), dict([second])]
    assert [t.shared_keys for t in traces] == [dict([batch]), dict([batch])]


def test_a_run_whose_parent_never_arrived_leaves_no_span_above_to_another() -> None:
    """The agent asked hangs from a hop toolwatch never received (a queue between gateway
    and worker): the request span above the title agent may be above it too, so its case
    id is no one's own."""
    case_id = (("toolwatch.case_id", "kb-1"),)
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="POST /chat", reference_keys=case_id),
        agent(2, 99, "support-bot", 1, 50),  # span 99: the hop, not received
        tool(3, 2, "search_kb", 2, 3),
        agent(4, 1, "title-bot", 60, 99),
    ]
    keys = {t.agent: (t.reference_keys, t.shared_keys) for t in build(spans)}
    assert keys == {"support-bot": ({}, {}), "title-bot": ({}, dict(case_id))}


def test_a_residual_run_holds_only_the_spans_above_its_own_calls() -> None:
    """Two requests under one batch root, one handler calling a tool outside its agent:
    the other request keeps its case id, the handler's call has its own request's."""
    first, second = ("toolwatch.case_id", "a"), ("toolwatch.case_id", "b")
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="batch"),
        span(2, 1, SpanRole.OTHER, 1, 40, name="POST /chat", reference_keys=(first,)),
        agent(3, 2, "support-bot", 2, 39),
        span(4, 1, SpanRole.OTHER, 50, 90, name="POST /chat", reference_keys=(second,)),
        agent(5, 4, "support-bot", 51, 80),
        tool(6, 4, "audit_log", 81, 82),  # the handler's own call, beside its agent
    ]
    keys = [(t.agent, t.reference_keys, t.shared_keys) for t in build(spans)]
    assert keys == [
        (None, {}, dict([second])),  # the handler's run, from the batch root's start
        ("support-bot", dict([first]), {}),
        ("support-bot", {}, dict([second])),  # the request span holds both runs' work
    ]


def test_a_span_above_the_residual_run_and_an_agent_is_neither_runs_own() -> None:
    """The handler's own instrumented tool calls beside the request's agent: which of the
    two the request span's case id is for, no span says (a wrong guess pages)."""
    case_id = (("toolwatch.case_id", "refund-1"),)
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="POST /chat", reference_keys=case_id),
        tool(2, 1, "audit_log", 1, 2, reference_keys=(("tool.key", "own"),)),
        agent(4, 1, "refund-bot", 60, 99),
    ]
    keys = {t.agent: (t.reference_keys, t.shared_keys) for t in build(spans)}
    assert keys == {
        None: ({"tool.key": "own"}, dict(case_id)),
        "refund-bot": ({}, dict(case_id)),
    }


def test_a_model_call_the_handler_makes_beside_the_agent_leaves_it_the_request_keys() -> None:
    """A query-rewrite (or router) model call outside the agent, asking for no tool, is no
    run: the request span's case id is the one agent run's, as in any trace of one run."""
    case_id = (("toolwatch.case_id", "kb-1"),)
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="POST /chat", reference_keys=case_id),
        llm(2, 1, 1, 5, output_text="return window for opened electronics"),
        agent(3, 1, "support-bot", 6, 99),
        tool(4, 3, "search_kb", 7, 8),
    ]
    (run,) = build(spans)
    assert (run.agent, run.reference_keys, run.shared_keys) == ("support-bot", dict(case_id), {})


def test_the_residual_runs_keys_are_those_above_its_own_calls_only() -> None:
    """Three requests under one batch root: a client-only canary (b), a handler's tool call
    (a) and an agent (c). The handler's call is request a's, not the earlier canary's."""
    case = "toolwatch.case_id"
    spans = [
        span(1, None, SpanRole.OTHER, 0, 100, name="batch"),
        span(2, 1, SpanRole.OTHER, 1, 40, name="POST /chat", reference_keys=((case, "b"),)),
        llm(3, 2, 2, 20, refusal="I can't help with that."),
        span(4, 1, SpanRole.OTHER, 50, 90, name="POST /chat", reference_keys=((case, "a"),)),
        tool(5, 4, "audit_log", 51, 52),
        span(6, 1, SpanRole.OTHER, 91, 99, name="POST /chat", reference_keys=((case, "c"),)),
        agent(7, 6, "support", 92, 98),
    ]
    residual, support = build(spans)
    assert (residual.agent, residual.reference_keys) == (None, {case: "a"})
    assert (support.reference_keys, support.shared_keys) == ({case: "c"}, {})


def test_runs_under_a_gateway_toolwatch_does_not_hear_from_keep_their_request_keys() -> None:
    """The request span continues a trace from a gateway that exports elsewhere: its parent
    never arrives, but it holds both runs, so what is above one run alone is that run's."""
    first, second = ("toolwatch.case_id", "a"), ("toolwatch.case_id", "b")
    spans = [
        span(1, 99, SpanRole.OTHER, 0, 100, name="batch"),  # span 99: the gateway's
        span(2, 1, SpanRole.OTHER, 1, 40, name="POST /chat", reference_keys=(first,)),
        agent(3, 2, "support-bot", 2, 39),
        span(4, 1, SpanRole.OTHER, 50, 90, name="POST /chat", reference_keys=(second,)),
        agent(5, 4, "support-bot", 51, 89),
    ]
    assert [t.reference_keys for t in build(spans)] == [dict([first]), dict([second])]


def test_a_parent_cycle_above_the_run_ends_the_walk_without_losing_the_keys() -> None:
    case_id = (("toolwatch.case_id", "refund-1"),)
    spans = [
        span(1, 1, SpanRole.OTHER, 0, 100, name="POST /chat", reference_keys=case_id),
        agent(2, 1, "refund-bot", 1, 50),
    ]
    assert only(spans).reference_keys == {"toolwatch.case_id": "refund-1"}
