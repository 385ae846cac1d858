"""Calls of a run: order and parallel groups (overlap, one output's requests, concurrent model
calls), requested-only and hosted calls (CONVENTIONS §6.3-6.4)."""

from __future__ import annotations

from typing import Any

import pytest
from assembly_support import MS, agent, ask, hexid, llm, only, span, tool
from hypothesis import given, settings
from hypothesis import strategies as st

from toolwatch.assembly.drafts import _Draft, _Request
from toolwatch.assembly.ordering import _sorted_in_time, _time_key
from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import SafetySettings
from toolwatch.model import CallStatus, Category, SpanRecord, SpanRole
from toolwatch.model_traces import ToolCall


def parallel_spans(paris_start: int, london_start: int) -> list[SpanRecord]:
    return [
        agent(1, None, "weather-bot", 0, 100),
        llm(
            2,
            1,
            1,
            10,
            ask("get_weather", "call_p", {"city": "Paris"}, 0),
            ask("get_weather", "call_l", {"city": "London"}, 1),
        ),
        tool(3, 1, "get_weather", london_start, 30, call_id="call_l", arguments={"city": "London"}),
        tool(4, 1, "get_weather", paris_start, 25, call_id="call_p", arguments={"city": "Paris"}),
    ]


def test_overlapping_sibling_calls_share_a_parallel_group() -> None:
    calls = only(parallel_spans(paris_start=11, london_start=12)).calls

    assert [(c.arguments["city"], c.sequence_index, c.parallel_group) for c in calls] == [
        ("Paris", 0, 0),
        ("London", 1, 0),
    ]


def test_emission_order_breaks_equal_start_times() -> None:
    calls = only(parallel_spans(paris_start=11, london_start=11)).calls

    assert [c.arguments["city"] for c in calls] == ["Paris", "London"]


def test_emission_order_wins_over_start_jitter_of_one_output() -> None:
    calls = only(parallel_spans(paris_start=12, london_start=11)).calls

    assert [c.arguments["city"] for c in calls] == ["Paris", "London"]


def test_sequential_sibling_calls_have_no_parallel_group() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        tool(2, 1, "first", 1, 10),
        tool(3, 1, "second", 10, 20),  # starts exactly when the first ends
    ]

    assert [c.parallel_group for c in only(spans).calls] == [None, None]


def test_overlap_chains_form_one_group_and_a_later_call_stays_alone() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        tool(2, 1, "a1", 1, 10),
        tool(3, 1, "a2", 9, 20),
        tool(4, 1, "a3", 19, 30),
        tool(5, 1, "b", 40, 50),
    ]

    assert [c.parallel_group for c in only(spans).calls] == [0, 0, 0, None]


def test_overlapping_calls_of_different_parents_are_not_parallel() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        span(2, 1, SpanRole.OTHER, 1, 50),
        tool(3, 2, "inner", 5, 20),
        tool(4, 1, "outer", 5, 20),
    ]

    assert [c.parallel_group for c in only(spans).calls] == [None, None]


def test_calls_one_output_requested_are_parallel_however_they_ran() -> None:
    # LangGraph: each requested call runs in a node span of its own, one after the other.
    spans = [
        agent(1, None, "weather-bot", 0, 100),
        llm(
            2,
            1,
            1,
            10,
            ask("get_weather", "c1", {"city": "Paris"}, 0),
            ask("get_weather", "c2", {}, 1),
        ),
        span(3, 1, SpanRole.OTHER, 11, 20),
        tool(4, 3, "get_weather", 12, 14, call_id="c1"),
        span(5, 1, SpanRole.OTHER, 11, 20),
        tool(6, 5, "get_weather", 15, 17, call_id="c2"),
        llm(7, 1, 21, 30, ask("get_weather", "c3", {}, 0)),
        tool(8, 1, "get_weather", 31, 32, call_id="c3"),
    ]

    assert [c.parallel_group for c in only(spans).calls] == [0, 0, None]


def test_an_overlap_and_a_request_that_share_a_call_are_one_group() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("b", "cb", {}, 0), ask("c", "cc", {}, 1)),
        tool(3, 1, "a", 11, 30),  # no request: overlaps b
        tool(4, 1, "b", 12, 13, call_id="cb"),
        tool(5, 1, "c", 40, 41, call_id="cc"),  # sequential, but requested with b
    ]

    assert [(c.tool_name, c.parallel_group) for c in only(spans).calls] == [
        ("a", 0),
        ("b", 0),
        ("c", 0),
    ]


