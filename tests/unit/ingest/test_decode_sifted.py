"""Hostile binary requests (bench/hostile_decode.py's shapes) get the same accounting from the
compiled sift (``_wire.sift``) as from the Python pieces and salvage, and as a whole decode:
which spans are rejected, for what, and what the partial success says."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ingest_support import ROOT_ID, TRACE_ID, field, span, varint, whole_decode

from bench.hostile_decode import SHAPES
from tools.fuzz.dense import whole_outcome
from toolwatch.ingest import scan
from toolwatch.ingest.decode_requests import decode_protobuf
from toolwatch.ingest.decode_types import DecodedBatch, DecodeError, DecodeOptions

PATHS = ["sift", "python"]
DECODERS = ["auto", "reference"]
SIZE = 20_000  # bytes: the shapes' accounting, not their cost (bench/hostile_decode.py)


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``sift``: the compiled sift; ``python``: the Python pieces and salvage."""
    if request.param == "sift" and scan._SIFT is None:
        pytest.skip(scan.COMPILED_UNAVAILABLE)
    if request.param == "python":
        monkeypatch.setattr(scan, "_SIFT", None)
    yield request.param


def _decode(body: bytes, decoder: str) -> DecodedBatch:
    return decode_protobuf(body, DecodeOptions(decoder=decoder))  # type: ignore[arg-type]


def _rejected_count(batch: DecodedBatch) -> int:
    """What partial_success.rejected_spans says (toolwatch.ingest.otlp_grpc)."""
    return sum(batch.rejected.values())


# shape -> (received, kept, rejected by reason) at SIZE bytes
EXPECTED = {
    "corrupt_3": (6661, 0, {"malformed_span": 6661}),
    "spans_5": (3996, 0, {"invalid_trace_id": 3996}),
    "spans_2": (9992, 0, {"invalid_trace_id": 9992}),
    "wire_type_4": (4996, 0, {"invalid_trace_id": 4996}),
    "resources_4": (0, 0, {}),
    "resources_2": (0, 0, {}),
    "scopes_2": (0, 0, {}),
    "scopes_4": (0, 0, {}),
    "nested_6": (3333, 0, {"invalid_trace_id": 3333}),
    "mixed": (1210, 605, {"malformed_span": 605}),
    "corrupt_33": (605, 0, {"malformed_span": 605}),
    "valid_30": (665, 665, {}),
}


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("shape", sorted(EXPECTED))
def test_a_hostile_shape_is_accounted_exactly(path: str, decoder: str, shape: str) -> None:
    body = SHAPES[shape](SIZE)
    received, kept, rejected = EXPECTED[shape]

    batch = _decode(body, decoder)

    assert (batch.received, len(batch.spans), batch.rejected) == (received, kept, rejected)
    assert _rejected_count(batch) == received - kept
    assert batch == whole_decode(body, DecodeOptions(decoder=decoder))  # type: ignore[arg-type]
    if rejected:
        assert batch.error_message is not None
        assert batch.error_message.startswith(f"{received - kept} spans rejected; ")
        assert batch.error_message.endswith(f"; and {received - kept - 3} more")
    else:
        assert batch.error_message is None


def test_the_first_offenders_are_named_as_a_whole_decode_names_them(path: str) -> None:
    corrupt = field(2, b"\x00")
    good = field(2, span("ok").SerializeToString())
    bad_parent = field(2, span("p", parent=b"\x01").SerializeToString())
    body = field(1, field(2, corrupt * 50 + good + bad_parent + field(2, b"") * 50))

    batch = _decode(body, "auto")

    assert batch.rejected == {
        "malformed_span": 50,
        "invalid_parent_span_id": 1,
        "invalid_trace_id": 50,
    }
    assert batch.rejected_traces == (TRACE_ID,)
    assert batch.error_message is not None
    assert "spans[0]: protobuf cannot parse the span (Error parsing message" in batch.error_message
    assert batch.error_message.endswith(
        "spans[2]: protobuf cannot parse the span (Error parsing"
        " message with type 'opentelemetry.proto.collector.trace"
        ".v1.ExportTraceServiceRequest': Wire format was corrupt):"
        " corrupt, a string that is not UTF-8, or values nested"
        " deeper than protobuf's 100 levels; and 98 more"
    )


