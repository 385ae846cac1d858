"""The join of tool spans with requests without an id in common: the k-th execution of a
tool under an agent with the k-th request of it, unless another request asked for exactly
the arguments it ran with (OpenAI Agents' tool spans carry no call id).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any, Final

from toolwatch.assembly.drafts import (
    CallSite,
    _Draft,
    _raw_name,
    _Request,
    _scope,
    parse_arguments,
)
from toolwatch.model import SpanRecord

__all__: list[str] = []

#: Requests of one tool an execution's arguments are compared with, the next in line: a
#: model's parallel calls are a few (each comparison decodes a request's JSON, and reading
#: every waiting request took quadratic time in a run of thousands of calls of one tool).
_MAX_ARGUMENT_MATCHES: Final = 32


def _join_by_name(
    executions: list[SpanRecord],
    requests: list[_Request],
    sites: dict[bytes, CallSite],
    normalize: Callable[[Any], str],
) -> list[_Draft]:
    """Pair the k-th execution with the k-th request of the same tool under the same agent,
    unless another of those requests asked for exactly the arguments it ran with (parallel
    calls of one tool start in any order: a thread pool). Two different ids never pair: a
    span with an id only takes a request without one."""
    if not executions and not requests:
        return []  # the usual case: every call was joined on its id
    with_id: dict[tuple[bytes | None, str], deque[_Request]] = defaultdict(deque)
    without_id: dict[tuple[bytes | None, str], deque[_Request]] = defaultdict(deque)
    for r in requests:
        queues = with_id if r.call.call_id is not None else without_id
        queues[(_scope(sites[r.llm.span_id]), r.name)].append(r)
    drafts: list[_Draft] = []
    for span in executions:
        key = (_scope(sites[span.span_id]), normalize(_raw_name(span)))
        only_without = span.call_id is not None
        pending = (without_id[key], None if only_without else with_id[key])
        request = _same_arguments(span, *pending) or _next_request(*pending)
        drafts.append(_Draft(span, request))
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