def test_lookup_requested_by_an_earlier_model_output_is_not_parallel_with_the_refund() -> None:
    """The model asked for ``lookup_order(A1)`` in one output, read its result, and asked for
    ``issue_refund(A1)`` in the *next* output (a second model call between them, each
    request with its own call id). The lookup's tool span ends a little after the refund's
    starts (a tool span ended late, or a tool service whose clock runs ahead of the
    agent's). Unioned into one ``parallel_group`` by the overlap alone, although the
    requests prove they were sequential, the lookup could not inform the refund, and
    ``safety`` paged MISSING_VERIFICATION_STEP (critical) on a correctly verified refund.
    Overlap is the fallback for producers that record no requests: where both calls were
    joined to requests of model calls one after the other, those requests decide."""
    spans = [
        agent(1, None, "refund-bot", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "call_1", '{"order_id": "A1"}')),
        tool(3, 1, "lookup_order", 11, 40, call_id="call_1", arguments='{"order_id": "A1"}'),
        llm(4, 1, 20, 29, ask("issue_refund", "call_2", '{"order_id": "A1"}')),
        tool(5, 1, "issue_refund", 30, 50, call_id="call_2", arguments='{"order_id": "A1"}'),
    ]

    assert [(c.tool_name, c.parallel_group) for c in only(spans).calls] == [
        ("lookup_order", None),
        ("issue_refund", None),
    ]


def test_overlapping_calls_of_concurrent_model_calls_stay_parallel() -> None:
    # Two model calls at once (LangGraph branches): their outputs' calls overlap in time.
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("a", "ca", {})),
        llm(3, 1, 2, 12, ask("b", "cb", {})),
        tool(4, 1, "a", 13, 30, call_id="ca"),
        tool(5, 1, "b", 14, 20, call_id="cb"),
    ]

    assert [c.parallel_group for c in only(spans).calls] == [0, 0]


def test_a_call_requested_later_starts_a_group_of_its_own_with_what_overlaps_it() -> None:
    # ``a`` ran late, past ``b``'s request; ``c``, which nothing requested, overlaps ``b``.
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("a", "ca", {})),
        tool(3, 1, "a", 11, 40, call_id="ca"),
        llm(4, 1, 20, 29, ask("b", "cb", {})),
        tool(5, 1, "b", 30, 50, call_id="cb"),
        tool(6, 1, "c", 45, 60),
    ]

    assert [(c.tool_name, c.parallel_group) for c in only(spans).calls] == [
        ("a", None),
        ("b", 1),
        ("c", 1),
    ]


def late_lookup_spans() -> list[SpanRecord]:
    # lookup_order: requested by the first output, its tool span runs long (11-80 ms).
    # get_weather: requested by the second output (20-29 ms), runs 30-50 ms.
    # issue_refund: a tool span no recorded output requested (its model span lost, or a
    # second instrumentation's tool), running 55-60 ms: inside the lookup's execution.
    return [
        agent(1, None, "refund-bot", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "call_1", '{"order_id": "A1"}')),
        tool(3, 1, "lookup_order", 11, 80, call_id="call_1", arguments='{"order_id": "A1"}'),
        llm(4, 1, 20, 29, ask("get_weather", "call_2", '{"city": "Paris"}')),
        tool(5, 1, "get_weather", 30, 50, call_id="call_2", arguments='{"city": "Paris"}'),
        tool(6, 1, "issue_refund", 55, 60, arguments='{"order_id": "A1"}'),
    ]


def test_a_call_without_a_request_stays_parallel_with_the_call_it_overlaps() -> None:
    """The commit's rule: overlap stays the grouping of calls without requests; only two
    calls whose *requests* came from model calls one after the other are split. Here only
    ``get_weather``'s request post-dates ``lookup_order``'s. ``issue_refund`` has no request
    and runs entirely inside ``lookup_order``'s execution (55-60 ms within 11-80 ms), yet the
    sweep replaced the lookup's component with ``get_weather``'s when that call arrived, so
    ``issue_refund`` (starting after ``get_weather`` ended) is grouped with nothing. At
    9752a75 all three were one group. The requests say nothing that separates the refund
    from the lookup: the grouping is lost to sweep bookkeeping, not to evidence."""
    calls = only(late_lookup_spans()).calls
    by_name = {c.tool_name: c.parallel_group for c in calls}
    assert by_name["issue_refund"] is not None
    assert by_name["issue_refund"] == by_name["lookup_order"]


