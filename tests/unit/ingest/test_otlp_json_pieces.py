"""OTLP/JSON decoded a piece at a time gives what the request parsed whole gave: the same
batch (records, rejections and their reasons and paths, the partial-success message) or the
same error, for the recorded captures and for any change to a request; and it holds one
piece's parsed spans at a time."""

from __future__ import annotations

import copy
import gc
import json
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import json_memory
from toolwatch.ingest import otlp_json
from toolwatch.ingest.decode_requests import decode_request
from toolwatch.ingest.decode_types import DecodedBatch, DecodeError, DecodeOptions
from toolwatch.ingest.otlp_json_pieces import decode_pieces

OPTIONS = DecodeOptions(reference_keys=frozenset({"tenant"}))
FIXTURES = Path(__file__).parents[2] / "fixtures" / "otlp"
CAPTURES = sorted(p for p in FIXTURES.glob("*.json") if not p.name.endswith(".expected.json"))
#: Parts a piece holds: one span at a time, runs of a scope's spans, whole scopes, whole
#: resources, and the receiver's.
SIZES = [1, 2, 3, 5, 10, 64]

Outcome = DecodedBatch | tuple[str, str]


def whole(body: bytes | str) -> Outcome:
    """What ``decode_otlp_json`` gave before: the request parsed whole (``parse_otlp_json``'s
    way), then decoded."""
    try:
        request, problems, _ = otlp_json._parse(body, sys.maxsize)
        return decode_request(request, OPTIONS, problems, json_names=True)
    except DecodeError as error:
        return (str(error), error.field)


def pieces(body: bytes | str, size: int) -> Outcome:
    try:
        return decode_pieces(otlp_json._outline(body), OPTIONS, size)
    except DecodeError as error:
        return (str(error), error.field)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda path: path.stem)
def test_a_capture_decodes_piece_by_piece_as_whole(path: Path) -> None:
    body = path.read_bytes()
    expected = whole(body)
    assert isinstance(expected, DecodedBatch) and expected.spans
    for size in SIZES:
        assert pieces(body, size) == expected, size


TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _span(n: int) -> dict[str, Any]:
    arguments = {"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "two"}]}}
    return {
        "traceId": TRACE,
        "spanId": f"{n + 1:016x}",
        "parentSpanId": "00f067aa0ba902b7" if n else "",
        "name": f"execute_tool t{n}",
        "kind": 1,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": 1700000000500000000,
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
            {"key": "gen_ai.tool.name", "value": {"stringValue": f"t{n}"}},
            {"key": "gen_ai.tool.call.arguments", "value": {"kvlistValue": {"values": [
                {"key": "a", "value": arguments}
            ]}}},
        ],
        "events": [{"name": "exception", "attributes": [
            {"key": "exception.type", "value": {"stringValue": "E"}}
        ]}],
        "links": [{"traceId": TRACE, "spanId": "00f067aa0ba902b7"}],
        "status": {"code": 2, "message": "failed"},
    }  # fmt: skip


def _request() -> dict[str, Any]:
    """Two resources of two scopes of three spans each."""
    spans = iter(range(12))
    resources = []
    for r in range(2):
        scopes = [
            {
                "scope": {"name": f"scope{s}", "version": "1"},
                "spans": [_span(next(spans)) for _ in range(3)],
                "schemaUrl": "https://opentelemetry.io/schemas/1.26.0",
            }
            for s in range(2)
        ]
        attributes = [
            {"key": "service.name", "value": {"stringValue": f"svc{r}"}},
            {"key": "tenant", "value": {"stringValue": "acme"}},
        ]
        resources.append({"resource": {"attributes": attributes}, "scopeSpans": scopes})
    return {"resourceSpans": resources}


VALID = _request()


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict | list):
        children = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in children:
            yield from _nodes(child, (*path, key))


PATHS = [path for path in _nodes(VALID) if path]
KEYS = [path for path in PATHS if isinstance(path[-1], str)]


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"stringValue": "leaf"}
    for _ in range(depth):
        value = {"arrayValue": {"values": [value]}}
    return value


WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=6),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.sampled_from([{}, [], [{}], "zz", "00" * 16, "0" * 16, {"arrayValue": {"values": [7]}}]),
    st.integers(40, 60).map(_nested),  # too deep for protobuf, in a request or alone
)
#: Key spellings: snake_case (both, when kept beside the camelCase), no field's name (a lone
#: surrogate, non-ASCII), an extension's (protobuf refuses those wherever they are).
SPELLINGS = {"traceId": "trace_id", "spanId": "span_id", "resourceSpans": "resource_spans"}
SPELLINGS |= {"scopeSpans": "scope_spans", "schemaUrl": "schema_url"}


def _apply(document: dict[str, Any], path: tuple[Any, ...], change: Callable[..., None]) -> None:
    parent: Any = document
    try:
        for key in path[:-1]:
            parent = parent[key]
        change(parent, path[-1])
    except (AttributeError, KeyError, IndexError, TypeError):
        pass  # an earlier change took the path away


def _respell(how: str) -> Callable[[Any, Any], None]:
    def change(parent: Any, key: str) -> None:
        if how == "extension":
            new = f"[{key}]"
        elif how in ("snake", "both"):
            new = SPELLINGS.get(key, f"{key}_x")
        else:
            new = how + key
        parent[new] = copy.deepcopy(parent[key]) if how == "both" else parent.pop(key)

    return change


