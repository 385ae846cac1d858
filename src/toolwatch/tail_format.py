"""How ``toolwatch tail`` prints findings: one line per finding, oldest first::

    2026-11-29T20:31:02Z CRITICAL DANGEROUS_ACTION_DRIFT agent=refund-bot tool=issue_refund
    trace=4bf92f3577b34da6a3ce929d0e0e4736 span=b7ad6b7169203331 — <explanation>

(on one line; ``incomplete=REASON`` comes first, right after the category, when the run was
evaluated without all its spans (``timed_out``, ``evicted``, ``shutdown``, ``span_limit``,
``missing_spans``: the finding may be of a span that never came); ``agent=``, ``tool=``,
``field=`` and ``span=`` appear when the finding has them: the span tells apart the findings
of one run that say the same; ``call_agent=`` follows ``agent=`` when another agent of the
run made the finding's call (one used as a tool or handed over to: ``details["call_agent"]``),
the agent an alert's ``agent`` label does not name; ``case=`` names the golden case a finding was
judged against, ``source_trace=`` and ``pair=`` the shadow source run and pair key;
``traffic=shadow`` marks a shadow candidate's finding,
which pages no one), or with
``--json`` the findings-log object of each finding, plus ``stream`` and ``sequence`` (its
place in the server's stream, from a server that numbers findings). The severity and category
are coloured when ``out`` is a terminal and ``NO_COLOR`` is unset (https://no-color.org);
``color=True`` or
``False`` forces the choice.
On an ``out`` whose encoding cannot hold a character of a finding (a Latin-1 locale, a
Windows redirect in its ANSI code page), the line has it as an escape (``\\u2014``), and a
``--json`` line escapes every non-ASCII character, still JSON.

Threading: none of its own; used on the thread that runs ``run_tail``.
"""

from __future__ import annotations

import codecs
import json
import os
import time
from dataclasses import dataclass
from typing import Any, TextIO

from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.evaluation.severity import CALL_AGENT
from toolwatch.sinks.findings import format_timestamp

__all__ = ["format_finding_line", "stream_finding_record", "terminal_text"]


_RESET = "\x1b[0m"
_SEVERITY_COLOURS = {
    "critical": "\x1b[1;31m",  # bold red
    "high": "\x1b[31m",  # red
    "medium": "\x1b[33m",  # yellow
    "low": "\x1b[36m",  # cyan
}


@dataclass(frozen=True, slots=True)
class _Printer:
    """Prints each finding to ``out``. ``narrow``: ``out``'s encoding when it cannot hold
    every character (``_narrow_encoding``): a text line has what it cannot hold as an escape,
    as Python's ``sys.stderr`` does, and a JSON line escapes every non-ASCII character, so
    that a finding is always printed (names are what agents sent: any character)."""

    out: TextIO
    as_json: bool
    colour: bool
    narrow: str | None = None

    def __call__(self, message: findings_pb2.Finding, stream_id: str) -> None:
        if self.as_json:
            record = stream_finding_record(message)
            if stream_id:  # where it is in the stream: a consumer that restarts can dedupe
                record |= {"stream": stream_id, "sequence": message.sequence}
            # JSON's own escapes where the output is narrow: backslashreplace would write a
            # character beyond the BMP as \U0001XXXX, which is no JSON.
            ascii_only = self.narrow is not None
            line = json.dumps(record, ensure_ascii=ascii_only).translate(_JSON_ESCAPED)
        else:
            line = format_finding_line(message, self.colour)
            if self.narrow is not None:
                line = line.encode(self.narrow, "backslashreplace").decode(self.narrow)
        self.out.write(line + "\n")
        self.out.flush()


def _narrow_encoding(out: TextIO) -> str | None:
    """``out``'s encoding when it cannot hold every character (Latin-1, cp1252: a locale's,
    or the ANSI code page Windows gives a redirect), else ``None`` (UTF-8, UTF-16, or a
    stream of text, as ``io.StringIO``, with no encoding)."""
    encoding = getattr(out, "encoding", None)
    if not encoding:
        return None
    try:
        name = codecs.lookup(encoding).name
    except LookupError:  # an encoding Python does not know cannot be written to either
        return None
    return None if name.startswith("utf") else name


