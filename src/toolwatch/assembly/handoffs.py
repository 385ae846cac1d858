"""Handoffs: the spans of an OpenAI Agents SDK handoff joined to the transfer requests they
carried out, or calls of their own.

Handoffs (OpenAI Agents SDK, CONVENTIONS §6.5): the model requests ``transfer_to_<agent>``
and no tool span runs it, but every exporter writes a handoff span under the agent handing
off. That span is the request's execution: of the requests the agent's last model output
before it asked and nothing ran, the first ``transfer_to_`` request of the agent it names
(the SDK runs the first handoff an output asks for), else the first ``transfer_to_`` one,
else the first (a handoff tool renamed); with none (the contrib instrumentation records the
request in no structured field) a span that names its agent is a call of its own,
``transfer_to_<agent>``, so the handoff is a call whichever instrumentation exported it. A
call joined to a handoff span is marked ``handoff``; the span's status is not the call's
(the SDK marks the handoff it ran failed when the output asked for several).
"""

from __future__ import annotations

import bisect

from toolwatch.assembly.drafts import CallSite, _Draft, _ended, _scope, append_to
from toolwatch.assembly.ordering import _emission
from toolwatch.conventions.frameworks import TRANSFER_TOOL_PREFIX, agent_in_tool_style, is_transfer
from toolwatch.model import SpanRecord, SpanRole

__all__: list[str] = []


def _with_handoffs(
    drafts: list[_Draft],
    handoffs: list[SpanRecord],
    spans: tuple[SpanRecord, ...],
    sites: dict[bytes, CallSite],
) -> list[_Draft]:
    """``drafts`` with each handoff span (in time order) joined to the request it carried
    out, or added as a call of its own when its agent's output asked for none that was not
    run (see the module's docstring); a handoff span that names no agent and finds no
    request is not a call."""
    waiting: dict[bytes, list[_Draft]] = {}  # requests never run, by the output asking them
    for d in drafts:
        if d.span is None and d.request is not None and not d.request.call.hosted:
            append_to(waiting, d.request.llm.span_id, d)
    outputs = _Outputs(spans, sites)
    for span in handoffs:
        output = outputs.before(span, sites)
        asked = waiting.get(output.span_id, []) if output is not None else []
        asked.sort(key=_emission)
        draft = _handoff_request(asked, span.tool_name or None)
        if draft is not None:
            asked.remove(draft)
            draft.span, draft.handoff = span, True
        elif span.tool_name and not asked:
            drafts.append(_Draft(span, None, handoff=True))
    return drafts


class _Outputs:
    """The run's model outputs by agent, in order of their end (then start): a run of
    thousands of handoff spans (hostile, or a long chain) finds each one's output by
    bisection, not by reading every span again."""

    __slots__ = ("_ends", "_spans")

    def __init__(self, spans: tuple[SpanRecord, ...], sites: dict[bytes, CallSite]) -> None:
        by_agent: dict[bytes | None, list[SpanRecord]] = {}
        for span in spans:
            if span.role is SpanRole.LLM:
                append_to(by_agent, _scope(sites[span.span_id]), span)
        self._spans = {agent: sorted(llms, key=_ended) for agent, llms in by_agent.items()}
        self._ends = {agent: [s.end_ns for s in llms] for agent, llms in self._spans.items()}

    def before(self, handoff: SpanRecord, sites: dict[bytes, CallSite]) -> SpanRecord | None:
        """The model output a handoff carried out: the last one of its agent that ended
        before the handoff started (the SDK hands off in the turn that asked), or ``None``."""
        agent = _scope(sites[handoff.span_id])
        ends = self._ends.get(agent)
        if not ends:
            return None
        index = bisect.bisect_right(ends, handoff.start_ns)
        return self._spans[agent][index - 1] if index else None


def _handoff_request(asked: list[_Draft], target: str | None) -> _Draft | None:
    """Of the requests one output made and nothing ran, the handoff the SDK carried out: it
    runs the first handoff an output asks for (and refuses the others). The first
    ``transfer_to_`` request of ``target`` when the span names one, else the first
    ``transfer_to_`` request, else the first request (a handoff tool renamed)."""
    wanted = TRANSFER_TOOL_PREFIX + agent_in_tool_style(target) if target else None
    transfers = [d for d in asked if d.request is not None and is_transfer(d.request.call.name)]
    for draft in transfers:
        assert draft.request is not None
        if wanted is None or agent_in_tool_style(draft.request.call.name) == wanted:
            return draft
    if transfers and wanted is None:
        return transfers[0]
    return asked[0] if asked else None
