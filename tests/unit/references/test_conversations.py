"""ConversationMemory: what a conversation's earlier runs verified, when, bounded."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest

from tests import factories
from tests.memory import retained
from toolwatch.config import Config
from toolwatch.engine_setup import conversation_scope
from toolwatch.metrics import NoopMetrics
from toolwatch.model import CallStatus
from toolwatch.model_traces import ToolCall, ToolTrace, Verified
from toolwatch.names import NameNormalizer
from toolwatch.references.conversations import (
    CONVERSATION_BYTES,
    DEFAULT_MAX_BYTES,
    MAX_CALLS,
    MAX_CONVERSATIONS,
    MAX_VALUE_LENGTH,
    ConversationMemory,
    ConversationScope,
    record_bytes,
)

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
    kept.remember(run("c1", lookup(None)))  # a run that records no lookup's arguments
    kept.remember(run("c1", lookup("x" * 257), lookup("  ")))
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


class Evictions(NoopMetrics):
    def __init__(self) -> None:
        self.bounds: Counter[str] = Counter()

    def conversation_evicted(self, reason: str) -> None:
        self.bounds[reason] += 1


def full(
    conversation: str, n: int, length: int = MAX_VALUE_LENGTH, calls: int = MAX_CALLS
) -> ToolTrace:
    """A run that verified ``calls`` orders of ``length`` characters (by default the most
    a conversation keeps, each as long as is kept)."""
    orders = (f"{n:06d}{k:04d}".ljust(length, "0") for k in range(calls))
    return run(conversation, *(lookup(order, end=k + 1) for k, order in enumerate(orders)))


def bounded(max_bytes: int, max_conversations: int = 10) -> tuple[ConversationMemory, Evictions]:
    evictions = Evictions()
    scope = dataclasses.replace(SCOPE, max_bytes=max_bytes)
    kept = ConversationMemory(scope, NameNormalizer(), max_conversations, metrics=evictions)
    return kept, evictions


def test_a_long_conversation_id_is_kept_as_a_digest_and_told_apart() -> None:
    """A conversation id is an attribute value of up to 64 KiB: kept whole as the key, one
    lookup's conversation held 66 KB (637 MiB at 10,000 conversations)."""
    kept = memory(max_conversations=200, max_calls=4)

    def long_id(n: int) -> str:  # made anew each time: the runs and their ids are let go
        return "c".ljust(65_536, "x") + f"{n:03d}"  # apart at the end only

    held = retained(lambda: [kept.remember(run(long_id(n), lookup(f"A{n}"))) for n in range(100)])

    assert held / 100 <= 4096, f"{held / 100:,.0f} bytes a conversation"
    assert values(kept.earlier(long_id(7), 2 * SECOND)) == [(("order_id", "A7"),)]


@pytest.mark.parametrize("length", [MAX_VALUE_LENGTH, 8])
@pytest.mark.parametrize("calls", [MAX_CALLS, 1])
def test_what_conversations_hold_is_counted_on_the_safe_side(length: int, calls: int) -> None:
    """Counted as ``policy.conversation_max_bytes`` bounds it: at least what is held."""
    kept, _ = bounded(DEFAULT_MAX_BYTES, max_conversations=MAX_CONVERSATIONS)
    held = retained(lambda: [kept.remember(full(f"c{n}", n, length, calls)) for n in range(200)])

    assert len(kept) == 200
    assert held <= kept.held_bytes, f"{held:,} held, {kept.held_bytes:,} counted"


def test_full_conversations_past_max_bytes_hold_no_more_than_it() -> None:
    """Filled as the policy row documents the count bounds (64 verifications of one bound
    field of 256 characters each), 10,000 conversations held 297 MiB, in no term of the
    docs/deployment.md's memory sum: ``max_bytes`` forgets the least recently used beyond it."""
    max_bytes = 4 * 2**20
    kept, evictions = bounded(max_bytes, max_conversations=MAX_CONVERSATIONS)
    held = retained(lambda: [kept.remember(full(f"conv-{n:08d}", n)) for n in range(500)])

    assert held <= kept.held_bytes <= max_bytes, f"{held:,} held, {kept.held_bytes:,} counted"
    assert evictions.bounds == Counter({"conversation_max_bytes": 500 - len(kept)})
    assert kept.earlier("conv-00000499", 2 * SECOND)  # the latest are kept
    assert kept.earlier("conv-00000000", 2 * SECOND) == ()


