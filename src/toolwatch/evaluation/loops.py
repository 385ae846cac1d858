"""``loops``: the same call made again after it already succeeded. Always runs (policy).

Two calls are identical when their normalized tool names and their arguments (as canonical
JSON: key order ignored, text trimmed, a number the same as its decimal text, ``12.0``,
``12`` and ``"12"``) are equal. A call is a *repeat* when an identical call succeeded before it was
issued: earlier, status ``ok``, and not in the same parallel group (``concurrency.Concurrency``);
a call the model requested that never ran (``base.never_ran``: no tool span while the run's
other calls of its tool have one, not hosted, in a run that ended) returned nothing.
Retries after a failed result are therefore never repeats, and neither are identical calls
issued in parallel. Nor is a call that ran again the request an earlier call ran, under its
call id (``ToolCall.rerun``: a framework's or an SDK's retry policy, a wrapper's second span):
the attempts of one request are one action of the agent, which asked once; what they
returned counts as that request's result (a success a later identical request repeats, a
failure it retries). A model that numbers every turn's calls ``call_0`` asks again in a later
turn under the same id: that is a request of its own, and counts. The repeats of one call
beyond ``policy.repeat_limit`` (or the tool's ``policy.repeat_limits`` entry) are
UNNECESSARY_TOOL_CALL: one finding per distinct call, on the span of its first repeat beyond
the limit.

With ``policy.retry_limit`` set, retries are counted too: a call is a *retry* when it is no
repeat and an identical call failed before it was issued (as ``Concurrency`` says), or, for a
dangerous tool with bindings, a call of the same action (``action_key``: the same bound
values, whatever else changed: the refund of one order tried for ever lower amounts). More
retries of one call than the limit (an agent hammering a failing tool) is
UNNECESSARY_TOOL_CALL as well, on the first retry beyond it. ``score`` is the
share of calls that are not flagged (1.0 for a run without calls).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, cast

from toolwatch.evaluation.base import Reference, never_ran, pct, spanned_tools, unfinished
from toolwatch.evaluation.concurrency import Concurrency, Successes, in_sequence
from toolwatch.evaluation.entities import entity_key, lookup
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.settings import LoopsSettings
from toolwatch.evaluation.severity import make_finding, severity_for
from toolwatch.jsontext import decimal_text
from toolwatch.model import CallStatus, Category, ReferenceKind
from toolwatch.model_evaluation import DETAIL_FIELDS, EvalResult, Finding
from toolwatch.model_traces import ToolCall, ToolTrace
from toolwatch.names import NameNormalizer

__all__ = [
    "NO_BOUND",
    "CallKey",
    "Loops",
    "Repeat",
    "RequestKey",
    "acted",
    "acted_reference",
    "action_key",
    "call_key",
    "find_repeats",
    "request_key",
    "retried",
]


# ``json.dumps(value, sort_keys=True, default=repr)``, without building an encoder per call.
_CANONICAL: Final = json.JSONEncoder(sort_keys=True, default=repr)
# Deeper arguments go to the encoder, which raises RecursionError where Python would: a
# compiled function calling itself has no recursion check of its own.
_MAX_DEPTH: Final = 32
#: Failed identical calls ``retried`` keeps waiting for a retry (each later call asks each):
#: thousands issued at once would otherwise cost a pass each.
_MAX_PENDING_FAILURES: Final = 32

#: A call's identity: its tool, and its arguments as ``call_key`` keys them.
CallKey = tuple[str, Hashable]


class _NotJsonError(Exception):
    """A value ``_canonical`` leaves to the JSON encoder."""


def call_key(tool: str, arguments: Any) -> CallKey:
    """What makes two calls identical: the tool and its arguments as canonical JSON (key order
    ignored). Arguments made of what a JSON parser returns (strings, dicts with string keys,
    lists, ints, floats, booleans, null) are keyed by ``_canonical``: equal exactly when their
    canonical JSON is, without the encoder, whose Python wrapper took 8,000 instructions a
    call. Anything else (a ``bytes`` value from an OTLP attribute, say) is keyed by its JSON
    text, a ``str``, which never equals a ``_canonical`` key (tagged, a ``tuple``): so such a
    value is never taken for the string of its ``repr``."""
    try:
        key = _canonical(arguments, 0)
    except _NotJsonError:
        return tool, _CANONICAL.encode(arguments)
    return tool, ("s", key) if type(key) is str else key


def _canonical(value: Any, depth: int) -> Hashable:
    """``value`` as a hashable key, one-to-one with its canonical JSON but for numbers and
    blanks. A string is itself, trimmed (``" 12"`` is ``"12"``, as ``entities.entity_key``
    has it); every other kind but a number is tagged, so that no two kinds compare equal
    (``True == 1`` in Python, not in JSON; every NaN is the same ``NaN``). A finite
    number is keyed as the string of its decimal text (``jsontext.decimal_text``): ``12.0``
    and ``12`` are one value in JSON, and ``"12"`` is the value most tools' schemas make of
    it (a model that retries a refund of order ``12`` as ``"12"`` or ``12.0`` after a schema
    error retries the same call, as ``entities.entity_key`` has it the same order);
    ``-0.0`` is ``0``."""
    kind = type(value)
    if kind is str:
        return cast(str, value).strip()
    if kind is dict and depth < _MAX_DEPTH:
        return "d", _canonical_items(value, depth + 1)
    if (kind is list or kind is tuple) and depth < _MAX_DEPTH:  # both are arrays in JSON
        return "l", tuple([_canonical(item, depth + 1) for item in cast(Sequence[Any], value)])
    if kind is int or kind is float:
        text = decimal_text(value)
        return ("f", repr(value)) if text is None else text  # None: NaN or an infinity
    if kind is bool:
        return "b", value
    if value is None:
        return "n", None
    raise _NotJsonError


def _canonical_items(value: dict[Any, Any], depth: int) -> tuple[tuple[str, Hashable], ...]:
    """A dict's items, keyed, in key order (the sort compares keys alone: they differ)."""
    items: list[tuple[str, Hashable]] = []
    for key, item in value.items():
        if type(key) is not str:
            raise _NotJsonError  # the encoder turns such keys into text
        items.append((key, _canonical(item, depth)))
    return tuple(sorted(items))


