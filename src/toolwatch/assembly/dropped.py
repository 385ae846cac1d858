"""What a buffered trace keeps of its spans dropped for a limit (too large, no room, past the
cap's enclosing spans): ``DroppedSpans``, which a ``_Trace`` (``assembly.anchoring``) holds
from its first such span on (None until then: most traces drop none).

A span dropped for a limit came: a span that names it as its parent waits for it no more,
and the anchor walk passes through it as through a held span (its ``Link``); what it waited
for (a parent its flags say is local, which the trace does not hold) is still waited for (its
wait). Which spans anchor a trace, and when, is ``assembly.anchoring``'s; this module keeps
what those rules read, and counts it: each piece at least what CPython holds, in the trace's
bytes (against ``max_buffered_bytes``). Bounded: ``DROPPED_IDS`` links and as many waits;
past them (or the room the buffer has left) a dropped span is not known, as a rejected one.

Compiled, as ``assembly.anchoring`` is. Not thread-safe: the buffer's event loop only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final, NamedTuple, TypeAlias

from toolwatch.jsontext import text_size
from toolwatch.model import SpanRecord, SpanRole

__all__ = [
    "DROPPED_IDS",
    "DROPPED_SPANS_BYTES",
    "DroppedSpan",
    "DroppedSpans",
    "Link",
    "dropped_span",
    "keep_cost",
    "requests_tools",
]

#: How many spans dropped for a limit a trace remembers (``_Trace.came``): a few spans of a
#: run are too large, or come when the buffer is full; past these, a dropped span counts as
#: a rejected one (``_Trace.parent_lost``), and a trace's memory stays bounded.
DROPPED_IDS: Final = 16

#: What is kept of a span dropped for a limit (``_Trace.came``; before its trace is held,
#: ``assembly.limited``): its id, its parent's id, its end, its service, whether its flags
#: say its parent is local, its role, and, of an LLM span, whether it requested tools
#: (``requests_tools``). Not the span: one dropped too large holds too much.
DroppedSpan: TypeAlias = tuple[bytes, bytes | None, int, str | None, bool, SpanRole, bool]

#: Finish reasons (lower-cased) of a model call that stopped to have tools run
#: (``requests_tools``).
_TOOL_FINISHES: Final = frozenset(
    {"tool_calls", "tool_call", "tool_use", "tool-calls", "function_call"}
)

#: A wait: the parent id a dropped span waited for, the latest end of those that did, their
#: service.
_Wait: TypeAlias = tuple[bytes, int, str | None]


class Link(NamedTuple):
    """What the anchor walk reads of a span dropped for a limit that may be a parent
    (``DroppedSpans.links``): it passes through it as through a held span
    (``_Trace._outermost``); of an AGENT span, what an outermost agent span is read for
    (``_Trace._agent_anchors``): its end and service (of another role: 0 and None); of an
    LLM span, whether it requested tools (``requests_tools``): a walk starts from it as
    from a held model call of a tool loop (``_Trace._model_anchors``), as from one a TOOL
    span names as its parent (of another role: False)."""

    span_id: bytes
    parent_span_id: bytes | None
    role: SpanRole
    parent_local: bool
    end_ns: int
    service: str | None
    requests_tools: bool


# What a trace's memory of its dropped spans is counted as in its bytes (``_Trace.came``;
# ``size_bytes``, against ``max_buffered_bytes``), each at least what CPython 3.11 holds
# (``sys.getsizeof``; ``test_assembly_dropped_bytes.py`` checks it): the ``DroppedSpans``
# itself (48 bytes; 56 compiled by mypyc, its vtable pointer: measured); each of its two
# lists, at its first entry, its header and the slack it may grow with (56 + 8 slots of 8
# bytes); a link, its ``Link`` (96: 7 fields; its ``requests_tools`` a bool, shared) and its
# slot, its span id (8 bytes: 41, 48 allocated),
# and its parent id (48, where it has one: a root has none), and an AGENT span's end (36,
# 48 allocated) and service's characters (as a wait's); a wait, its (parent id, end,
# service) tuple (64), the parent id (48), the end (32) and its slot, and its service's
# characters (a string of its own, 49 bytes and its text, as a held span counts it).
DROPPED_SPANS_BYTES: Final = 56
_LIST_BYTES: Final = 120
_LINK_BYTES: Final = 152
_PARENT_BYTES: Final = 48
_END_BYTES: Final = 48
_WAIT_BYTES: Final = 152
_STR_BYTES: Final = 49


def requests_tools(model: SpanRecord) -> bool:
    """Whether a model call asked for tools: it recorded the calls it requested, or a finish
    reason that names them (kept without content capture: OpenAI's ``tool_calls``, the GenAI
    conventions' ``tool_call``, Anthropic's and Bedrock's ``tool_use``, the Vercel AI SDK's
    ``tool-calls``, OpenAI's older ``function_call``). Gemini says ``STOP`` either way."""
    return bool(model.output_tool_calls) or any(
        reason.lower() in _TOOL_FINISHES for reason in model.finish_reasons
    )


def dropped_span(span: SpanRecord) -> DroppedSpan:
    """What is kept of ``span``, dropped for a limit (``DroppedSpan``)."""
    return (
        span.span_id,
        span.parent_span_id,
        span.end_ns,
        span.service,
        span.parent_local,
        span.role,
        span.role is SpanRole.LLM and requests_tools(span),
    )


def _service_bytes(service: str | None) -> int:
    """The bytes ``service``'s name is counted as, kept: a string of its own."""
    return 0 if service is None else _STR_BYTES + text_size(service)


def _wait_bytes(service: str | None) -> int:
    """The bytes a new wait of a span of ``service`` is counted as (``_WAIT_BYTES``)."""
    return _WAIT_BYTES + _service_bytes(service)


def _link(span: DroppedSpan) -> tuple[Link, int]:
    """The ``Link`` kept of ``span``, and the bytes it is counted as (with its span id and
    parent id; an AGENT span's, with its end and service)."""
    span_id, parent_id, end_ns, service, local, role, tools = span
    cost = _LINK_BYTES + (0 if parent_id is None else _PARENT_BYTES)
    if role is not SpanRole.AGENT:
        return Link(span_id, parent_id, role, local, 0, None, tools), cost
    cost += _END_BYTES + _service_bytes(service)
    return Link(span_id, parent_id, role, local, end_ns, service, False), cost


def _wait_index(waits: list[_Wait] | None, parent_id: bytes, service: str | None) -> int:
    """Where the wait of a span dropped for ``parent_id``, of ``service``, goes in
    ``waits`` (``DroppedSpans.waits``): the entry of that parent and service (only the
    latest end of those is read), else a new one, at its end."""
    if waits is None:
        return 0
    for at, (parent, _, by) in enumerate(waits):
        if parent == parent_id and by == service:
            return at
    return len(waits)


def keep_cost(drops: DroppedSpans | None, span: DroppedSpan, parent: bool) -> int:
    """The bytes ``_Trace.came`` counts for keeping ``span``, dropped (``parent``: its link
    too), and its wait (its flags say its parent is local, the trace does not hold it), in
    a trace that keeps ``drops`` (``DROPPED_SPANS_BYTES`` more for the first); -1 where
    nothing is kept however much room (past ``DROPPED_IDS``). Admission's question
    (``held_traces._kept_wait``), asked only of a span it drops."""
    if drops is None:
        return DroppedSpans()._cost(span, parent, True)[0] + DROPPED_SPANS_BYTES
    return drops._cost(span, parent, True)[0]


class DroppedSpans:
    """What one trace keeps of its spans dropped for a limit (module docstring): counted in
    its bytes by ``keep`` (this object's own, ``DROPPED_SPANS_BYTES``, by its trace)."""

    __slots__ = ("links", "waits")

    def __init__(self) -> None:
        # Those that may be a parent: no span waits for them (they came), and what the
        # anchor walk reads of each; None until one is. A list: ``DROPPED_IDS`` at most,
        # looked through.
        self.links: list[Link] | None = None
        # What they waited for (those that may be a parent, and steps dropped over the
        # cap): one entry for each parent their flags say is local and service, the latest
        # end of those (what is read of them: ``awaits``), ``DROPPED_IDS`` at most; None
        # until one is.
        self.waits: list[_Wait] | None = None

    def link(self, span_id: bytes) -> Link | None:
        """What is kept of the span ``span_id``, if it was dropped and may be a parent
        (``DROPPED_IDS`` links at most)."""
        for link in self.links or ():
            if link.span_id == span_id:
                return link
        return None

    def agents(self) -> list[Link]:
        """The AGENT spans kept (``_Trace._agent_anchors``)."""
        return [link for link in self.links or () if link.role is SpanRole.AGENT]

    def models(self) -> list[Link]:
        """The LLM spans kept (``_Trace._model_anchors``)."""
        return [link for link in self.links or () if link.role is SpanRole.LLM]

    def tools_ran_in(self) -> Iterator[bytes | None]:
        """The parent ids of the TOOL spans kept: the model calls that ran a tool inside
        them (google-genai's automatic function calling) among them."""
        return (link.parent_span_id for link in self.links or () if link.role is SpanRole.TOOL)

    def said_local(self) -> list[bytes | None]:
        """The parent ids its spans' flags say are local: those of its links that say so,
        and every wait's (a wait is kept only of a parent its span says is local)."""
        said = [link.parent_span_id for link in self.links or () if link.parent_local]
        said.extend(parent for parent, _, _ in self.waits or ())
        return said

    def waited_for(self) -> Iterable[bytes]:
        """The parent ids its spans waited for."""
        return (parent for parent, _, _ in self.waits or ())

    def keep(self, span: DroppedSpan, parent: bool, wait: bool, room: int) -> tuple[int, bool]:
        """Keep what is read of ``span``: its ``Link`` (``parent``: it may be a parent; a
        retry of one kept is the caller's to skip), and its wait (``wait``: its flags say
        its parent is local, and the trace does not hold it), in ``room`` bytes at most.
        Returns the bytes it now holds more, -1 where nothing is kept (past
        ``DROPPED_IDS`` links or waits, or ``room``: the span is not known), and whether
        its wait is new (an entry, or a later end)."""
        _, parent_id, end_ns, service, _, _, _ = span
        cost, at, link = self._cost(span, parent, wait)
        if cost < 0 or (cost > 0 and cost > room):  # what costs nothing is known whatever the room
            return -1, False
        links, waits = self.links, self.waits
        if link is not None:
            if links is None:
                links = self.links = []
            links.append(link)
        if at < 0 or parent_id is None:
            return cost, False
        if waits is None:
            waits = self.waits = []
        if at == len(waits):
            waits.append((parent_id, end_ns, service))
            return cost, True
        if end_ns > waits[at][1]:
            waits[at] = (parent_id, end_ns, service)
            return cost, True
        return cost, False

    def _cost(self, span: DroppedSpan, parent: bool, wait: bool) -> tuple[int, int, Link | None]:
        """What ``keep`` would count for ``span`` (-1: past ``DROPPED_IDS`` links or waits,
        nothing kept), where its wait goes in ``waits`` (-1: none), and its ``Link``."""
        _, parent_id, _, service, _, _, _ = span
        links, waits = self.links, self.waits
        cost = 0
        link: Link | None = None
        if parent:  # its link, and the list for the first
            link, cost = _link(span)
            if links is None:
                cost += _LIST_BYTES
        at = -1  # where its wait goes in waits (its length: a new entry); -1: none
        if wait and parent_id is not None:
            at = _wait_index(waits, parent_id, service)
            if waits is None:
                cost += _LIST_BYTES + _wait_bytes(service)
            elif at == len(waits):
                cost += _wait_bytes(service)
        if (parent and links is not None and len(links) >= DROPPED_IDS) or at >= DROPPED_IDS:
            return -1, at, link
        return cost, at, link

    def awaits(self, held: dict[bytes, SpanRecord], after: int | None, service: str | None) -> bool:
        """``_Trace._awaits_local`` (``after`` None), or ``_Trace._awaits_after`` (a span of
        ``service`` ended after ``after``), in a trace that dropped a span that may be a
        parent (it came, and is not waited for), or one that waited: whether a wait, or a
        span of ``held``, waits for a parent its flags say is local that neither ``held``
        nor the links hold. Apart, as these walk every span: most traces pay nothing for
        it."""
        gone = {link.span_id for link in self.links or ()}
        return any(
            parent not in held
            and parent not in gone
            and (after is None or (end > after and by == service))
            for parent, end, by in self.waits or ()
        ) or any(
            span.parent_local
            and span.parent_span_id not in held
            and span.parent_span_id not in gone
            and (after is None or (span.end_ns > after and span.service == service))
            for span in held.values()
        )