HOW = st.sampled_from(["snake", "both", "\udc80", "é", "extension"])


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.tuples(st.sampled_from(PATHS), WRONG, st.booleans()), min_size=1, max_size=3),
    st.lists(st.tuples(st.sampled_from(KEYS), HOW), max_size=2),
    st.sampled_from(SIZES),
)
def test_any_changed_request_decodes_piece_by_piece_as_whole(
    changes: list[tuple[tuple[Any, ...], Any, bool]],
    spellings: list[tuple[tuple[Any, ...], str]],
    size: int,
) -> None:
    """Values of any kind anywhere, fields gone, spelled twice or as no field: the same
    records and rejections (one span's fault rejects it), or the same error (a fault outside
    the spans), and among several faults the one a whole parse meets first."""
    document = copy.deepcopy(VALID)
    for path, how in spellings:
        _apply(document, path, _respell(how))
    for path, value, drop in changes:
        if drop:
            _apply(document, path, lambda parent, key: parent.pop(key))
        else:
            _apply(document, path, lambda parent, key, v=value: parent.__setitem__(key, v))
    body = json.dumps(document)
    assert pieces(body, size) == whole(body)


#: Paths inside a resource's or a scope's own object (``resource``, ``scope``), and their
#: ResourceSpans' or ScopeSpans' ``schemaUrl``.
HEADS = [path for path in PATHS if "resource" in path or "scope" in path]
HEADS += [path for path in PATHS if path[-1] == "schemaUrl"]
HEADS += [("resourceSpans", r, "schemaUrl") for r in range(2)]
#: A text no UTF-8 holds: protobuf refuses it wherever it is.
LONE_SURROGATE = st.sampled_from(["\ud800", "https://x/\udfff"])


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.tuples(st.sampled_from(HEADS), WRONG | LONE_SURROGATE), min_size=1, max_size=2),
    st.lists(st.tuples(st.sampled_from(PATHS), WRONG, st.booleans()), max_size=2),
    st.sampled_from(SIZES),
)
def test_a_resource_or_scope_at_fault_decodes_piece_by_piece_as_whole(
    heads: list[tuple[tuple[Any, ...], Any]],
    changes: list[tuple[tuple[Any, ...], Any, bool]],
    size: int,
) -> None:
    """Values of any kind in resources and scopes (of the wrong shape, which costs their
    spans, or that protobuf cannot read) and in their ``schemaUrl`` (a lone surrogate costs
    their spans too), beside changes anywhere (fields gone, resources
    and scopes without spans): the same records and rejections, or the same error."""
    document = copy.deepcopy(VALID)
    for path, value in heads:
        _apply(document, path, lambda parent, key, v=value: parent.__setitem__(key, v))
    for path, value, drop in changes:
        if drop:
            _apply(document, path, lambda parent, key: parent.pop(key))
        else:
            _apply(document, path, lambda parent, key, v=value: parent.__setitem__(key, v))
    body = json.dumps(document)
    assert pieces(body, size) == whole(body)


TEXTS = [
    json.dumps(VALID),
    json.dumps(VALID, indent=1),
    json.dumps({"resourceSpans": [], "x": [1, {"a": [2]}]}),
]


INSERTS = ["", "{", "}", "[", "]", ",", ":", '"', "x", " ", "\n", "1", "null", "\\", "\ufeff"]
EDITS = st.tuples(st.integers(0, 10**6), st.integers(0, 3), st.sampled_from([*INSERTS, '"a":']))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(TEXTS), st.lists(EDITS, min_size=1, max_size=3), st.sampled_from(SIZES))
def test_any_broken_body_fails_piece_by_piece_as_whole(
    text: str, edits: list[tuple[int, int, str]], size: int
) -> None:
    """JSON broken anywhere (in a span, in the outline, after it): ``json``'s own error,
    at the same line and column."""
    for where, cut, insert in edits:
        at = where % (len(text) + 1)
        text = text[:at] + insert + text[at + cut :]
    assert pieces(text, size) == whole(text)
    assert pieces(text.encode(), size) == whole(text.encode())


def test_a_resource_of_several_pieces_is_read_for_each_of_its_spans() -> None:
    """Sent with a resource's first piece only, its service and reference keys still reach
    the spans of its later pieces."""
    body = json.dumps(VALID)
    batch = pieces(body, 2)
    assert isinstance(batch, DecodedBatch) and len(batch.spans) == 12
    assert [record.service for record in batch.spans] == ["svc0"] * 6 + ["svc1"] * 6
    assert {record.reference_keys for record in batch.spans} == {(("tenant", "acme"),)}


def _peak(work: Callable[[], object]) -> int:
    otlp_json.decode_otlp_json(json.dumps(VALID), OPTIONS)  # what is built once, first
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_decoding_holds_a_piece_of_the_request_at_a_time() -> None:
    # Small spans of twelve attributes each: parsed whole, the request held 8.5 times its size
    # (its parsed JSON 7 times); a piece at a time, 2.2 times this 1 MiB (its text, the
    # records and a piece of 64 spans, an eighth of it; 1.6 times 20 MiB).
    body = json_memory.attrs(2**20)
    peak = _peak(lambda: otlp_json.decode_otlp_json(body, OPTIONS))
    assert peak < 3 * len(body), peak / len(body)


def test_rejected_spans_are_counted_without_holding_a_text_for_each() -> None:
    # 30,000 empty spans: 9 times their 90 KB held a piece at a time (where each is in the
    # text, 16 bytes); 35 with a message kept for every rejected span (155 parsed whole).
    body = json_memory.empty_spans(90_000)
    batch: list[DecodedBatch] = []
    peak = _peak(lambda: batch.append(otlp_json.decode_otlp_json(body, OPTIONS)))
    assert batch[0].rejected == {"invalid_trace_id": 30_000}
    assert (batch[0].error_message or "").endswith("; and 29997 more")
    assert peak < 15 * len(body), peak / len(body)