#: No tool's calls are keyed by bound fields (``retried``'s default).
NO_BOUND: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType({})
#: Marks an action key made of bound values, which no arguments' key can equal.
_BOUND: Final = object()


def action_key(tool: str, call: ToolCall, bound: Mapping[str, tuple[str, ...]]) -> CallKey:
    """What makes a call made again the same action: for a tool with ``bound`` fields (a
    dangerous tool's bindings, ``PolicySettings.action_fields``) whose call recorded every one
    of them, the values of those fields (``entities.entity_key``): a refund of order A1 that
    failed and was made again for A1 with a corrected amount is one refund. Else the tool and
    all its arguments (``call_key``)."""
    fields = bound.get(tool)
    if fields is not None and call.arguments is not None and call.arguments_error is None:
        values = tuple([entity_key(lookup(call.arguments, field)) for field in fields])
        if None not in values:
            return tool, (_BOUND, values)
    return call_key(tool, call.arguments)


def retried(
    calls: Sequence[ToolCall],
    tools: Sequence[str],
    bound: Mapping[str, tuple[str, ...]] = NO_BOUND,
) -> frozenset[int]:
    """The places (in ``calls``; ``tools[i]`` is ``calls[i]``'s normalized name) of the failed
    calls the run made again: a later call of the same action (``action_key``: the same tool
    with the same arguments, arguments recorded on neither counting as the same, or, for a
    tool with ``bound`` fields, the same values of those) that the failure could have
    informed (``Concurrency``: not one issued beside it, which saw no result of it). Where
    calls are counted as actions (``call_count`` invariants, dangerous calls beyond the
    reference's), an attempt that failed and was made again is one action, not two.

    A call the framework ran again under the request's call id (``ToolCall.rerun``: its
    retry policy, or a wrapper's span beside the tool's) is that request's action: the
    failed attempts of its request before it (its call id) are made again by it, beside it
    or not, those of other requests of its action not; with none pending, it records the
    request's success again, no action of its own, and its place is given too (a refund
    recorded by the tool's span and a wrapper's is one refund)."""
    if all(call.status is CallStatus.OK and not call.rerun for call in calls):
        return frozenset()  # most runs: no key built
    order = sorted(range(len(calls)), key=lambda i: calls[i].sequence_index)
    ordered = [calls[i] for i in order]
    concurrency = Concurrency(ordered)
    failed: dict[CallKey, list[int]] = {}  # failed calls of each key not yet made again
    requests: dict[RequestKey, list[int]] = {}  # the same, by request (reruns make them again)
    keys: dict[int, CallKey] = {}  # each failed call's key
    found: set[int] = set()
    for place, call in enumerate(ordered):
        i = order[place]
        key = action_key(tools[i], call, bound)
        pending = failed.get(key)
        request = request_key(tools[i], call)
        if call.rerun:
            # Its request's failed attempts are made again by it, even one beside it and
            # whatever arguments each span recorded; those of other requests of the action
            # are not (another refund of the order asked beside it). With none, it records
            # the request's success again: no action.
            own = _made_again(requests, request, failed, keys)
            if not own:
                found.add(i)
                continue
            found.update(order[f] for f in own)
        else:
            # A request of its own, under an id an earlier one had (call_0 in each turn):
            # what the earlier one's reruns could make again is not this one's.
            requests.pop(request, None)
            if pending:
                kept = [f for f in pending if not concurrency.informs(f, place)]
                found.update(order[f] for f in pending if f not in kept)
                pending[:] = kept
        if call.status is not CallStatus.OK:
            if pending is None:
                pending = failed[key] = []
            if len(pending) < _MAX_PENDING_FAILURES:  # beyond: counted, as actions are
                pending.append(place)
                keys[place] = key
                requests.setdefault(request, []).append(place)
    return frozenset(found)