def test_refund_running_inside_the_lookup_still_pages() -> None:
    """Harm: the refund ran while the lookup was still running (its result could not have
    informed it). At 9752a75 they shared a parallel group and safety paged
    MISSING_VERIFICATION_STEP (critical in the shipped alert rules). After 1bdf34c the
    lookup reads as an earlier, finished verification: the page is silently lost."""
    trace = only(late_lookup_spans())
    policy = PolicySettings.model_validate(
        {
            "dangerous_tools": ["issue_refund"],
            "verification_tools": ["lookup_order"],
            "bindings": {"issue_refund.order_id": "lookup_order.order_id"},
        }
    )
    result = Safety(SafetySettings(), policy)(trace, Reference())
    assert [f.category for f in result.findings] == [Category.MISSING_VERIFICATION_STEP]


def test_calls_of_concurrent_model_calls_stay_parallel_whatever_a_third_branch_does() -> None:
    """The commit keeps overlap as the grouping "of concurrent model calls' calls" (its own
    test: two LangGraph branches' model calls at once). Three branches: model calls
    ``a`` (1-10 ms), ``b`` (2-30 ms) and ``c`` (15-25 ms). ``a`` and ``b`` ran at once, and
    so did their tools (``a`` 11-50 ms, ``b`` 31-50 ms). ``c``'s model call began after
    ``a``'s ended, so ``c``'s tool (26-50 ms) splits from ``a``'s, as the commit intends;
    but the sweep then forgets ``a``'s component, and ``b``'s tool joins ``c``'s alone.
    ``a`` and ``b``, concurrent model calls whose tools overlap, are not one group (they
    were at 9752a75): order, structure and safety read ``b`` as issued after ``a``'s result,
    which did not exist yet."""
    spans = [
        agent(1, None, "fan-out", 0, 100),
        llm(2, 1, 1, 10, ask("a", "ca", {})),
        llm(3, 1, 2, 30, ask("b", "cb", {})),
        llm(4, 1, 15, 25, ask("c", "cc", {})),
        tool(5, 1, "a", 11, 50, call_id="ca"),
        tool(6, 1, "c", 26, 50, call_id="cc"),
        tool(7, 1, "b", 31, 50, call_id="cb"),
    ]
    groups = {c.tool_name: c.parallel_group for c in only(spans).calls}
    assert groups["a"] is not None and groups["a"] == groups["b"]


@pytest.mark.parametrize(
    ("executed", "requested", "arguments", "error"),
    [
        ("A-1001", '{"order_id": "A-1001"}', {"order_id": "A-1001"}, None),  # LangChain input
        ("42", {"n": 42}, {"n": 42}, None),
        ('{"order_id": "B"}', {"order_id": "A"}, {"order_id": "B"}, None),  # executed wins
        ("A-1001", "A-1001", "A-1001", "arguments are not valid JSON"),
        ("A-1001", None, "A-1001", "arguments are not valid JSON"),
    ],
)
def test_a_requested_object_wins_over_an_executed_input_that_is_not_one(
    executed: str, requested: Any, arguments: Any, error: str | None
) -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("lookup_order", "c1", requested, 0)),
        tool(3, 1, "lookup_order", 11, 12, call_id="c1", arguments=executed),
    ]

    (call,) = only(spans).calls
    assert (call.arguments, call.arguments_error) == (arguments, error)


def test_call_seen_only_in_llm_output_is_a_call() -> None:
    spans = [
        agent(1, None, "refund-bot", 0, 100),
        llm(2, 1, 1, 10, ask("web_search", "call_ws", '{"query": "refund policy"}')),
        llm(3, 1, 11, 20, output_text="Refunds take 5 days."),
    ]

    (call,) = only(spans).calls
    assert call == ToolCall(
        tool_name="web_search",
        raw_name="web_search",
        arguments={"query": "refund policy"},
        arguments_error=None,
        call_id="call_ws",
        parent_call_id=None,
        sequence_index=0,
        parallel_group=None,
        status=CallStatus.OK,
        error_type=None,
        agent="refund-bot",
        span_id=None,
        start_ns=10 * MS,
        end_ns=None,
        service="refund-agent",  # never run: the model call's that asked for it
    )


