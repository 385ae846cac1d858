"""The attempts of one request: a call and the calls that ran its request again under its
call id (``ToolCall.rerun``: a framework's or an SDK's retry policy, a wrapper's span beside
the tool's). The model asked once, so an evaluator that judges calls one by one (``safety``'s
missing verification and disallowed tools, ``invariants``' ``arguments`` rules) gives the
request one finding, not one an attempt: ``one_per_request``.

A call's request is the last call before it (sequence order) of its tool, call id, agent and
parent call that is no rerun itself (``loops.request_key``: two agents used as tools at once
both ask under ``call_0``; a model that numbers each turn's calls from ``call_0`` asks again,
a request of its own, in a later turn). The findings of one request that make one complaint
(the evaluator says what: the bound values it judged, the arguments it validated; nothing,
where arguments are not what it judged) are one: on the attempt that went through, the first
that succeeded, else (all failed) the last. It is the attempt ``loops.retried`` counts as the
request's action (a failure made again by its retry; a success recorded again by a wrapper's
span), ``invariants`` names and ``safety``'s drift flags, and its finding says what became of
the request (``severity.call_outcome``): a refund retried after a timeout went through, which
the timed-out attempt's finding would have called failed. The finding lists every attempt it
stands for (``details.attempt_spans``, in sequence order) and says so in its explanation.
Attempts with different complaints (a rerun whose span recorded another order) keep each
their own finding: one request's attempts are merged, never a page lost.

Runs with no rerun (almost all) pay one flag check per flagged call (``has_rerun``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Final

from toolwatch.evaluation.loops import RequestKey, request_key
from toolwatch.model import CallStatus
from toolwatch.model_traces import ToolCall

__all__ = ["ATTEMPT_SPANS", "Flagged", "attempts_said", "has_rerun", "one_per_request"]

#: The ``Finding.details`` key listing the span ids of the attempts a finding stands for.
ATTEMPT_SPANS: Final = "attempt_spans"

#: A flagged call and its complaint: findings of one request with equal complaints are one.
Flagged = tuple[ToolCall, Hashable]


def has_rerun(calls: Sequence[ToolCall]) -> bool:
    """Whether one of ``calls`` (the flagged ones) ran a request again: else each is its own
    request, and nothing is merged (most runs)."""
    return any(call.rerun for call in calls)


def one_per_request(
    flagged: Sequence[Flagged], calls: Sequence[ToolCall], tools: Sequence[str]
) -> list[tuple[int, tuple[ToolCall, ...]]]:
    """Of ``flagged`` (each a call and its complaint), the ones kept, by their place in it and
    in its order, each with the attempts it stands for (its own call among them, in sequence
    order; only itself when its request had no other flagged attempt of its complaint).
    ``calls``: the run's, in sequence order, ``tools[i]`` the normalized name of ``calls[i]``
    (the evaluator's)."""
    request = _requests(calls, tools)
    groups: dict[tuple[int, Hashable], list[int]] = {}
    for k, (call, complaint) in enumerate(flagged):
        groups.setdefault((request.get(id(call), -1 - k), complaint), []).append(k)
    kept: list[tuple[int, tuple[ToolCall, ...]]] = []
    for members in groups.values():
        attempts = sorted((flagged[k][0] for k in members), key=_sequence_index)
        carrier = _went_through(attempts)
        kept.append((next(k for k in members if flagged[k][0] is carrier), tuple(attempts)))
    kept.sort(key=lambda item: item[0])
    return kept


def attempts_said(attempts: Sequence[ToolCall]) -> str:
    """What a finding standing for ``attempts`` (two or more) adds to its explanation."""
    return f"one request, {len(attempts)} attempts: run again under its call id"


def _requests(calls: Sequence[ToolCall], tools: Sequence[str]) -> dict[int, int]:
    """``id(call)`` -> the place in ``calls`` (sequence order) of its request's first attempt."""
    latest: dict[RequestKey, int] = {}
    request: dict[int, int] = {}
    for place, call in enumerate(calls):
        key = request_key(tools[place], call)  # as ``loops.retried`` tells a request
        first = latest.get(key) if call.rerun else None
        if first is None:
            first = latest[key] = place
        request[id(call)] = first
    return request


def _went_through(attempts: Sequence[ToolCall]) -> ToolCall:
    """The attempt that went through: the first that succeeded, else the last."""
    for call in attempts:
        if call.status is CallStatus.OK:
            return call
    return attempts[-1]


def _sequence_index(call: ToolCall) -> int:
    return call.sequence_index