#: A request, as its attempts tell it: its tool and call id, asked by one agent under one
#: call (``parent_call_id``: two agents used as tools at once, each numbering its calls
#: from ``call_0``, ask under one id), the latest so asked (a model that numbers each turn's
#: calls from ``call_0`` asks again under it). No call id is one too: a span without one
#: ran its tool's last request again (``assembly.by_name``). As ``attempts`` reads them.
RequestKey = tuple[str, str | None, str | None, str | None]


def request_key(tool: str, call: ToolCall) -> RequestKey:
    return tool, call.call_id, call.parent_call_id, call.agent


def _made_again(
    requests: dict[RequestKey, list[int]],
    request: RequestKey,
    failed: dict[CallKey, list[int]],
    keys: dict[int, CallKey],
) -> list[int]:
    """The failed attempts of ``request`` not yet made again, taken out of ``failed``."""
    attempts = requests.pop(request, None)
    if not attempts:
        return []
    own = [f for f in attempts if f in failed[keys[f]]]
    for f in own:
        failed[keys[f]].remove(f)
    return own


def acted(
    trace: ToolTrace,
    normalize: NameNormalizer,
    bound: Mapping[str, tuple[str, ...]] = NO_BOUND,
) -> ToolTrace:
    """The run as the actions it took: its calls without the failed ones it made again
    (``retried``), each of which is one action with its retry. What the comparing evaluators
    count and line up (``tool_selection``, ``tool_arguments``, ``tool_trace_structure``'s
    call count, ``order``, ``composite``), as ``call_count`` invariants and ``safety`` count
    actions: a run that did what its reference did, but had to ask a flaky tool twice, has
    not called more, nor in another order; nor has one whose framework recorded a request
    twice (``ToolCall.rerun``). ``trace`` itself when no call failed or was run again (most
    runs: nothing more is read), or none that failed was made again."""
    calls = trace.calls
    if all(call.status is CallStatus.OK and not call.rerun for call in calls):
        return trace
    again = retried(calls, [normalize(call.tool_name) for call in calls], bound)
    if not again:
        return trace
    kept = tuple(call for i, call in enumerate(calls) if i not in again)
    return dataclasses.replace(trace, calls=kept)


def acted_reference(
    reference: Reference,
    normalize: NameNormalizer,
    bound: Mapping[str, tuple[str, ...]] = NO_BOUND,
) -> Reference:
    """``reference`` with its shadow source read as ``acted`` (the source's retries are no
    more calls than the run's), sharing its line-ups; ``reference`` itself when that changes
    nothing. A golden case lists what to do, not attempts: it is read as written."""
    source = reference.source
    if source is None:
        return reference
    made = acted(source, normalize, bound)
    return reference if made is source else dataclasses.replace(reference, source=made)


@dataclass(frozen=True, slots=True)
class Repeat:
    """An identical call repeated ``count`` times after success (or, ``after_failure``,
    retried ``count`` times after failures), beyond ``limit``; ``flagged`` are the calls past
    the limit, in call order."""

    tool: str
    count: int
    limit: int
    flagged: tuple[ToolCall, ...]
    after_failure: bool = False