def test_a_corrupt_resource_without_spans_refuses_the_request_as_salvage_does(path: str) -> None:
    corrupt_resource = field(1, field(1, field(1, b"\x00")))  # Resource.attributes, corrupt
    with pytest.raises(DecodeError, match="not a valid ExportTraceServiceRequest"):
        _decode(corrupt_resource + field(1, b"") * 100, "auto")
    spans = field(2, field(2, b"\x00")) + field(2, field(2, b""))
    batch = _decode(corrupt_resource + field(1, spans) * 20, "auto")
    assert batch.rejected == {"malformed_span": 20, "invalid_trace_id": 20}


# -- any hostile request: the sift, the Python path and a whole decode agree -----------------


def _array(depth: int) -> bytes:
    """An attribute whose value is arrays nested ``depth`` deep: protobuf refuses a span of
    it from 48 (its innermost value 101 levels below the request)."""
    value = b""
    for _ in range(depth):
        value = field(5, field(1, value))
    attribute: bytes = field(9, field(1, b"k") + field(2, value))
    return attribute


def _groups(depth: int, number: int = 20) -> bytes:
    """Unknown groups nested ``depth`` deep: protobuf refuses a span of them from 98."""
    body = b""
    start: bytes = varint(number << 3 | 3)
    end: bytes = varint(number << 3 | 4)
    for _ in range(depth):
        body = start + body + end
    return body


_IDS = field(1, TRACE_ID) + field(2, b"\x02" * 8)
#: protobuf (upb) refuses field number 0 in a message, not in a group it skips.
_FIELD_0_IN_GROUP = varint(20 << 3 | 3) + b"\x00\x00" + varint(20 << 3 | 4)
#: Span bodies protobuf accepts or refuses for each reason the judge knows, and ids
#: valid or not.
SPAN_BODIES = [
    b"",
    b"\x00",  # field 0
    b"\x08",  # truncated varint
    b"\x0f",  # wire type 7
    varint(20 << 3 | 4),  # an end-group tag outside a group
    _groups(1, 20)[:-2] + varint(21 << 3 | 4),  # a group ended with another's tag
    _groups(97),
    _groups(98),
    _IDS + _array(47),
    _IDS + _array(48),
    field(1, TRACE_ID),
    field(1, b"\x01"),
    varint(1 << 3 | 0) + b"\x05",  # a trace id sent as a varint: unknown
    _IDS,
    _IDS + field(4, ROOT_ID),
    _IDS + field(4, b"\x03"),
    field(1, bytes(16)) + field(2, b"\x02" * 8),
    field(1, TRACE_ID) + field(2, bytes(8)),
    _IDS + field(5, b"\xff"),  # a name that is not UTF-8
    _IDS + field(5, b"\xed\xa0\x80"),  # a surrogate
    _IDS + field(5, "é".encode()),
    _IDS + varint(5 << 3 | 5) + b"abcd",  # a name sent as fixed32: unknown
    field(1, TRACE_ID) + b"\x12\x09",  # a span id cut short
    _IDS + field(9, field(1, b"\xff")),  # an attribute key that is not UTF-8
    _IDS + field(30, b"\xff"),  # an unknown field: not read
    _IDS + field(9, field(1, b"gen_ai.operation.name") + field(2, field(1, b"execute_tool"))),
    field(1, TRACE_ID) + _groups(2) + field(2, b"\x02" * 8),
    _IDS + _FIELD_0_IN_GROUP,
    _IDS + varint(20 << 3 | 3) + b"\x03\x04" + varint(20 << 3 | 4),  # a group of field 0 in one
]
#: Resource and scope own fields: none, valid, corrupt; a schema_url, valid or not UTF-8;
#: unknown groups too deep for their place, not from their own level.
_URLS = [field(3, b"https://opentelemetry.io/schemas/1.26.0"), field(3, b"\xff")]
RESOURCES = [b"", field(1, field(1, field(1, b"service.name"))), field(1, field(1, b"\x00"))]
RESOURCES += [*_URLS, _groups(100)]
SCOPES = [b"", field(1, field(1, b"tool")), field(1, field(1, b"\xff")), _FIELD_0_IN_GROUP]
SCOPES += [*_URLS, _groups(99)]


