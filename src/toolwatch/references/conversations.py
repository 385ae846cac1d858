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
complete run only (an incomplete one's span may be still to come, or lost). A success without
arguments is kept as one of any value only where its producer (its service) records none of
its tool's in the run (``safety``'s rule): where other calls of the tool by that producer
carry theirs, it lost its own and is kept as a success of no value.

Bounded: at most ``max_conversations`` conversations and ``max_bytes`` bytes
(``policy.conversation_max_bytes``) of them, the least recently used forgotten first (each
counted, ``PipelineMetrics.conversation_evicted`` with the bound of
``CONVERSATION_EVICTION_BOUNDS`` that made room necessary; a conversation larger than
``max_bytes`` alone is kept by itself); ``max_calls`` records each (the oldest first), and
values of at most ``MAX_VALUE_LENGTH`` characters (a longer one is not kept: that field
verifies nothing). A conversation is keyed by the ``identity`` of its id (16 bytes,
whatever the id's length: a sender sets it, up to ``ingest.max_value_bytes``), and its
bytes are counted on the safe side (``record_bytes``, ``CONVERSATION_BYTES``): at the count
bounds with 256-character values, 10,000 conversations would hold about 320 MiB, which
``max_bytes`` caps.
Not thread-safe: the engine's loop alone calls it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from toolwatch.evaluation.base import never_ran, spanned_tools, unfinished
from toolwatch.evaluation.entities import (
    RecordingKey,
    entity_key,
    lookup,
    recording_key,
    recording_tools,
    unrecorded,
)
from toolwatch.jsontext import held_size
from toolwatch.metrics import CONVERSATION_EVICTION_BOUNDS, NoopMetrics, PipelineMetrics
from toolwatch.model import CallStatus
from toolwatch.model_traces import ToolTrace, Verified
from toolwatch.names import NameNormalizer
from toolwatch.references.identity import identity
from toolwatch.references.settings import ShadowSettings

__all__ = [
    "CONVERSATION_BYTES",
    "CONVERSATION_EVICTION_BOUNDS",
    "DEFAULT_MAX_BYTES",
    "ConversationMemory",
    "ConversationScope",
    "record_bytes",
]

MAX_CONVERSATIONS: Final = 10_000
MAX_CALLS: Final = 64
MAX_VALUE_LENGTH: Final = 256
#: ``policy.conversation_max_bytes``' default.
DEFAULT_MAX_BYTES: Final = 64 * 2**20
#: What a remembered conversation holds besides its records: its key (the ``identity``),
#: its entry in the ordered map, its record and its deque of ``max_calls`` slots (two blocks
#: at 64). Measured: 943 bytes with no record, 1,471 with 64 records' slots.
CONVERSATION_BYTES: Final = 1536
# What one record holds besides its texts: the ``Verified``, its values tuple, its time and
# its deque slot; and each value, its pair tuple (64). Measured: 209 bytes with one value.
_RECORD_BYTES: Final = 192
_VALUE_BYTES: Final = 64


def record_bytes(verified: Verified) -> int:
    """Rough bytes one remembered record holds, on the safe side: the record, its tool's
    name (shared while the normalizer remembers it, not always) and each value. The fields'
    names are the scope's own strings, shared by every record."""
    size = _RECORD_BYTES + held_size(verified.tool)
    for _, value in verified.values:
        size += _VALUE_BYTES + held_size(value)
    return size


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
    max_bytes: int = DEFAULT_MAX_BYTES  # policy.conversation_max_bytes


class _Conversation:
    """One conversation's records, oldest first, and what they hold (``record_bytes``)."""

    __slots__ = ("bytes", "records")

    def __init__(self) -> None:
        self.records: deque[Verified] = deque()
        self.bytes = 0


class ConversationMemory:
    """What recent runs verified, by conversation id (see the module docstring for its
    bounds); ``metrics`` is told of each conversation forgotten to make room."""

    def __init__(
        self,
        scope: ConversationScope,
        normalize: NameNormalizer,
        max_conversations: int = MAX_CONVERSATIONS,
        max_calls: int = MAX_CALLS,
        metrics: PipelineMetrics | None = None,
    ) -> None:
        self.scope = scope
        self.normalize = normalize
        self._max_conversations = max_conversations
        self._max_calls = max_calls
        self._metrics: PipelineMetrics = NoopMetrics() if metrics is None else metrics
        self._kept: OrderedDict[bytes, _Conversation] = OrderedDict()
        self._bytes = 0  # what the conversations kept hold: CONVERSATION_BYTES, record_bytes

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def held_bytes(self) -> int:
        """Roughly what the conversations kept hold, at most ``scope.max_bytes`` (unless one
        conversation alone holds more)."""
        return self._bytes

    def rescope(self, scope: ConversationScope, normalize: NameNormalizer) -> None:
        """A reloaded configuration's scope and tool names; what was kept stays, within the
        new ``max_bytes``."""
        self.scope, self.normalize = scope, normalize
        self._make_room()

    def before(self, trace: ToolTrace) -> tuple[Verified, ...]:
        """What the run's conversation verified before it started (``earlier``); then the
        run is remembered, unless it is a shadow target's."""
        if trace.conversation_id is None:
            return ()
        key = identity(trace.conversation_id)  # once, for both
        earlier = self._earlier(key, trace.start_ns)
        if not self.scope.shadow.is_target(trace.reference_keys):  # a candidate's copy
            self._remember(key, trace)
        return earlier

    def earlier(self, conversation: str | None, start_ns: int) -> tuple[Verified, ...]:
        """What the conversation's runs verified with calls that ended at or before
        ``start_ns`` (a run's start), less than the scope's ``ttl_ns`` before it."""
        if conversation is None:
            return ()
        return self._earlier(identity(conversation), start_ns)

    def remember(self, trace: ToolTrace) -> None:
        """Keep what the run's successful verification calls verified, for its conversation."""
        if trace.conversation_id is not None:
            self._remember(identity(trace.conversation_id), trace)

    def _earlier(self, key: bytes, start_ns: int) -> tuple[Verified, ...]:
        kept = self._kept.get(key)
        if kept is None:
            return ()
        self._kept.move_to_end(key)
        oldest = start_ns - self.scope.ttl_ns
        return tuple(v for v in kept.records if oldest <= v.at_ns <= start_ns)

    def _remember(self, key: bytes, trace: ToolTrace) -> None:
        made = self._verified(trace)
        if not made:
            return
        kept = self._kept.get(key)
        if kept is None:
            kept = self._kept[key] = _Conversation()
            self._bytes += CONVERSATION_BYTES
        else:
            self._kept.move_to_end(key)
        for verified in made:
            if len(kept.records) >= self._max_calls:
                self._count(kept, -record_bytes(kept.records.popleft()))
            kept.records.append(verified)
            self._count(kept, record_bytes(verified))
        self._make_room()

    def _count(self, kept: _Conversation, size: int) -> None:
        """``size`` bytes more held by ``kept`` (less, when negative)."""
        kept.bytes += size
        self._bytes += size

    def _make_room(self) -> None:
        """Forget the least recently used conversations while past a bound; the most recent
        one is kept, however large."""
        while len(self._kept) > 1 and (
            len(self._kept) > self._max_conversations or self._bytes > self.scope.max_bytes
        ):
            over_count = len(self._kept) > self._max_conversations
            _, oldest = self._kept.popitem(last=False)
            self._bytes -= CONVERSATION_BYTES + oldest.bytes
            bound = CONVERSATION_EVICTION_BOUNDS[0 if over_count else 1]
            self._metrics.conversation_evicted(bound)

    def _verified(self, trace: ToolTrace) -> list[Verified]:
        scope, normalize = self.scope, self.normalize
        tools = [normalize(call.tool_name) for call in trace.calls]
        spanned = spanned_tools(trace.calls, tools)
        made: list[Verified] = []
        recording: frozenset[RecordingKey] | None = None  # asked only without arguments
        for i, call in enumerate(trace.calls):
            tool = tools[i]
            fields = scope.fields.get(tool, frozenset())
            if (tool not in scope.verifiers and not fields) or call.status is not CallStatus.OK:
                continue
            if never_ran(call, tool in spanned, complete=not unfinished(trace)):
                continue
            not_recorded = unrecorded(call)
            if not_recorded and fields:
                if recording is None:
                    recording = recording_tools(trace.calls, tools)
                if recording_key(call, tool) in recording:  # lost them: no value, as ``safety``
                    fields = frozenset()
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
