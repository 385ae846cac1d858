"""What earlier runs of a conversation verified (``policy.verification_scope: conversation``).

A chat agent often looks an order up in one turn and, after the user says yes, refunds it in
the next: two runs (two traces) of one conversation (``gen_ai.conversation.id`` or
``session.id`` on the agent span). Judged run by run, the refund has no earlier verification
and pages ``MISSING_VERIFICATION_STEP``. With the conversation scope the engine keeps, for each
conversation, what its runs' successful verification calls verified (``Verified``: the tool
and the values of its bound fields, not the call) and hands the safety evaluator those that
ended before the run started, less than ``ttl_ns`` before (``Reference.earlier``): they count
as made before every call of the run. Times are the spans' own, so the order in which traces
complete does not matter. A call the model requested and the agent never ran (no span, while
another call of its tool has one, and not hosted) verifies nothing, as within a run: in a
complete run only (an incomplete one's span may be still to come, or lost).

Bounded: at most ``max_conversations`` conversations (the least recently used forgotten
first), ``max_calls`` records each (the oldest first), and values of at most
``MAX_VALUE_LENGTH`` characters (a longer one is not kept: that field verifies nothing).
Not thread-safe: the engine's loop alone calls it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from toolwatch.evaluation.base import never_ran, spanned_tools, unfinished
from toolwatch.evaluation.entities import entity_key, lookup, unrecorded
from toolwatch.model import CallStatus, ToolTrace, Verified
from toolwatch.names import NameNormalizer
from toolwatch.references.settings import ShadowSettings

__all__ = ["ConversationMemory", "ConversationScope"]

MAX_CONVERSATIONS: Final = 10_000
MAX_CALLS: Final = 64
MAX_VALUE_LENGTH: Final = 256


@dataclass(frozen=True, slots=True)
class ConversationScope:
    """How long a conversation's verifications count (``ttl_ns``), which tools verify (the
    policy's verification tools and bound verification tools, normalized) and the bound
    fields of each (``fields``); ``shadow``, to tell the runs of a shadow target (a candidate
    model's copy of a request, whose lookups production never made), which are not kept."""

    ttl_ns: int
    verifiers: frozenset[str]
    fields: Mapping[str, frozenset[str]] = field(default_factory=dict)
    shadow: ShadowSettings = field(default_factory=ShadowSettings)  # its targets: not kept


class ConversationMemory:
    """What recent runs verified, by conversation id."""

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
        self._kept: OrderedDict[str, deque[Verified]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def before(self, trace: ToolTrace) -> tuple[Verified, ...]:
        """What the run's conversation verified before it started (``earlier``); then the
        run is remembered, unless it is a shadow target's."""
        earlier = self.earlier(trace.conversation_id, trace.start_ns)
        if not self.scope.shadow.is_target(trace.reference_keys):  # a candidate's copy
            self.remember(trace)
        return earlier

    def earlier(self, conversation: str | None, start_ns: int) -> tuple[Verified, ...]:
        """What the conversation's runs verified with calls that ended at or before
        ``start_ns`` (a run's start), less than the scope's ``ttl_ns`` before it."""
        if conversation is None:
            return ()
        kept = self._kept.get(conversation)
        if kept is None:
            return ()
        self._kept.move_to_end(conversation)
        oldest = start_ns - self.scope.ttl_ns
        return tuple(v for v in kept if oldest <= v.at_ns <= start_ns)

    def remember(self, trace: ToolTrace) -> None:
        """Keep what the run's successful verification calls verified, for its conversation."""
        conversation = trace.conversation_id
        if conversation is None:
            return
        made = self._verified(trace)
        if not made:
            return
        kept = self._kept.get(conversation)
        if kept is None:
            kept = self._kept[conversation] = deque(maxlen=self._max_calls)
            while len(self._kept) > self._max_conversations:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(conversation)
        kept.extend(made)

    def _verified(self, trace: ToolTrace) -> list[Verified]:
        scope, normalize = self.scope, self.normalize
        tools = [normalize(call.tool_name) for call in trace.calls]
        spanned = spanned_tools(trace.calls, tools)
        made: list[Verified] = []
        for i, call in enumerate(trace.calls):
            tool = tools[i]
            fields = scope.fields.get(tool, frozenset())
            if (tool not in scope.verifiers and not fields) or call.status is not CallStatus.OK:
                continue
            if never_ran(call, tool in spanned, complete=not unfinished(trace)):
                continue
            not_recorded = unrecorded(call)
            values: list[tuple[str, str | None]] = []
            for name in sorted(fields):
                if not_recorded:
                    values.append((name, None))
                    continue
                value = entity_key(lookup(call.arguments, name))
                if value is not None and len(value) <= MAX_VALUE_LENGTH:
                    values.append((name, value))
            at = call.end_ns if call.end_ns is not None else trace.end_ns
            made.append(Verified(tool, tuple(values), at))
        return made