@st.composite
def _hostile(draw: st.DrawFn) -> bytes:
    resources = []
    for _ in range(draw(st.integers(0, 3))):
        scopes = []
        for _ in range(draw(st.integers(0, 3))):
            spans = [
                field(2, draw(st.sampled_from(SPAN_BODIES))) for _ in range(draw(st.integers(0, 8)))
            ]
            own = draw(st.sampled_from(SCOPES))
            at = draw(st.integers(0, len(spans)))
            scopes.append(field(2, b"".join(spans[:at]) + own + b"".join(spans[at:])))
        own = draw(st.sampled_from(RESOURCES))
        resources.append(field(1, own + b"".join(scopes)))
    return b"".join(resources)


def _outcome(body: bytes, decoder: str) -> DecodedBatch | str:
    try:
        return _decode(body, decoder)
    except DecodeError:
        return "DecodeError"


def _whole_outcome(body: bytes, decoder: str) -> DecodedBatch | str:
    """A whole decode's outcome: protobuf's parse, else salvage's (``"DecodeError"``)."""
    return whole_outcome(body, DecodeOptions(decoder=decoder))  # type: ignore[arg-type]


@pytest.mark.skipif(scan._SIFT is None, reason=scan.COMPILED_UNAVAILABLE or "built")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_hostile(), st.sampled_from(DECODERS))
def test_any_hostile_request_decodes_alike_sifted_in_python_and_whole(
    body: bytes, decoder: str
) -> None:
    """The Python pieces may refuse what a whole decode keeps (``protobuf_pieces``: a resource
    protobuf cannot parse, without spans, in a piece of its own); the sift does not."""
    sifted = _outcome(body, decoder)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scan, "_SIFT", None)
        python = _outcome(body, decoder)
    assert sifted == _whole_outcome(body, decoder)
    assert python in (sifted, "DecodeError")


@pytest.mark.skipif(scan._SIFT is None, reason=scan.COMPILED_UNAVAILABLE or "built")
@pytest.mark.parametrize("body", SPAN_BODIES)
def test_the_sift_judges_each_span_as_protobuf_does(body: bytes) -> None:
    dense = field(1, field(2, field(2, body) * 40))
    sparse = field(1, field(2, field(2, body + field(30, b"x" * 40)) * 40))
    for request in (dense, sparse):
        sifted = _outcome(request, "auto")
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(scan, "_SIFT", None)
            assert sifted == _outcome(request, "auto") == _outcome(request, "reference")


@pytest.mark.parametrize("level", ["resource_spans", "scope_spans"])
def test_a_schema_url_that_is_not_utf8_rejects_the_spans_it_holds(path: str, level: str) -> None:
    """Was: protobuf refused the request, and salvage, which read no schema_url, kept every
    span but the malformed ones, or refused the request when there were none (a resource
    or scope protobuf cannot parse rejected its spans: ``protobuf_pieces``). Now: a
    ResourceSpans' or ScopeSpans' schema_url is judged at its place as its resource or
    scope is, and costs its own spans, named, the next resource's kept."""
    kept = field(1, field(2, field(2, span("next").SerializeToString())))
    for spans in (field(2, b"\x00"), field(2, b"")):  # malformed spans, or empty ones
        body = _with_a_bad_schema_url(level, spans * 20 + field(2, span("ok").SerializeToString()))

        batch = _decode(body + kept, "auto")

        assert (batch.received, [r.name for r in batch.spans]) == (22, ["next"])
        assert batch.rejected == {"malformed_span": 21}
        assert batch == _whole_outcome(body + kept, "auto")
        said = f"spans[0]: protobuf cannot parse its {level}' schema_url or unknown fields ("
        assert said in (batch.error_message or "")


def _with_a_bad_schema_url(level: str, spans: bytes) -> bytes:
    """A request of one resource of one scope of ``spans``, the ResourceSpans' (``level``
    "resource_spans") or ScopeSpans' ("scope_spans") schema_url not UTF-8."""
    bad_url = field(3, b"\xff")
    scope = field(2, spans + (bad_url if level == "scope_spans" else b""))
    return field(1, scope + (bad_url if level == "resource_spans" else b""))


