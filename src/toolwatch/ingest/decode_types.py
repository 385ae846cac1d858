"""What decoding an OTLP request takes and gives: ``DecodeOptions`` (what to read, how much
of it, which scanner), ``DecodedBatch`` (the valid spans and the accounting of the rest),
``IdProblems`` (spans a parser already found at fault) and the errors that refuse a whole
body (``DecodeError``, ``DecodeLimitError``).

Shared by ``toolwatch.ingest.decode`` (the per-span loop, which builds the batch),
``decode_requests`` (the ways a request comes in), the OTLP/JSON parser and the listeners,
none of which needs the decoding itself to name them. Immutable values; safe from any thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toolwatch.ingest.scan import Decoder
from toolwatch.model import SpanRecord

__all__ = [
    "DecodeError",
    "DecodeLimitError",
    "DecodeOptions",
    "DecodedBatch",
    "IdProblems",
]


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """What to read besides the conventions' keys, how much of each value to keep, and
    which scanner reads the bytes (``toolwatch.ingest.scan``; ``auto``: compiled if built)."""

    reference_keys: frozenset[str] = frozenset()  # copied into SpanRecord.reference_keys
    max_value_bytes: int = 65_536  # longer strings are truncated (UTF-8 bytes), arrays cut
    max_span_attributes: int = 1024  # a span with more that a convention reads is rejected
    decoder: Decoder = "auto"
    # Model spans' input histories read (SpanRecord.prior_turns, prior_call_ids), for
    # assembly.missing_spans_from_history; off, left at -1 and () and nothing of them
    # parsed (nor OpenInference's input tool-call ids asked of the scanner).
    read_histories: bool = False

    def __post_init__(self) -> None:
        if self.max_value_bytes < 1:
            raise ValueError(f"max_value_bytes must be positive, got {self.max_value_bytes}")
        if self.max_span_attributes < 1:
            count = self.max_span_attributes
            raise ValueError(f"max_span_attributes must be positive, got {count}")


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """The valid spans of one request and the accounting of the rest."""

    spans: tuple[SpanRecord, ...]  # the valid spans
    received: int  # spans in the request
    rejected: Mapping[str, int]  # reason -> count, e.g. {"invalid_trace_id": 2}
    error_message: str | None  # for OTLP partial_success.error_message
    # The valid trace ids of rejected spans, each once: their traces are flagged incomplete
    # (``TraceBuffer.flag_rejected``), or their runs would be judged whole without a call.
    rejected_traces: tuple[bytes, ...] = ()


#: Spans a parser already found at fault, by (resource, scope, span) index: the reason and
#: what is wrong (``otlp_json``'s ids that are no hex, ``salvage``'s spans protobuf cannot
#: parse). Their records stand in place.
IdProblems = dict[tuple[int, int, int], tuple[str, str]]


class DecodeError(ValueError):
    """The whole body is unusable; the message names the field and the reason. ``field`` is
    the field at fault (an OTLP/JSON path), ``"body"`` when no single field is."""

    def __init__(self, message: str, field: str = "body") -> None:
        super().__init__(message)
        self.field = field


class DecodeLimitError(DecodeError):
    """The body is valid, but decoding it would cost more than a limit allows (HTTP 413)."""
