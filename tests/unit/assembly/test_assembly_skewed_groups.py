"""Parallel groups of a run whose calls two clocks timed: each execution is grouped on the
clock its call is ordered by.

Service ``desk`` runs the agent, its model calls and some tools; a tool service on another
host (``payments``, its clock a second behind desk's, no client span recorded: its spans are
children of the agent span) runs the refund the model asked for. The refund is ordered in
the window its request allows (``clocks._requested_windows``), but grouping read the tool
spans' raw [start, end]: the refund's, on payments' clock, overlapped desk's slow call of the
turn before, and the two read as issued together (one ``parallel_group``): a lookup that
verified the refund no longer did, and an order drift hid in the group.
"""

from __future__ import annotations

from assembly_support import MS, agent, ask, llm, only, safety, tool

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.order import Order
from toolwatch.evaluation.settings import OrderSettings, StructureSettings
from toolwatch.evaluation.structure import ToolTraceStructure
from toolwatch.model import Category, SpanRecord
from toolwatch.model_evaluation import ExpectedCall, GoldenCase
from toolwatch.model_traces import ToolTrace
from toolwatch.names import NameNormalizer

A1 = {"order_id": "A-1"}
A1_JSON = '{"order_id": "A-1"}'
BEHIND = -1_000  # ms payments' clock is off desk's


def refund_after_a_slow_call(first: str, skew: int) -> list[SpanRecord]:
    """Turn 1's output was streamed (its request not recorded); desk runs ``first`` for A-1
    itself, slowly (210-1,410 ms). Turn 2 (1,500-1,600 ms) asks for the refund of A-1, which
    payments runs at 1,610-1,690 ms on desk's clock, recorded ``skew`` ms off. Then the
    model answers."""
    return [
        agent(1, None, "refund-bot", 0, 2_000, service="desk"),
        llm(11, 1, 110, 200, service="desk"),  # streamed: its request not recorded
        tool(12, 1, first, 210, 1_410, service="desk", arguments=A1_JSON),
        llm(21, 1, 1_500, 1_600, ask("issue_refund", "c_r", A1), service="desk"),
        tool(
            22,
            1,
            "issue_refund",
            1_610 + skew,
            1_690 + skew,
            call_id="c_r",
            service="payments",
            arguments=A1_JSON,
        ),
        llm(31, 1, 1_800, 1_900, service="desk"),  # answers
    ]


def groups(trace: ToolTrace) -> list[tuple[str, int | None]]:
    return [(c.tool_name, c.parallel_group) for c in trace.calls]


def test_a_refund_on_a_clock_behind_is_verified_by_the_slow_lookup_before_it() -> None:
    """Was: the refund's span, recorded at 610-690 ms, overlapped the lookup (210-1,410 ms)
    and joined it in one group, so the lookup "was issued alongside" the refund and did not
    verify it: a MISSING_VERIFICATION_STEP page on a run that looked A-1 up, then refunded
    it. Ordered (and now grouped) from 1,600 ms, when the model asked, it ran after."""
    trace = only(refund_after_a_slow_call("lookup_order", BEHIND))

    assert groups(trace) == [("lookup_order", None), ("issue_refund", None)]
    assert safety(trace) == []


def test_recorded_times_are_kept_when_grouping_reads_the_moved_interval() -> None:
    trace = only(refund_after_a_slow_call("lookup_order", BEHIND))

    refund = trace.calls[1]
    assert (refund.start_ns, refund.end_ns) == ((1_610 + BEHIND) * MS, (1_690 + BEHIND) * MS)


def test_an_order_drift_across_a_skewed_host_is_not_hidden_in_a_group() -> None:
    """The case expects the refund, then the customer told. The run told the customer first
    (a drift), then refunded on payments' clock a second behind. Was: read as one group,
    the two could run in any order, and the drift was not raised."""
    trace = only(refund_after_a_slow_call("notify_customer", BEHIND))
    expected = GoldenCase(
        case_id="refund-then-notify",
        expected_tools=(ExpectedCall("issue_refund"), ExpectedCall("notify_customer")),
    )

    result = Order(OrderSettings(), NameNormalizer())(trace, Reference(expected=expected))

    assert result is not None
    assert [f.category for f in result.findings] == [Category.TOOL_ORDER_DRIFT]


def test_a_run_on_a_skewed_host_has_the_parallelism_of_the_same_run_in_step() -> None:
    """A shadow pair: the source's payments host in step with desk, the candidate's a second
    behind; the same calls, one after the other. Was: the candidate read as using parallel
    calls and the source not, a TOOL_TRACE_STRUCTURE_DRIFT on identical runs."""
    source = only(refund_after_a_slow_call("lookup_order", 0))
    candidate = only(refund_after_a_slow_call("lookup_order", BEHIND))
    evaluator = ToolTraceStructure(
        StructureSettings.model_validate({"against": "source"}), NameNormalizer()
    )

    result = evaluator(candidate, Reference(source=source))

    assert result is not None
    assert result.findings == ()
    assert groups(candidate) == groups(source)


def test_a_call_of_the_models_own_service_keeps_grouping_on_its_recorded_times() -> None:
    """One clock: a refund desk itself ran at 610-690 ms, inside the lookup, ran alongside
    it, whatever the model's requests say (only another service's span is moved)."""
    spans = refund_after_a_slow_call("lookup_order", BEHIND)
    spans[4] = tool(22, 1, "issue_refund", 610, 690, call_id="c_r", service="desk")
    trace = only(spans)

    assert [c.parallel_group for c in trace.calls] == [0, 0]


def refund_alongside_a_notice(skew: int) -> list[SpanRecord]:
    """Turn 2 asks for the refund of A-1, which payments runs at 1,610-1,690 ms on desk's
    clock, recorded ``skew`` ms off; meanwhile desk tells the customer itself (a tool span
    no model output asked for, 1,610-1,700 ms)."""
    spans = refund_after_a_slow_call("lookup_order", skew)
    spans[2] = tool(12, 1, "lookup_order", 210, 240, service="desk", arguments=A1_JSON)
    spans.append(tool(40, 1, "notify_customer", 1_610, 1_700, service="desk"))
    return spans


def test_a_refund_on_a_clock_behind_still_joins_the_call_it_ran_alongside() -> None:
    """Was: recorded at 610-690 ms, the refund did not overlap the notice desk sent while
    payments refunded, and the candidate read as making no parallel calls where its source,
    the same run with payments in step, did: a TOOL_TRACE_STRUCTURE_DRIFT on identical
    runs."""
    source = only(refund_alongside_a_notice(0))
    candidate = only(refund_alongside_a_notice(BEHIND))
    evaluator = ToolTraceStructure(
        StructureSettings.model_validate({"against": "source"}), NameNormalizer()
    )

    result = evaluator(candidate, Reference(source=source))

    assert groups(source) == [("lookup_order", None), ("issue_refund", 1), ("notify_customer", 1)]
    assert groups(candidate) == groups(source)
    assert result is not None
    assert result.findings == ()