@pytest.mark.parametrize(("level", "depth"), [("resource_spans", 100), ("scope_spans", 99)])
def test_unknown_groups_too_deep_for_their_place_reject_the_spans_they_sit_beside(
    path: str, level: str, depth: int
) -> None:
    """Was: protobuf refused groups nested past 100 levels below the request, and salvage,
    which read a ResourceSpans' and a ScopeSpans' fields from their own level, kept their
    spans. Now: read at their place, as protobuf reads them, they cost those spans; nested
    too deep even from their own level, the request's outline is unreadable: refused."""
    groups = _groups(depth)
    spans = field(2, b"\x00") * 20 + field(2, span("ok").SerializeToString())
    scope = field(2, spans + (groups if level == "scope_spans" else b""))
    body = field(1, scope + (groups if level == "resource_spans" else b""))

    batch = _decode(body, "auto")

    assert (batch.received, batch.spans, batch.rejected) == (21, (), {"malformed_span": 21})
    assert batch == _whole_outcome(body, "auto")
    too_deep = body.replace(groups, _groups(101))
    assert _outcome(too_deep, "auto") == _whole_outcome(too_deep, "auto") == "DecodeError"


@pytest.mark.skipif(scan._SIFT is None, reason=scan.COMPILED_UNAVAILABLE or "built")
def test_the_sift_hands_its_pieces_on_in_batches_as_it_finds_them() -> None:
    """A request alternating kept and rejected spans makes a piece of each: all at once,
    they took 21 times a 20 MiB body (docs/deployment.md, Memory). Handed on a batch at a time, they
    are the pieces the sift returns, in order, at most 256 at once."""
    body = SHAPES["mixed"](SIZE)
    batches: list[list[object]] = []
    sift: Any = scan._SIFT

    handed = sift(body, batches.append)

    every = sift(body)
    assert handed is None
    assert isinstance(every, list) and len(every) == 1 + 1210  # the resource, a piece per span
    assert [piece for batch in batches for piece in batch] == every
    assert len(batches) == 5 and max(len(batch) for batch in batches) == 256


def _sift_failing(sift: Any, body: bytes, at: int, consume: Any) -> object:
    """The sift of ``body`` with the ``at``-th memory allocation failing (``_testcapi``)."""
    testcapi = pytest.importorskip("_testcapi")
    testcapi.set_nomemory(at, at + 1)
    try:
        return sift(body, consume)
    except MemoryError:
        return MemoryError
    finally:
        testcapi.remove_mem_hooks()


@pytest.mark.skipif(scan._SIFT is None, reason=scan.COMPILED_UNAVAILABLE or "built")
@pytest.mark.parametrize("handing_on", [False, True])
def test_the_sift_out_of_memory_raises_memory_error_and_leaks_nothing(handing_on: bool) -> None:
    """Every allocation the sift makes, made to fail in turn: each error path gives a
    MemoryError (not a SystemError, a crash or a half-built piece) and frees what it made."""
    pytest.importorskip("_testcapi")
    corrupt_resource = field(1, field(1, field(1, b"\x00")))
    body = SHAPES["mixed"](1000) + corrupt_resource + SHAPES["nested_6"](200)
    sift: Any = scan._SIFT
    consume = (lambda batch: None) if handing_on else None
    expected = sift(body, consume)

    def sweep() -> set[str]:
        outcomes, at, succeeded = set(), 0, 0
        while succeeded < 50:  # past the last allocation
            outcome = _sift_failing(sift, body, at, consume)
            outcomes.add("expected" if outcome == expected else repr(outcome)[:80])
            succeeded = succeeded + 1 if outcome == expected else 0
            at += 1
        return outcomes

    sweep()  # the first MemoryError's and the interpreter's one-time allocations
    gc.collect()
    blocks = sys.getallocatedblocks()
    assert sweep() == {"expected", repr(MemoryError)}
    gc.collect()
    assert sys.getallocatedblocks() - blocks <= 2  # not one per failure (there are hundreds)
