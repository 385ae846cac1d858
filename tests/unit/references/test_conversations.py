"""ConversationMemory: what a conversation's earlier runs verified, for how long, bounded."""

from __future__ import annotations

from tests import factories
from toolwatch.model import CallStatus, ToolCall
from toolwatch.names import NameNormalizer
from toolwatch.references.conversations import ConversationMemory, ConversationScope

SECOND = 1_000_000_000
SCOPE = ConversationScope(ttl_ns=60 * SECOND, verifiers=frozenset({"lookup_order"}))


def lookup(order: str, ok: bool = True, name: str = "lookup_order") -> ToolCall:
    status = CallStatus.OK if ok else CallStatus.ERROR
    return factories.tool_call(tool_name=name, arguments={"order_id": order}, status=status)


def memory(max_conversations: int = 10, max_calls: int = 4) -> ConversationMemory:
    return ConversationMemory(SCOPE, NameNormalizer(), max_conversations, max_calls)


def orders(calls: tuple[ToolCall, ...]) -> list[str]:
    return [call.arguments["order_id"] for call in calls]


def test_a_conversations_successful_verifications_count_until_their_ttl() -> None:
    kept = memory()
    kept.remember("c1", [lookup("A1"), lookup("X", ok=False), factories.tool_call()], 0)
    assert orders(kept.earlier("c1", 60 * SECOND)) == ["A1"]  # only successful verifiers
    assert kept.earlier("c2", SECOND) == ()
    assert kept.earlier(None, SECOND) == ()
    assert kept.earlier("c1", 60 * SECOND + 1) == ()  # expired, and forgotten
    assert len(kept) == 0


def test_names_are_normalized_as_the_policy_names_them() -> None:
    kept = memory()
    kept.remember("c1", [lookup("A1", name=" Lookup_Order ")], 0)
    assert orders(kept.earlier("c1", 0)) == ["A1"]


def test_conversations_and_their_calls_are_bounded_least_recent_first_out() -> None:
    kept = memory(max_conversations=2, max_calls=2)
    kept.remember("c1", [lookup("A1"), lookup("A2"), lookup("A3")], 0)
    kept.remember("c2", [lookup("B1")], 0)
    kept.remember("c1", [lookup("A4")], 1)  # c1 seen last: c2 is the least recent
    kept.remember("c3", [lookup("C1")], 2)
    assert orders(kept.earlier("c1", 2)) == ["A3", "A4"]
    assert kept.earlier("c2", 2) == ()
    assert orders(kept.earlier("c3", 2)) == ["C1"]
    assert len(kept) == 2
