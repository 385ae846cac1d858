"""Shadow pairs: the *source* reference (DESIGN §6).

A candidate model serves a copy of live traffic. Both runs carry the same pair key attribute
and a role attribute (``source`` for the serving model, ``target`` for the candidate). The
joiner holds the first half to arrive and hands back the pair when the other half arrives;
the caller then evaluates the target against the source.

Halves are joined by pair key *and agent* (``ToolTrace.agent``, trimmed and case-folded as
agent names are everywhere; a run that names none is joined with another that names none):
a request may run several agents, each a run with the request's pair key (set on each
agent's span, or carried by baggage), while the candidate serves one of them. Joined on the
key alone, the candidate's refund run would be compared with whichever of production's runs
came first (the triage agent's), and production's refund run would be dropped as a
duplicate. The runs of an agent the candidate does not serve wait for a partner that never
comes, as any unpaired half does, and are counted ``timed_out``; they are held meanwhile,
within ``max_waiting`` and ``max_waiting_bytes`` (waiting longest, they are mostly the
oldest halves, the ones evicted first), so size those for every run with a pair key that
arrives within ``pair_timeout_seconds``.

Every half that is never paired is counted once through
``PipelineMetrics.shadow_unpaired(reason)`` with one of ``UNPAIRED_REASONS``:

- ``timed_out``: it waited ``pair_timeout_seconds`` (``expire``);
- ``evicted``: ``max_waiting`` halves were already waiting, or they held
  ``max_waiting_bytes`` (a half holds its whole run, arguments, results and every name and
  id included: ``half_bytes``), and it was the oldest;
- ``duplicate``: its pair key, agent and role were already taken (waiting, or paired within
  the timeout): the first is kept;
- ``no_role``: it carries a pair key but no role, or an unknown one (the caller still
  evaluates it against policy);
- ``shutdown``: still waiting at ``drain``.

A half is offered with the golden case it was matched to, if any (``case``): a target's
is handed back with its pair (``ShadowPair.case``), so that the pair's evaluation reads the
reference the run's ``against: auto`` evaluators already took (docs/configuration.md: "the
run's golden case, else its shadow source"), and only those set ``against: source`` compare
it with its source. It is a reference to a case of the loaded set: a half holds no copy.

A target offered with ``deferred`` is one whose ``toolwatch_tool_traces_total`` count waits
for the outcome: the engine counts it as compared (``reference="source"``) when its pair is
formed (``ShadowPair.deferred``), and the joiner counts it with ``reference="none"`` when it
is dropped unpaired, so the drift alerts' denominator holds only runs that were compared.

Halves and joined pairs are keyed by the ``identity`` of their pair key and folded agent,
16 bytes whatever the sender's texts (each may be 64 KiB: ``ingest.max_value_bytes``). A
joined pair's entry, kept ``pair_timeout_seconds`` so that a late third half is told a
duplicate, holds that key and a time: at most ``PAIRED_ENTRY_BYTES`` each, ``max_waiting``
of them (2 MB at the default), beside the ``max_waiting_bytes`` the waiting halves hold.

Threading: not thread-safe. One thread (the engine's event loop) calls every method.
Pure of I/O; time comes from the injected clock.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from toolwatch.jsontext import held_size
from toolwatch.metrics import UNPAIRED_REASONS, PipelineMetrics
from toolwatch.model import Clock, Traffic
from toolwatch.model_evaluation import GoldenCase
from toolwatch.model_traces import ToolTrace
from toolwatch.names import fold
from toolwatch.references.identity import identity
from toolwatch.references.settings import ShadowSettings

__all__ = ["PAIRED_ENTRY_BYTES", "UNPAIRED_REASONS", "ShadowJoiner", "ShadowPair", "half_bytes"]

_SOURCE = "source"
_TARGET = "target"
# A half's own record, its ToolTrace, their ints, flags and tuples, its waiting entry and its
# key (the identity: 49 bytes): what is not a text or a parsed value.
_TRACE_BYTES = 1024
_CALL_BYTES = 256  # a ToolCall, its ints and flags, its slot in the trace's calls
#: What a joined pair's entry holds (its key and when it joined, in the ordered map):
#: measured 164-175 bytes, the map's slack included.
PAIRED_ENTRY_BYTES: Final = 200
#: What joins two halves: the ``identity`` of the pair key and the agent folded ("" for a
#: run naming none).
_Key = bytes


def half_bytes(trace: ToolTrace) -> int:
    """Rough bytes a waiting half holds, on the safe side: its run, each call's arguments
    and result as parsed values, and every text it names, ids and names included (a sender
    sets each up to ``ingest.max_value_bytes``). A string held twice (a call's agent that is
    its run's) is counted once."""
    texts: list[str | None] = [
        trace.trace_id,
        trace.run_span_id,
        trace.service,
        trace.agent,
        trace.model,
        trace.final_text,
        trace.refusal_reason,
        trace.incomplete_reason,
        trace.conversation_id,
        *trace.agents,
    ]
    size = _TRACE_BYTES + held_size(trace.reference_keys) + held_size(trace.shared_keys)
    for call in trace.calls:
        size += _CALL_BYTES + held_size(call.arguments) + held_size(call.result)
        texts += (call.tool_name, call.raw_name, call.arguments_error, call.call_id)
        texts += (call.parent_call_id, call.error_type, call.agent, call.span_id, call.service)
    distinct = {id(text): text for text in texts if text is not None}
    return size + sum(map(held_size, distinct.values()))


@dataclass(frozen=True, slots=True)
class ShadowPair:
    """A joined pair: ``source`` is the serving model's run, ``target`` the candidate's;
    ``case``, the golden case the target was matched to (see the module docstring); ``key``,
    their pair key (what findings against the source name it by, with its trace id)."""

    source: ToolTrace
    target: ToolTrace
    deferred: bool = False  # the target's tool-trace count waited for this pair
    case: GoldenCase | None = None
    key: str | None = None


@dataclass(frozen=True, slots=True)
class _Half:
    trace: ToolTrace
    role: str  # _SOURCE or _TARGET
    arrived_ns: int
    deferred: bool = False
    bytes: int = 0  # half_bytes
    case: GoldenCase | None = None  # the golden case the run was matched to


class ShadowJoiner:
    """Joins shadow halves by pair key and agent, bounded in time and memory.

    Waiting halves live in an insertion-ordered map; with one timeout for all, arrival order
    is expiry order, so ``expire`` and eviction only look at the front.
    """

    __slots__ = (
        "_clock",
        "_metrics",
        "_paired",
        "_roles",
        "_settings",
        "_timeout_ns",
        "_waiting",
        "_waiting_bytes",
        "dropped",
    )

    def __init__(self, settings: ShadowSettings, clock: Clock, metrics: PipelineMetrics) -> None:
        self._settings = settings
        self._clock = clock
        self._metrics = metrics
        self._timeout_ns = int(settings.pair_timeout_seconds * 1_000_000_000)
        self._waiting: OrderedDict[_Key, _Half] = OrderedDict()
        self._waiting_bytes = 0  # what the waiting halves hold (half_bytes)
        # Keys joined within the timeout (key -> when), so a late third half is a duplicate
        # rather than a new half left to time out. Bounded like ``_waiting``, in count:
        # ``PAIRED_ENTRY_BYTES`` each.
        self._paired: OrderedDict[_Key, int] = OrderedDict()
        self.dropped = 0  #: halves counted unpaired so far, every reason

    @property
    def waiting(self) -> int:
        """How many halves are waiting for their other half."""
        return len(self._waiting)

    @property
    def waiting_bytes(self) -> int:
        """Roughly what the waiting halves hold (``half_bytes``)."""
        return self._waiting_bytes

    def pair_key(self, trace: ToolTrace) -> str | None:
        """The run's pair key, or ``None`` if it is not a shadow run (or shadow is off).
        An empty value is no key."""
        if not self._settings.enabled:
            return None
        return trace.reference_keys.get(self._settings.pair_key_attribute) or None

    def is_target(self, trace: ToolTrace) -> bool:
        """Whether the run is a shadow target's (``ShadowSettings.is_target``), paired or not."""
        return self._settings.is_target(trace.reference_keys)

    def compares(self, trace: ToolTrace, now: int | None = None) -> bool:
        """Whether ``offer`` at ``now`` would take the run as a shadow target, to compare
        with its source once both have arrived: not a duplicate of a target already waiting
        or paired. What expired by ``now`` (default: the clock) is dropped first, as ``offer``
        drops it. (One that waits past its timeout is not compared after all.)"""
        self.expire(now)
        if self._role(trace) != _TARGET:
            return False
        key = self._key(trace)
        return key is not None and not self._taken(key, _TARGET)

    def offer(
        self,
        trace: ToolTrace,
        *,
        deferred: bool = False,
        now: int | None = None,
        case: GoldenCase | None = None,
    ) -> ShadowPair | None:
        """Take one finished run. Returns the pair it completes, else ``None``.

        A run without a pair key is ignored (nothing held, nothing counted). Expired halves
        are dropped first, so a half never pairs after its timeout. ``deferred``: the run's
        tool-trace count is left to the outcome (see the module docstring); for a run that
        ``compares`` names. ``now``: the clock reading to judge expiry and arrival by (the
        caller's, when it asked ``compares`` at that moment), else the clock's. ``case``:
        the golden case the run was matched to, handed back with a target's pair.
        """
        key = self._key(trace)
        if key is None:
            return None
        now = self._clock() if now is None else now
        self.expire(now)
        half = _Half(trace, self._role(trace) or "", now, deferred, case=case)
        if not half.role:
            self._drop(half, "no_role")
            return None
        if self._taken(key, half.role):
            self._drop(half, "duplicate")
            return None
        waiting = self._waiting.get(key)
        if waiting is None:
            self._hold(key, dataclasses.replace(half, bytes=half_bytes(trace)))
            return None
        return self._join(key, waiting, half)

    def expire(self, now: int | None = None) -> None:
        """Drop halves that waited ``pair_timeout_seconds`` or longer by ``now`` (default:
        the clock; counted ``timed_out``) and forget old joined keys. Cost is proportional
        to what expires."""
        deadline = (self._clock() if now is None else now) - self._timeout_ns
        while self._waiting:
            key, half = next(iter(self._waiting.items()))
            if half.arrived_ns > deadline:
                break
            self._release(key)
            self._drop(half, "timed_out")
        while self._paired and next(iter(self._paired.values())) <= deadline:
            self._paired.popitem(last=False)

    def drain(self) -> None:
        """Shutdown: count every waiting half as unpaired ``shutdown`` and hold nothing."""
        for half in self._waiting.values():
            self._drop(half, "shutdown")
        self._waiting.clear()
        self._waiting_bytes = 0
        self._paired.clear()

    def _key(self, trace: ToolTrace) -> _Key | None:
        """What joins the run with its other half: its pair key and its agent (see the
        module docstring), or ``None`` if it is not a shadow run."""
        key = self.pair_key(trace)
        if key is None:
            return None
        agent = trace.agent
        return identity(key, "" if agent is None else fold(agent))

    def _taken(self, key: _Key, role: str) -> bool:
        """Whether a half of ``role`` for ``key`` already waits, or the pair joined."""
        waiting = self._waiting.get(key)
        return key in self._paired or (waiting is not None and waiting.role == role)

    def _role(self, trace: ToolTrace) -> str | None:
        value = trace.reference_keys.get(self._settings.role_attribute)
        return None if value is None else self._settings.role_of(value)

    def _hold(self, key: _Key, half: _Half) -> None:
        """Hold ``half``, evicting the oldest halves while the count or bytes would pass the
        bounds (a half bigger than ``max_waiting_bytes`` alone is held by itself)."""
        limits = self._settings
        while self._waiting and (
            len(self._waiting) >= limits.max_waiting
            or self._waiting_bytes + half.bytes > limits.max_waiting_bytes
        ):
            oldest = next(iter(self._waiting))
            self._drop(self._release(oldest), "evicted")
        self._waiting[key] = half
        self._waiting_bytes += half.bytes

    def _release(self, key: _Key) -> _Half:
        half = self._waiting.pop(key)
        self._waiting_bytes -= half.bytes
        return half

    def _drop(self, half: _Half, reason: str) -> None:
        """Count a half that will never pair; a deferred one's tool-trace count too."""
        self.dropped += 1
        self._metrics.shadow_unpaired(reason)
        if half.deferred:
            self._metrics.tool_trace(half.trace, "none", Traffic.SHADOW)

    def _join(self, key: _Key, waiting: _Half, arrived: _Half) -> ShadowPair:
        self._release(key)
        if len(self._paired) >= self._settings.max_waiting:
            self._paired.popitem(last=False)
        self._paired[key] = self._clock()
        source, target = (waiting, arrived) if waiting.role == _SOURCE else (arrived, waiting)
        pair_key = self.pair_key(source.trace)
        return ShadowPair(source.trace, target.trace, target.deferred, target.case, pair_key)