def _use_colour(out: TextIO) -> bool:
    return out.isatty() and not os.environ.get("NO_COLOR")


def format_finding_line(message: findings_pb2.Finding, colour: bool = False) -> str:
    """The human-readable line of a stream finding (see the module docstring)."""
    seconds = message.time_unix_nano // 1_000_000_000
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    head = f"{message.severity.upper()} {message.category}"
    if colour:
        head = _SEVERITY_COLOURS.get(message.severity, "") + head + _RESET
    labels = [f"{k}={v.translate(_ESCAPED)}" for k, v in _labels(message) if v]
    return " ".join([stamp, head, *labels]) + f" — {message.explanation.translate(_ESCAPED)}"


#: Unicode's bidirectional embeddings, overrides, isolates and marks, which reorder what a
#: terminal shows, and its invisible characters (zero-width, word joiners, the byte-order
#: mark, tags), which hide text.
_BIDI_CONTROLS = (
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    *range(0x200B, 0x2010),
    *range(0x2060, 0x2065),
    0x061C,
    0xFEFF,
    *range(0xE0000, 0xE0080),
)
#: Control characters written as escapes: names and explanations come from what agents sent,
#: and a terminal must not run their escape sequences or show a line break that forges a
#: finding. (C0, DEL, C1, and Unicode's line and paragraph separators.)
_ESCAPED: dict[int, str] = {
    c: ascii(chr(c))[1:-1]
    for c in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *_BIDI_CONTROLS)
}
#: The same in a JSON line (``--json``): json.dumps escapes C0 alone.
#: json.dumps writes it as JSON does: a character beyond U+FFFF (the tag characters) as its
#: UTF-16 surrogate pair of escapes.
_JSON_ESCAPED: dict[int, str] = {c: json.dumps(chr(c))[1:-1] for c in _ESCAPED if c >= 0x7F}


def terminal_text(text: str) -> str:
    """``text`` with the characters a terminal must not be given as they are (``_ESCAPED``)
    written as escapes: what a sender chose, on one line (``toolwatch replay``'s report too)."""
    return text.translate(_ESCAPED)


def _labels(message: findings_pb2.Finding) -> list[tuple[str, str]]:
    caller = message.details.get(CALL_AGENT, "")
    return [
        ("incomplete", message.incomplete_reason),  # first: it says how far to trust the rest
        ("agent", message.agent),
        ("call_agent", caller if caller != message.agent else ""),  # a sub-agent's call
        ("tool", message.tool),
        ("field", message.field),
        ("trace", message.trace_id),
        ("span", message.span_id),
        ("case", message.case_id),  # what it was judged against, when not the policy
        ("source_trace", message.source_trace_id),
        ("pair", message.pair_key),
        ("traffic", message.traffic if message.traffic == "shadow" else ""),  # a candidate's
    ]


def stream_finding_record(message: findings_pb2.Finding) -> dict[str, Any]:
    """A stream finding as the findings-log object (same keys; details as rendered text)."""
    return {
        "category": message.category,
        "severity": message.severity,
        "evaluator": message.evaluator,
        "reference": message.reference,
        "case_id": message.case_id or None,
        "source_trace_id": message.source_trace_id or None,
        "pair_key": message.pair_key or None,
        "score": message.score if message.HasField("score") else None,
        "tool": message.tool or None,
        "field": message.field or None,
        "agent": message.agent or None,
        "explanation": message.explanation,
        "trace_id": message.trace_id,
        "span_id": message.span_id or None,
        "service": message.service or None,
        "traffic": message.traffic or None,
        "incomplete_reason": message.incomplete_reason or None,
        "timestamp": format_timestamp(message.time_unix_nano),
        "details": dict(message.details),
    }
