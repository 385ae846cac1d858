"""The join of tool spans with requests without an id in common: the k-th execution of a
tool under an agent with the k-th request of it, unless another request asked for exactly
the arguments it ran with (OpenAI Agents' tool spans carry no call id), or the span ran the
request of its tool's attempt before it again (a retry, a wrapper's span beside the tool's,
either started first: ``_ran_again``), recording no arguments where that attempt did, or the
arguments that request asked for.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Final, TypeAlias

from toolwatch.assembly.by_id import _Senders
from toolwatch.assembly.drafts import (
    CallSite,
    _Draft,
    _failed,
    _raw_name,
    _Request,
    _scope,
    parse_arguments,
)
from toolwatch.model import SpanRecord
from toolwatch.names import NameNormalizer

__all__: list[str] = []

#: Requests of one tool an execution's arguments are compared with, the next in line: a
#: model's parallel calls are a few (each comparison decodes a request's JSON, and reading
#: every waiting request took quadratic time in a run of thousands of calls of one tool).
_MAX_ARGUMENT_MATCHES: Final = 32

#: Of one agent's tool, the request its spans ran last, the span that took it (its first
#: attempt) and the last span that ran it (``_ran_again``).
_Attempts: TypeAlias = tuple[_Request, SpanRecord, SpanRecord]
#: Of a tool host (its service) and a model call (its span id), the least offset seen.
_Hosts: TypeAlias = dict[tuple[str | None, bytes], int]


def _join_by_name(
    executions: list[SpanRecord],
    requests: list[_Request],
    sites: dict[bytes, CallSite],
    normalize: NameNormalizer,
    spans: tuple[SpanRecord, ...],
) -> list[_Draft]:
    """Pair the k-th execution with the k-th request of the same tool under the same agent,
    unless another of those requests asked for exactly the arguments it ran with (parallel
    calls of one tool start in any order: a thread pool), or the span ran again the request
    of the attempt before it (``_ran_again``: a call of its own, ``_Draft.again``, as
    ``_join_by_id`` makes one). Two different ids never pair: a span with an id only takes a
    request without one. ``executions`` are in start order."""
    if not executions and not requests:
        return []  # the usual case: every call was joined on its id
    with_id: dict[tuple[bytes | None, str], deque[_Request]] = defaultdict(deque)
    without_id: dict[tuple[bytes | None, str], deque[_Request]] = defaultdict(deque)
    for r in requests:
        queues = with_id if r.call.call_id is not None else without_id
        queues[(_scope(sites[r.llm.span_id]), r.name)].append(r)
    drafts: list[_Draft] = []
    last: dict[tuple[bytes | None, str], _Attempts] = {}
    hosts: _Hosts = {}  # a tool host's offset for a model call: ``_host_offset``
    senders: _Senders | None = None  # the agents' turns, read once a span may be run again
    for span in executions:
        key = (_scope(sites[span.span_id]), normalize.name(_raw_name(span)))
        only_without = span.call_id is not None
        pending = (without_id[key], None if only_without else with_id[key])
        # A span with an id never runs another id's request again: only one without.
        attempts = None if only_without else last.get(key)
        if attempts is not None:
            started = _on_model_clock(span, attempts[0].llm, hosts)
            if _may_run_again(span, attempts, started, *pending):
                if senders is None:
                    senders = _Senders(spans, sites)
                again = _ran_again(attempts, started, senders)
                if again is not None:
                    draft = _Draft(span, None)
                    draft.again = again
                    drafts.append(draft)
                    last[key] = (again, attempts[1], span)
                    continue
        request = _same_arguments(span, *pending) or _next_request(*pending)
        drafts.append(_Draft(span, request))
        if request is not None:
            last[key] = (request, span, span)
            _host_offset(hosts, span, request.llm)
        elif last:
            last.pop(key, None)  # a span of no request: no request for the next to run again
    leftovers = [r for queues in (with_id, without_id) for q in queues.values() for r in q]
    drafts.extend(_Draft(None, r) for r in leftovers)
    return drafts


def _same_arguments(
    span: SpanRecord, first: deque[_Request], second: deque[_Request] | None
) -> _Request | None:
    """The earliest-emitted request of the two queues that asked for the arguments ``span``
    ran with, when it could be one of several (taken out of its queue); else ``None``. Only
    the first ``_MAX_ARGUMENT_MATCHES`` of each queue, the requests next in line, are read."""
    waiting = len(first) + (len(second) if second else 0)
    if waiting < 2 or span.arguments is None:
        return None
    ran = parse_arguments(span.arguments)[0]
    found: tuple[_Request, deque[_Request], int] | None = None
    for queue in (first, second) if second else (first,):
        for index, request in enumerate(queue):
            if index == _MAX_ARGUMENT_MATCHES:
                break
            if request.arguments() == ran:
                if found is None or request.position < found[0].position:
                    found = request, queue, index
                break  # a queue is in emission order
    if found is None:
        return None
    request, queue, index = found
    del queue[index]
    return request


def _next_request(first: deque[_Request], second: deque[_Request] | None) -> _Request | None:
    """Pop the earlier-emitted head of the two queues (``second`` may be off limits)."""
    if second and (not first or second[0].position < first[0].position):
        return second.popleft()
    return first.popleft() if first else None


def _host_offset(hosts: _Hosts, span: SpanRecord, llm: SpanRecord) -> None:
    """Keeps, for a tool host (another service than the model call's) and a model call that
    asked it, the least offset the host's spans for that model call showed so far: a span's
    start less the end of the model call. The least is the two clocks' skew plus the host's
    shortest wait for that output (one request's offset also holds how long the host queued
    it: a host that runs an output's lookups one after the other). Per model call, not per
    host: another agent's model calls may be on another clock, and another output's tools
    may have started while it streamed (an offset below the skew)."""
    service = span.service
    if service == llm.service:
        return
    key = (service, llm.span_id)
    offset = span.start_ns - max(llm.start_ns, llm.end_ns)
    known = hosts.get(key)
    if known is None or offset < known:
        hosts[key] = offset


def _on_model_clock(span: SpanRecord, llm: SpanRecord, hosts: _Hosts) -> int:
    """``span``'s start read on ``llm``'s clock: its own when one service wrote both, else
    less its host's offset for ``llm`` (``_host_offset``; none known: as it is)."""
    if span.service == llm.service:
        return span.start_ns
    return span.start_ns - hosts.get((span.service, llm.span_id), 0)


def _may_run_again(
    span: SpanRecord,
    attempts: _Attempts,
    started: int,
    first: deque[_Request],
    second: deque[_Request] | None,
) -> bool:
    """Whether ``span`` may be an attempt of the request its tool's last span ran
    (``attempts``) rather than the next request's execution, by the spans alone: the service
    that wrote the request's first attempt wrote it; it follows a failed attempt of the
    request (a retry), or started beside the last (a wrapper's span and the tool's, either
    first: a retry starts once its attempt has failed); it recorded what an attempt of the
    request records (``_same_attempt``); and no request of that model call's output waits
    that it may be the execution of (parallel calls of one tool: any of them for a span
    recording no arguments, one asking for the same arguments for a span recording them:
    the model asked twice). ``_ran_again`` says whether a turn came between."""
    request, taken_by, previous = attempts
    if taken_by.service != span.service:
        return False
    if not _failed(previous) and span.start_ns >= previous.end_ns:
        return False
    recorded = _recorded(span)
    if not _same_attempt(span, recorded, request, taken_by):
        return False
    # Another service wrote it: a later request asking for its arguments that still waits,
    # whose model call ended before the span started (``started``, on the model's clock),
    # is its own (review: an agent's two retries of a queued lookup were reruns). Not one
    # asked after it started: a framework's retry that failed, then the model asking again.
    later = started if recorded and span.service != request.llm.service else None
    return not _asked_beside(request, first, recorded, later) and not (
        second and _asked_beside(request, second, recorded, later)
    )


def _same_attempt(
    span: SpanRecord, recorded: bool, request: _Request, taken_by: SpanRecord
) -> bool:
    """Whether what ``span`` recorded fits an attempt of ``request``: the arguments the
    request asked for (other arguments are another request's); or none, where the request's
    first attempt (``taken_by``) recorded them (where none are ever recorded, nothing tells
    a retry from the next request, which the span takes, as before)."""
    if recorded:
        return bool(parse_arguments(span.arguments)[0] == request.arguments())
    return _recorded(taken_by)


def _recorded(span: SpanRecord) -> bool:
    """Whether ``span`` recorded arguments (``parse_arguments``: blank is none)."""
    arguments = span.arguments
    return arguments is not None and not (isinstance(arguments, str) and not arguments.strip())


def _asked_beside(request: _Request, queue: deque[_Request], same: bool, later: int | None) -> bool:
    """Whether a request the span may be the execution of waits in ``queue`` (emission
    order): one of ``request``'s model call (its requests come together, before the later
    calls'), asking for ``request``'s arguments where ``same`` (the span recorded them); and,
    given ``later`` (the span's start), one of a later model call that ended by then asking
    for them too. Read up to ``_MAX_ARGUMENT_MATCHES``, beyond which ``True`` (a guess would
    take the next request's execution from it), but among the later calls' requests given
    ``later``: ``False`` (none of those read matched: the span is the first attempt's)."""
    llm = request.llm
    asked = request.arguments() if same else None
    for index, waiting in enumerate(queue):
        if waiting.llm is llm:
            if not same or waiting.arguments() == asked:
                return True
        elif later is not None:
            if _ended_by(waiting.llm, later) and waiting.arguments() == asked:
                return True
        elif waiting.position > request.position:
            return False  # a later model call's: none of its output's after it
        if index == _MAX_ARGUMENT_MATCHES:
            return later is None or waiting.llm is llm
    return False


def _ended_by(llm: SpanRecord, start: int) -> bool:
    return max(llm.start_ns, llm.end_ns) <= start


def _ran_again(attempts: _Attempts, started: int, senders: _Senders) -> _Request | None:
    """The request of ``attempts`` that the span starting at ``started`` (on the model
    call's clock: ``_on_model_clock``) ran again, ``_may_run_again`` granted; ``None`` where
    the agent started a model call between the model call that asked and the span
    (``_Senders.turned``: one whose requests were not recorded is a turn all the same): the
    model may have asked again."""
    request = attempts[0]
    return None if senders.turned(request.llm, started) else request
