"""ConversationMemory: what a conversation's earlier runs verified, when, bounded."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests import factories
from toolwatch.model import CallStatus, ToolCall, ToolTrace, Verified
from toolwatch.names import NameNormalizer
from toolwatch.references.conversations import ConversationMemory, ConversationScope

SECOND = 1_000_000_000
SCOPE = ConversationScope(
    ttl_ns=60 * SECOND,
    verifiers=frozenset({"lookup_order"}),
    fields={"lookup_order": frozenset({"order_id"})},
)


def lookup(order: Any, end: int = SECOND, ok: bool = True, **kw: Any) -> ToolCall:
    kw.setdefault("tool_name", "lookup_order")
    kw.setdefault("span_id", f"s{order}")
    return factories.tool_call(
        arguments=None if order is None else {"order_id": order},
        status=CallStatus.OK if ok else CallStatus.ERROR,
        end_ns=end,
        **kw,
    )


def run(conversation: str | None, *calls: ToolCall, start: int = 0) -> ToolTrace:
    return factories.tool_trace(
        conversation_id=conversation, calls=calls, start_ns=start, end_ns=start + SECOND
    )


def memory(max_conversations: int = 10, max_calls: int = 4) -> ConversationMemory:
    return ConversationMemory(SCOPE, NameNormalizer(), max_conversations, max_calls)


def values(kept: tuple[Verified, ...]) -> list[tuple[tuple[str, str | None], ...]]:
    return [v.values for v in kept]


def test_what_ended_before_a_run_started_counts_for_the_ttl() -> None:
    kept = memory()
    kept.remember(run("c1", lookup("A1", end=10 * SECOND)))
    assert values(kept.earlier("c1", 10 * SECOND)) == [(("order_id", "A1"),)]
    assert kept.earlier("c1", 9 * SECOND) == ()  # made after the run started
    assert kept.earlier("c1", 70 * SECOND + 1) == ()  # past the ttl
    assert kept.earlier("c2", 10 * SECOND) == ()
    assert kept.earlier(None, 10 * SECOND) == ()


def test_only_successful_verifications_that_ran_are_kept() -> None:
    kept = memory()
    kept.remember(
        run(
            "c1",
            lookup("A1", ok=False),
            lookup("A2", span_id=None),  # requested, never run: A3's call has a span
            lookup("A3"),
            factories.tool_call(tool_name="search", arguments={"order_id": "A4"}, end_ns=1),
        )
    )
    assert values(kept.earlier("c1", 2 * SECOND)) == [(("order_id", "A3"),)]


def test_a_requested_verification_without_its_span_counts_in_an_unfinished_run() -> None:
    """A run evaluated before it ended (``timed_out``): the lookup of A2 the model asked for
    may have run, its span still to come, as ``safety`` reads it within the run. A run that
    ended but lost spans (``span_limit``) is read as ended, as ``safety`` reads it too."""
    calls = (lookup("A2", span_id=None), lookup("A3"))
    for reason, kept_values in (
        ("timed_out", [(("order_id", "A2"),), (("order_id", "A3"),)]),
        ("span_limit", [(("order_id", "A3"),)]),
    ):
        kept = memory()
        incomplete = dataclasses.replace(
            run("c1", *calls), complete=False, incomplete_reason=reason
        )
        kept.remember(incomplete)
        assert values(kept.earlier("c1", 2 * SECOND)) == kept_values


def test_unrecorded_long_and_absent_values_are_told_apart() -> None:
    kept = memory()
    kept.remember(run("c1", lookup(None), lookup("x" * 257), lookup("  ")))
    assert values(kept.earlier("c1", 2 * SECOND)) == [
        (("order_id", None),),  # not recorded: it may have been of any order
        (),  # too long to keep: of no order the memory can name
        (),  # blank: of no order at all
    ]


def test_values_are_kept_as_safety_compares_them() -> None:
    """An order looked up as ``{"id": 12.0}`` in one turn is the order ``{"id": 12}``
    refunded in the next, as within a run."""
    kept = memory()
    kept.remember(run("c1", lookup({"id": 12.0, "shop": " s1"})))
    kept.remember(run("c2", lookup({"shop": "s1", "id": 12})))
    first, second = kept.earlier("c1", 2 * SECOND), kept.earlier("c2", 2 * SECOND)
    assert values(first) == values(second) == [(("order_id", '{"id": "12", "shop": "s1"}'),)]


def test_a_bound_field_through_an_array_is_kept_as_safety_reads_it() -> None:
    """A binding to ``lookup_order.orders.0`` reads the first order the lookup named, as
    ``entities.lookup`` does within a run: not "absent" (which would verify nothing)."""
    scope = ConversationScope(
        ttl_ns=SCOPE.ttl_ns,
        verifiers=SCOPE.verifiers,
        fields={"lookup_order": frozenset({"orders.0"})},
    )
    kept = ConversationMemory(scope, NameNormalizer())
    call = factories.tool_call(tool_name="lookup_order", arguments={"orders": ["A1"]}, end_ns=1)
    kept.remember(run("c1", call))
    assert values(kept.earlier("c1", 2 * SECOND)) == [(("orders.0", "A1"),)]


def test_names_are_normalized_as_the_policy_names_them() -> None:
    kept = memory()
    kept.remember(run("c1", lookup("A1", tool_name=" Lookup_Order ")))
    assert [v.tool for v in kept.earlier("c1", 2 * SECOND)] == ["lookup_order"]


def test_conversations_and_their_records_are_bounded_least_recent_first_out() -> None:
    kept = memory(max_conversations=2, max_calls=2)
    kept.remember(run("c1", lookup("A1"), lookup("A2"), lookup("A3")))
    kept.remember(run("c2", lookup("B1")))
    kept.earlier("c1", 2 * SECOND)  # c1 used last: c2 is the least recent
    kept.remember(run("c3", lookup("C1")))
    assert values(kept.earlier("c1", 2 * SECOND)) == [(("order_id", "A2"),), (("order_id", "A3"),)]
    assert kept.earlier("c2", 2 * SECOND) == ()
    assert len(kept) == 2