def test_requested_only_calls_of_one_output_form_a_parallel_group() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("web_search", "c1", {}, 0), ask("file_search", "c2", {}, 1)),
        llm(3, 1, 11, 20, ask("web_search", "c3", {}, 0)),
    ]

    calls = only(spans).calls
    assert [(c.tool_name, c.parallel_group) for c in calls] == [
        ("web_search", 0),
        ("file_search", 0),
        ("web_search", None),
    ]


def test_a_call_the_output_marks_hosted_stays_hosted_with_or_without_a_span() -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        llm(2, 1, 1, 10, ask("web_search", "c1", {}, 0, hosted=True), ask("lookup", "c2", {}, 1)),
        llm(3, 1, 11, 20, ask("code_interpreter", "c3", {}, 0, hosted=True)),
        tool(4, 1, "code_interpreter", 21, 30, call_id="c3"),
    ]

    calls = only(spans).calls
    assert [(c.tool_name, c.hosted, c.span_id) for c in calls] == [
        ("web_search", True, None),
        ("lookup", False, None),
        ("code_interpreter", True, hexid(4)),
    ]


# Parents of the generated tool spans: the agent (1), two plain spans (2, 3) and a wrapper (4)
# under span 2, whose tools count as span 2's.
_CALL_PARENT = {1: 1, 2: 2, 3: 3, 4: 2}


def _groups_by_definition(calls: tuple[ToolCall, ...], parents: dict[str, int]) -> list[int | None]:
    """Parallel groups from the definition, pair by pair: of two executed calls of one
    parent, the one earlier by (start, end, sequence) overlaps the other when the other
    starts before it ends; groups are the connected components, named by their first call."""
    group = list(range(len(calls)))

    def root(i: int) -> int:
        return i if group[i] == i else root(group[i])

    def order(c: ToolCall) -> tuple[int, int, int]:
        assert c.end_ns is not None
        return (c.start_ns, c.end_ns, c.sequence_index)

    for a in calls:
        for b in calls:
            same_parent = parents[a.span_id or ""] == parents[b.span_id or ""]
            if same_parent and order(a) < order(b) and b.start_ns < (a.end_ns or 0):
                low, high = sorted((root(a.sequence_index), root(b.sequence_index)))
                group[high] = low
    roots = [root(i) for i in range(len(calls))]
    return [r if roots.count(r) > 1 else None for r in roots]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(_CALL_PARENT)), st.integers(0, 20), st.integers(0, 8)),
        min_size=1,
        max_size=9,
    )
)
def test_parallel_groups_are_the_overlap_components_of_each_parent(
    tools: list[tuple[int, int, int]],
) -> None:
    spans = [
        agent(1, None, "a", 0, 100),
        span(2, 1, SpanRole.OTHER, 0, 100),
        span(3, 1, SpanRole.OTHER, 0, 100),
        span(4, 2, SpanRole.WRAPPER, 0, 100),
    ]
    spans += [
        tool(10 + n, parent, f"t{n}", start, start + length)
        for n, (parent, start, length) in enumerate(tools)
    ]
    parents = {hexid(10 + n): _CALL_PARENT[parent] for n, (parent, _, _) in enumerate(tools)}

    calls = only(spans).calls

    assert [c.parallel_group for c in calls] == _groups_by_definition(calls, parents)


@st.composite
def drafts(draw: st.DrawFn) -> list[_Draft]:
    """Executions and requests, with starts and requesting outputs that often coincide."""
    made: list[_Draft] = []
    for n in range(draw(st.integers(0, 8))):
        start = draw(st.integers(0, 3))
        if draw(st.booleans()):
            made.append(_Draft(tool(n + 1, None, "t", start, start + 1), None))
            continue
        output = llm(100 + draw(st.integers(0, 2)), None, draw(st.integers(0, 2)), start)
        request = _Request(output, ask("t", None, None, draw(st.integers(0, 3))), "t", n)
        made.append(_Draft(None, request))
    return made


@settings(max_examples=300, deadline=None)
@given(drafts())
def test_calls_in_time_order_are_told_apart_from_calls_that_need_a_sort(
    made: list[_Draft],
) -> None:
    ordered = [id(d) for d in sorted(made, key=_time_key)] == [id(d) for d in made]
    assert _sorted_in_time(made) is ordered