def find_repeats(
    calls: Sequence[ToolCall],
    tools: Sequence[str],
    limits: dict[str, int],
    limit: int,
    retry_limit: int | None = None,
    *,
    bound: Mapping[str, tuple[str, ...]] = NO_BOUND,
    complete: bool = True,
) -> list[Repeat]:
    """Repeats beyond their limit, in one pass over ``calls`` in sequence order. ``tools[i]`` is
    the normalized tool name of ``calls[i]``; a tool tolerates ``limits.get(tool, limit)``
    repeats, and each call ``retry_limit`` retries (``None``: any number): calls of one
    ``action_key`` after a failure (``bound``: a dangerous tool's bound fields), as
    ``retried`` reads a failed action made again. A call the model requested that never ran
    (``base.never_ran``; ``complete``: the run ended) is no successful result to repeat. A
    ``rerun`` (an attempt of a request an earlier call ran) is neither repeat nor retry; its
    result counts as the request's."""
    per_tool: dict[str, int] = {}  # not a Counter: its constructor is interpreted Python
    for tool in tools:
        per_tool[tool] = per_tool.get(tool, 0) + 1
    if len(per_tool) == len(tools):
        return []  # no tool called twice (most runs): not even the two dicts below
    concurrency = Concurrency(calls)
    succeeded: dict[CallKey, Successes] = {}
    failed: dict[CallKey, Successes] = {}  # failures, kept only with a retry limit
    repeats: dict[CallKey, list[ToolCall]] = {}
    retries: dict[CallKey, list[ToolCall]] = {}
    spanned: frozenset[str] | None = None  # worked out at the first call without a span
    for i, call in enumerate(calls):  # not zip(strict=True): generic in compiled code
        tool = tools[i]
        if per_tool[tool] < 2 or call.arguments is None:
            # The only call of its tool, or one whose arguments were not recorded (content
            # capture is often off): nothing shows it identical to another.
            continue
        key = call_key(tool, call.arguments)
        action = key if tool not in bound else action_key(tool, call, bound)
        earlier = succeeded.get(key)
        failures = failed.get(action) if retry_limit is not None else None
        if call.rerun:
            pass  # an attempt of a request an earlier call ran: the model did not ask again
        elif earlier is not None and earlier.informs(i):
            repeats.setdefault(key, []).append(call)
        elif failures is not None and failures.informs(i):
            retries.setdefault(action, []).append(call)
        if call.status is not CallStatus.OK:
            if retry_limit is not None:
                if failures is None:
                    failures = failed[action] = concurrency.successes()
                failures.add(i)
            continue
        if call.span_id is None and complete:
            if spanned is None:
                spanned = spanned_tools(calls, tools)
            if never_ran(call, tool in spanned, complete=complete):
                continue  # requested, never run: it returned nothing
        if earlier is None:
            earlier = succeeded[key] = concurrency.successes()
        earlier.add(i)
    result: list[Repeat] = []
    for (tool, _), made in repeats.items():
        tolerated = limits.get(tool, limit)
        if len(made) > tolerated:
            result.append(Repeat(tool, len(made), tolerated, tuple(made[tolerated:])))
    for (tool, _), made in retries.items():
        if retry_limit is not None and len(made) > retry_limit:
            flagged = tuple(made[retry_limit:])
            result.append(Repeat(tool, len(made), retry_limit, flagged, after_failure=True))
    return result


class Loops:
    """The ``loops`` evaluator (see the module docstring)."""

    name: Final = "loops"

    def __init__(self, settings: LoopsSettings, policy: PolicySettings) -> None:
        self.settings = settings
        self._normalize = policy.normalizer()
        self._limit = policy.repeat_limit
        self._limits = {self._normalize(t): n for t, n in policy.repeat_limits.items()}
        self._retry_limit = policy.retry_limit
        self._bound = policy.action_fields()  # a dangerous tool's retries: one action's

    def __call__(self, trace: ToolTrace, reference: Reference) -> EvalResult:
        calls = in_sequence(trace.calls)
        tools = [self._normalize.name(call.tool_name) for call in calls]
        repeats = find_repeats(
            calls,
            tools,
            self._limits,
            self._limit,
            self._retry_limit,
            bound=self._bound,
            complete=not unfinished(trace),
        )
        flagged = sum(len(r.flagged) for r in repeats)
        score = 1.0 - flagged / len(trace.calls) if trace.calls else 1.0
        findings = tuple(self._finding(trace, r, score) for r in repeats)
        explanation = f"Loops: {pct(score)} ({flagged} unnecessary repeated calls"
        explanation += "".join(f"; {_describe(r, self._bound)}" for r in repeats) + ")."
        return EvalResult(self.name, {"score": score}, findings, explanation)

    def _finding(self, trace: ToolTrace, repeat: Repeat, score: float) -> Finding:
        return make_finding(
            trace,
            category=Category.UNNECESSARY_TOOL_CALL,
            evaluator=self.name,
            reference=ReferenceKind.POLICY,
            severity=severity_for(score, self.settings.severity_floor),
            score=score,
            explanation=f"Loops: {_describe(repeat, self._bound)}.",
            call=repeat.flagged[0],
            tool=repeat.tool,
            details={
                "repeats": repeat.count,
                "limit": repeat.limit,
                "spans": [c.span_id for c in repeat.flagged],
                # Whole: top-level keys may be data themselves ({"jane@example.com": true}).
                DETAIL_FIELDS: {"": repeat.flagged[0].arguments},
            },
        )


def _describe(repeat: Repeat, bound: Mapping[str, tuple[str, ...]]) -> str:
    if repeat.after_failure:
        fields = bound.get(repeat.tool)  # its retries are one action's (``action_key``)
        same = "with identical arguments" if fields is None else f"on the same {'/'.join(fields)}"
        return (
            f"{repeat.tool} retried {repeat.count} times {same} after failed results (retry"
            f" limit {repeat.limit})"
        )
    return (
        f"{repeat.tool} repeated {repeat.count} times with identical arguments after a "
        f"successful result (limit {repeat.limit})"
    )