def test_conversations_are_forgotten_least_recent_first_and_counted_by_bound() -> None:
    one = CONVERSATION_BYTES + record_bytes(Verified("lookup_order", (("order_id", "A1"),), 1))
    kept, evictions = bounded(max_bytes=2 * one, max_conversations=3)
    for conversation in ("c1", "c2"):
        kept.remember(run(conversation, lookup("A1")))
    kept.earlier("c1", 2 * SECOND)  # c1 used last: c2 is the least recent
    kept.remember(run("c3", lookup("A1")))
    assert (kept.earlier("c2", 2 * SECOND), len(kept), kept.held_bytes) == ((), 2, 2 * one)
    assert evictions.bounds == Counter({"conversation_max_bytes": 1})

    kept, evictions = bounded(max_bytes=DEFAULT_MAX_BYTES, max_conversations=2)
    for conversation in ("c1", "c2", "c3"):
        kept.remember(run(conversation, lookup("A1")))
    assert evictions.bounds == Counter({"max_conversations": 1})


def test_a_conversation_larger_than_max_bytes_alone_is_kept_by_itself() -> None:
    kept, evictions = bounded(max_bytes=1)
    kept.remember(run("c1", lookup("A1")))
    kept.remember(run("c2", lookup("A1"), lookup("A2")))
    assert (len(kept), values(kept.earlier("c2", 2 * SECOND))[1]) == (1, (("order_id", "A2"),))
    assert evictions.bounds == Counter({"conversation_max_bytes": 1})


def test_records_dropped_past_max_calls_are_no_longer_counted() -> None:
    kept, _ = bounded(DEFAULT_MAX_BYTES)
    kept.remember(full("c1", 1))
    counted = kept.held_bytes
    kept.remember(full("c1", 2))  # 64 records of the same sizes replace the first 64
    assert kept.held_bytes == counted


def test_a_reload_that_lowers_max_bytes_forgets_at_once() -> None:
    kept, evictions = bounded(DEFAULT_MAX_BYTES)
    for conversation in ("c1", "c2", "c3"):
        kept.remember(run(conversation, lookup("A1")))
    kept.rescope(dataclasses.replace(SCOPE, max_bytes=1), NameNormalizer())
    assert len(kept) == 1 and kept.earlier("c3", 2 * SECOND)
    assert evictions.bounds == Counter({"conversation_max_bytes": 2})


def test_the_policy_sets_the_bound() -> None:
    config = Config.model_validate(
        {"policy": {"verification_scope": "conversation", "conversation_max_bytes": 12345}}
    )
    scope = conversation_scope(config)
    assert scope is not None and scope.max_bytes == 12345


def test_a_record_is_counted_as_documented() -> None:
    """docs/deployment.md, Memory: a record of one value is counted 354 bytes and the characters
    of its tool's name and value, 376 for a lookup of a 10-character order id."""
    record = Verified("lookup_order", (("order_id", "A123456789"),), 0)
    assert record_bytes(record) == 354 + len("lookup_order") + len("A123456789") == 376


def test_a_success_that_lost_its_arguments_keeps_no_value_where_the_run_records_them() -> None:
    """A lookup without arguments in a run whose other lookups carry theirs (a retry whose
    request was not paired) verified no value we know: kept as a success of the tool, of
    no value (as ``safety`` reads it within its run), not as one of any value. A run that
    records no lookup's arguments keeps "not recorded"."""
    kept = memory()
    kept.remember(run("c1", lookup("A1", ok=False), lookup(None, span_id="s2")))
    kept.remember(run("c2", lookup(None, ok=False), lookup(None, span_id="s2")))
    assert values(kept.earlier("c1", 2 * SECOND)) == [()]
    assert values(kept.earlier("c2", 2 * SECOND)) == [(("order_id", None),)]


def test_a_service_that_records_no_arguments_keeps_not_recorded_beside_one_that_does() -> None:
    """By producer (the call's service), as ``safety`` reads it: desk's lookup carries its
    arguments, billing's (content capture off) none, so billing's success stays one of any
    value, while desk's argument-less one, of another agent of desk, lost its own."""
    kept = memory()
    kept.remember(
        run(
            "c1",
            lookup("A1", agent="desk", service="desk"),
            lookup(None, agent="desk", service="billing", span_id="s2"),
            lookup(None, agent="refunds", service="desk", span_id="s3"),
        )
    )
    assert values(kept.earlier("c1", 2 * SECOND)) == [
        (("order_id", "A1"),),
        (("order_id", None),),
        (),
    ]
