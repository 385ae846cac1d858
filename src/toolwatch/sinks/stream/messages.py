"""A finding as the findings stream's message (``finding_message``): its details redacted
and rendered as text, as in the findings log.

Sizes. What a sender names (an agent, service, tool or field, each an attribute of up to
``ingest.max_value_bytes``) reaches every held finding, queue and index entry, so none keeps
it whole: a streamed finding carries names, its pair key, and the text in its details, cut at
``MAX_STREAM_TEXT`` characters (a metrics label's cap); the findings log keeps them whole.

Threading: functions of their arguments alone; any thread.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any, Final

from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.evaluation.severity import MAX_DETAIL_ITEMS
from toolwatch.model import Traffic
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolTrace
from toolwatch.sinks.findings import Redaction, render_details

__all__ = ["MAX_STREAM_TEXT", "finding_message"]


#: The most characters of a name (agent, service, tool, field) and of each text in the
#: details a streamed finding carries: a longer one is cut, ``…`` its last character (as
#: ``make_finding`` cuts an explanation). The cap of a metrics label value: a longer one is
#: free text, not a name. The findings log keeps them whole.
MAX_STREAM_TEXT: Final = 128
#: Nesting a streamed finding's details keep as JSON values; deeper, a value is its text.
_MAX_STREAM_DEPTH: Final = 8


def finding_message(
    trace: ToolTrace,
    finding: Finding,
    redaction: Redaction,
    time_ns: int,
    sequence: int = 0,
    *,
    traffic: Traffic = Traffic.LIVE,
) -> findings_pb2.Finding:
    """``finding`` as the stream's message, details redacted and rendered as text; names, the
    case id and pair key, and the texts in details, cut at ``MAX_STREAM_TEXT`` characters
    (the explanation is bounded by ``make_finding``)."""
    message = findings_pb2.Finding(
        category=str(finding.category),
        severity=str(finding.severity),
        evaluator=finding.evaluator,
        reference=str(finding.reference),
        case_id=_cut(finding.case_id or ""),
        source_trace_id=finding.source_trace_id or "",
        pair_key=_cut(finding.pair_key or ""),
        explanation=finding.explanation,
        trace_id=finding.trace_id,
        span_id=finding.span_id or "",
        tool=_cut(finding.tool or ""),
        field=_cut(finding.field or ""),
        agent=_cut(finding.agent or trace.agent or ""),
        service=_cut(trace.service or ""),
        time_unix_nano=time_ns,
        details=render_details(_cut_texts(redaction.details(finding))),
        sequence=sequence,
        traffic=str(traffic),
        incomplete_reason="" if trace.complete else trace.incomplete_reason or "unknown",
    )
    if finding.score is not None:
        message.score = finding.score
    return message


def _cut(text: str) -> str:
    """``text``, cut to ``MAX_STREAM_TEXT`` characters when longer, ``…`` the last one."""
    return text if len(text) <= MAX_STREAM_TEXT else text[: MAX_STREAM_TEXT - 1] + "…"


def _cut_texts(value: Any, depth: int = 0) -> Any:
    """``value`` (a detail) with every text in it ``_cut``, keys too, and every object or
    array cut to its first ``MAX_DETAIL_ITEMS`` entries, the rest counted (``"…": "N more"``,
    or a last item ``"… N more"``), at any depth (past ``_MAX_STREAM_DEPTH``, as its JSON
    text, cut): a drift on an argument object of 4,000 fields is not 100 KB as sent. It stays
    JSON as it is rendered; the findings log keeps every entry whole. (A key cut here is no
    field path ``show_fields`` names: after a reload its value shows only when an entry
    names a field it is inside, on the safe side.)"""
    if isinstance(value, str):
        return _cut(value)
    if depth >= _MAX_STREAM_DEPTH and isinstance(value, list | tuple | Mapping):
        return _cut(json.dumps(value, default=str, ensure_ascii=False))
    if isinstance(value, list | tuple):
        items = [_cut_texts(item, depth + 1) for item in value[:MAX_DETAIL_ITEMS]]
        if len(value) > MAX_DETAIL_ITEMS:
            items.append(f"… {len(value) - MAX_DETAIL_ITEMS} more")
        return items
    if isinstance(value, Mapping):
        entries = itertools.islice(value.items(), MAX_DETAIL_ITEMS)
        cut = {_cut(str(key)): _cut_texts(item, depth + 1) for key, item in entries}
        if len(value) > MAX_DETAIL_ITEMS:
            cut["…"] = f"{len(value) - MAX_DETAIL_ITEMS} more"
        return cut
    return value
