"""What earlier runs of a conversation verified (``policy.verification_scope: conversation``).

A chat agent often looks an order up in one turn and, after the user says yes, refunds it in
the next: two runs (two traces) of one conversation (``gen_ai.conversation.id`` or
``session.id`` on the agent span). Judged run by run, the refund has no earlier verification
and pages ``MISSING_VERIFICATION_STEP``. With the conversation scope the engine remembers the
successful verification calls of each conversation's runs for ``ttl_ns`` and hands them to
the evaluators as ``Reference.earlier``: the safety evaluator counts them as made before every
call of the run.

Bounded: at most ``max_conversations`` conversations (the least recently seen forgotten
first) and ``max_calls`` calls each (the oldest first). Not thread-safe: the engine's loop
alone calls it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from toolwatch.model import CallStatus, ToolCall
from toolwatch.names import NameNormalizer

__all__ = ["ConversationMemory", "ConversationScope"]

MAX_CONVERSATIONS: Final = 10_000
MAX_CALLS: Final = 64


@dataclass(frozen=True, slots=True)
class ConversationScope:
    """How long a conversation's verifications count (``ttl_ns``), and which tools verify:
    the policy's verification tools and bound verification tools, normalized."""

    ttl_ns: int
    verifiers: frozenset[str]


class ConversationMemory:
    """The successful verification calls of recent runs, by conversation id."""

    def __init__(
        self,
        scope: ConversationScope,
        normalize: NameNormalizer,
        max_conversations: int = MAX_CONVERSATIONS,
        max_calls: int = MAX_CALLS,
    ) -> None:
        self.scope = scope
        self.normalize = normalize
        self._max_conversations = max_conversations
        self._max_calls = max_calls
        self._calls: OrderedDict[str, deque[tuple[int, ToolCall]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._calls)

    def earlier(self, conversation: str | None, now: int) -> tuple[ToolCall, ...]:
        """The verification calls of the conversation's earlier runs, made less than the
        scope's ``ttl_ns`` before ``now``."""
        if conversation is None:
            return ()
        kept = self._calls.get(conversation)
        if kept is None:
            return ()
        oldest = now - self.scope.ttl_ns
        while kept and kept[0][0] < oldest:
            kept.popleft()
        if not kept:
            del self._calls[conversation]
            return ()
        return tuple(call for _, call in kept)

    def remember(self, conversation: str | None, calls: Iterable[ToolCall], now: int) -> None:
        """Keep the run's successful calls of a verification tool for its conversation."""
        if conversation is None:
            return
        verifiers, normalize = self.scope.verifiers, self.normalize
        made = [
            c for c in calls if c.status is CallStatus.OK and normalize(c.tool_name) in verifiers
        ]
        if not made:
            return
        kept = self._calls.get(conversation)
        if kept is None:
            kept = self._calls[conversation] = deque(maxlen=self._max_calls)
            while len(self._calls) > self._max_conversations:
                self._calls.popitem(last=False)
        else:
            self._calls.move_to_end(conversation)
        kept.extend((now, call) for call in made)
