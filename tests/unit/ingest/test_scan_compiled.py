"""The compiled scanner against the reference: the same scan for every request, or a hand-back.

``toolwatch.ingest._wire`` must give exactly the reference scanner's result (protobuf's own
parse), or ``None`` so that the reference decides. Requests an SDK would send (any values,
unknown fields, several resources and scopes, events) must never be handed back; corrupt and
merged encodings may be, and where protobuf rejects a body the compiled scanner must too.
"""

from __future__ import annotations

import math
import shutil
import sysconfig
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ingest_support import REFERENCE_KEYS, any_value, event, request, sdk_requests, span, varint
from ingest_support import field as ld  # a length-delimited field, short in the bodies below
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from toolwatch import __version__, compiled, compiled_state
from toolwatch.app import App
from toolwatch.config import Config, ConfigError, check_hot_path, load_config
from toolwatch.config import whole as config_whole
from toolwatch.ingest import scan as scan_module
from toolwatch.ingest.decode_requests import decode_protobuf, scanner
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.ingest.otlp_json import parse_otlp_json
from toolwatch.ingest.scan import Scan, Scanner, ScanPlan, WireError, schema_mismatch
from toolwatch.listeners import StartError

try:
    from toolwatch.ingest import _wire
except ImportError:  # built without a C compiler: the reference scanner runs
    _wire = None
#: The tests of the extension itself, skipped where it is not built.
built = pytest.mark.skipif(_wire is None, reason="the compiled scanner is not built")

FIXTURES = Path(__file__).parents[2] / "fixtures" / "otlp"


def compiled_plan(max_value_bytes: int = 65_536, max_span_attributes: int = 1024) -> Any:
    if scan_module.COMPILED_UNAVAILABLE:
        pytest.skip(f"compiled scanner unavailable: {scan_module.COMPILED_UNAVAILABLE}")
    options = DecodeOptions(REFERENCE_KEYS, max_value_bytes, max_span_attributes)
    return scanner(options)


def reference_of(compiled: Scanner) -> Scanner:
    return Scanner.for_plan(compiled.plan, "reference")


def reference_outcome(body: bytes, plan: ScanPlan) -> Scan | None:
    """The reference scan, or ``None`` where protobuf rejects the body."""
    try:
        return Scanner.for_plan(plan, "reference").scan_bytes(body)
    except WireError:
        return None


def compiled_scan(compiled: Scanner, body: bytes) -> Scan | None:
    found = compiled._compiled.scan(body)  # type: ignore[union-attr]
    return None if found is None else Scan(*found)


def assert_same(
    body: bytes, max_value_bytes: int = 65_536, max_span_attributes: int = 1024
) -> Scan:
    """The compiled scan of a body an SDK could send: taken (no hand-back), and equal."""
    compiled = compiled_plan(max_value_bytes, max_span_attributes)
    fast = compiled_scan(compiled, body)
    assert fast is not None, "a plainly encoded request was handed back to the reference"
    assert fast == reference_of(compiled).scan_bytes(body)
    return fast


# -- the build and the schema ---------------------------------------------------------------


def test_the_compiled_scanner_is_built_wherever_there_is_a_c_compiler() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) on this machine: the reference scanner runs")
    assert scan_module.COMPILED_UNAVAILABLE == ""
    assert scanner(DecodeOptions()).compiled


@built
def test_the_compiled_schema_is_opentelemetry_protos_field_for_field() -> None:
    assert schema_mismatch(_wire.SCHEMA) is None
    assert _wire.SCHEMA["opentelemetry.proto.trace.v1.Span"][9] == ("attributes", "message")


@built
def test_a_schema_difference_is_named_so_the_scanner_is_not_used() -> None:
    changed = {name: dict(fields) for name, fields in _wire.SCHEMA.items()}
    del changed["opentelemetry.proto.trace.v1.Status"][2]

    problem = schema_mismatch(changed)
    assert problem is not None
    assert problem.startswith("opentelemetry.proto.trace.v1.Status:")
    assert "'message'" in problem


def test_requiring_the_compiled_scanner_where_it_is_missing_fails_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = scanner(DecodeOptions()).plan
    monkeypatch.setattr(scan_module, "_COMPILED", None)
    monkeypatch.setattr(scan_module, "COMPILED_UNAVAILABLE", "the extension is not built")

    with pytest.raises(RuntimeError, match=r"ingest.decoder is 'compiled', but the extension"):
        Scanner.for_plan(plan, "compiled")
    assert not Scanner.for_plan(plan, "auto").compiled


@built
def test_a_plan_refuses_keys_that_are_not_strings_and_a_non_positive_limit() -> None:
    with pytest.raises(TypeError, match="keys must be str"):
        _wire.Plan([b"gen_ai.tool.name"], [], [], [], [], 100, 8)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="max_value_bytes must be positive, got 0"):
        _wire.Plan([], [], [], [], [], 0, 8)
    with pytest.raises(ValueError, match="max_span_attributes must be positive, got 0"):
        _wire.Plan([], [], [], [], [], 100, 0)
    with pytest.raises(RuntimeError, match=r"Plan.__init__ was not called"):
        _wire.Plan.__new__(_wire.Plan).scan(b"")


# -- what SDKs send: always taken, always equal ----------------------------------------------


def fixture_bodies() -> list[tuple[str, bytes]]:
    bodies = []
    for path in sorted(FIXTURES.glob("*.json")):
        if path.name.endswith(".expected.json"):
            continue
        bodies.append((path.name, parse_otlp_json(path.read_bytes()).SerializeToString()))
    return bodies


def test_every_captured_instrumentation_request_scans_the_same() -> None:
    bodies = fixture_bodies()
    assert len(bodies) >= 40
    for name, body in bodies:
        scanned = assert_same(body)
        assert scanned.spans, name


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sdk_requests(), st.sampled_from([1, 7, 16, 61, 200, 65_536]), st.sampled_from([1, 3, 1024]))
def test_any_request_an_sdk_could_send_scans_the_same(
    message: ExportTraceServiceRequest, max_value_bytes: int, max_span_attributes: int
) -> None:
    body = message.SerializeToString()
    assert_same(body, max_value_bytes, max_span_attributes)
    options = DecodeOptions(REFERENCE_KEYS, max_value_bytes, max_span_attributes)
    reference = DecodeOptions(REFERENCE_KEYS, max_value_bytes, max_span_attributes, "reference")
    assert decode_protobuf(body, options) == decode_protobuf(body, reference)


def test_values_nested_past_the_conversion_depth_read_as_none_in_both() -> None:
    value: Any = "deep"
    for _ in range(40):
        value = [value]
    body = request(span("t", {"gen_ai.tool.call.arguments": value})).SerializeToString()
    (found,) = assert_same(body).spans
    arguments = found[11]["gen_ai.tool.call.arguments"]
    for _ in range(32):
        (arguments,) = arguments
    assert arguments is None


def nested_arrays(levels: int) -> bytes:
    """An attribute value of ``levels`` arrays, each holding the next, around one string."""
    value = ld(1, b"deep")
    for _ in range(levels):
        value = ld(5, ld(1, value))
    return value


@pytest.mark.parametrize("levels", range(44, 52))
def test_nesting_near_protobufs_depth_limit_is_taken_only_where_protobuf_takes_it(
    levels: int,
) -> None:
    attribute = ld(1, b"gen_ai.tool.call.arguments") + ld(2, nested_arrays(levels))
    body = request_of(SPAN.SerializeToString() + ld(9, attribute))
    compiled = compiled_plan()
    fast = compiled_scan(compiled, body)
    expected = reference_outcome(body, compiled.plan)
    assert fast == expected  # the same scan, or both refuse it (fast None, protobuf an error)
    assert (expected is None) == (levels >= 48)  # 4 levels above the value, 2 per array


def test_a_nan_double_is_a_nan_in_both() -> None:
    body = request(span("t", {"gen_ai.request.model": math.nan})).SerializeToString()
    compiled = compiled_plan()
    fast = compiled_scan(compiled, body)
    assert fast is not None
    assert math.isnan(fast.spans[0][11]["gen_ai.request.model"])
    assert math.isnan(reference_of(compiled).scan_bytes(body).spans[0][11]["gen_ai.request.model"])


# -- on the wire, by hand: unusual but valid encodings --------------------------------------


def request_of(*span_bodies: bytes, resource: bytes = b"") -> bytes:
    scope = b"".join(ld(2, body) for body in span_bodies)
    return ld(1, ld(1, resource) + ld(2, scope))


SPAN = span("execute_tool t", {"gen_ai.tool.name": "t", "gen_ai.operation.name": "execute_tool"})


def unknown_fields() -> bytes:
    """One unknown field of every wire type that protobuf skips."""
    return (
        varint(90 << 3 | 0)
        + varint(2**63)
        + varint(91 << 3 | 1)
        + b"\xff" * 8
        + ld(92, b"\xff\xfe not text")
        + varint(93 << 3 | 5)
        + b"\x00" * 4
    )


def test_unknown_fields_everywhere_are_skipped_alike() -> None:
    attribute = ld(1, b"gen_ai.agent.name") + ld(2, ld(1, b"bot") + unknown_fields())
    body = SPAN.SerializeToString() + ld(9, attribute + unknown_fields()) + unknown_fields()
    resource = ld(1, ld(1, b"service.name") + ld(2, ld(1, b"svc"))) + unknown_fields()
    scanned = assert_same(request_of(body, resource=resource) + unknown_fields())
    assert scanned.spans[0][11]["gen_ai.agent.name"] == "bot"
    assert scanned.resources == [{"service.name": "svc"}]


def test_a_value_before_its_key_and_repeated_span_fields_read_as_protobuf_reads_them() -> None:
    attribute = ld(2, ld(1, b"late-key")) + ld(1, b"gen_ai.agent.name")
    renamed = ld(5, b"first") + ld(5, b"second")  # a repeated scalar field: the last one wins
    status = ld(15, varint(3 << 3) + varint(1)) + ld(15, ld(2, b"m"))  # merged: code stays 1
    body = SPAN.SerializeToString() + ld(9, attribute) + renamed + status
    (found,) = assert_same(request_of(body)).spans
    assert found[6] == "second"
    assert found[10] == 1
    assert found[11]["gen_ai.agent.name"] == "late-key"


@pytest.mark.parametrize(
    ("code", "message", "kept"),
    [
        (
            2,
            "Guardrail tripwire triggered: {'guardrail': 'g'}",
            "Guardrail tripwire triggered: {'guardrail': 'g'}",
        ),
        (1, "ok, with a message it should not have", None),  # not an error: not kept
        (0, "unset", None),
        (2, "", None),
        (2, "x" * 600, "x" * 512),  # the first 512 bytes
        (2, "x" * 511 + "é" + "y", "x" * 511),  # a character across the cut: left out
        (2, "é" * 300, "é" * 256),
        (2, "€" * 200, "€" * 170),  # 3 bytes each: 510 kept
    ],
)
def test_an_error_spans_status_message_is_kept_cut_alike(
    code: int, message: str, kept: str | None
) -> None:
    one = span("turn")
    one.status.code = code  # type: ignore[assignment]
    one.status.message = message
    (found,) = assert_same(request(one).SerializeToString()).spans
    assert (found[10], found[15]) == (code, kept)
    assert scan_module.status_message(code, message) == kept


def test_a_status_given_twice_merges_its_message_as_protobuf_does() -> None:
    first = ld(15, ld(2, b"first") + varint(3 << 3) + varint(2))
    second = ld(15, ld(2, b"second"))  # merged: the code stays 2, the message is the last
    (found,) = assert_same(request_of(SPAN.SerializeToString() + first + second)).spans
    assert (found[10], found[15]) == (2, "second")


def test_spans_of_one_trace_next_to_each_other_share_one_trace_id_object() -> None:
    one, other = bytes(range(1, 17)), bytes(range(2, 18))
    ids = [one, one, other, one, one]
    spans = [span(f"s{i}", trace_id=t, span_id=bytes([i + 1]) * 8) for i, t in enumerate(ids)]
    body = request(*spans[:3], scopes=[spans[:3], spans[3:]]).SerializeToString()
    scanned = assert_same(body).spans
    assert [s[3] for s in scanned] == ids
    assert scanned[0][3] is scanned[1][3]  # shared
    assert scanned[2][3] is not scanned[1][3]
    assert scanned[3][3] is scanned[4][3]  # across scopes too
    assert scanned[3][3] is not scanned[0][3]  # only with the span just before


def test_siblings_share_a_parent_id_object_and_spans_short_repeated_strings() -> None:
    parent, arguments = bytes([9]) * 8, '{"order_id": "A-1"}'
    attrs = {
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.tool.call.arguments": arguments,
        "gen_ai.agent.name": "café-bot",
    }
    siblings = [span("chat gpt-4o", attrs, span_id=bytes([i]) * 8, parent=parent) for i in (1, 2)]
    child = span("chat gpt-4o", span_id=bytes([3]) * 8, parent=bytes([2]) * 8)
    first, second, third = assert_same(request(*siblings, child).SerializeToString()).spans
    assert first[5] is second[5]  # siblings: one parent-id object
    assert third[5] is second[4]  # right after its parent: the parent's own id object
    assert first[6] is second[6] is third[6] == "chat gpt-4o"  # one name object
    assert first[11]["gen_ai.request.model"] is second[11]["gen_ai.request.model"]
    own = [s[11]["gen_ai.tool.call.arguments"] for s in (first, second)]
    assert own[0] == own[1] == arguments and own[0] is not own[1]  # JSON: one per call
    named = [s[11]["gen_ai.agent.name"] for s in (first, second)]
    assert named[0] == named[1] == "café-bot" and named[0] is not named[1]  # ASCII only


def test_a_map_key_given_twice_keeps_its_first_place_and_its_last_value_in_both() -> None:
    pair = ld(1, ld(1, b"k") + ld(2, ld(1, b"1"))) + ld(1, ld(1, b"j") + ld(2, ld(1, b"2")))
    pairs = pair + ld(1, ld(1, b"k") + ld(2, ld(1, b"3")))
    body = request_of(
        SPAN.SerializeToString() + ld(9, ld(1, b"gen_ai.agent.name") + ld(2, ld(6, pairs)))
    )
    value = assert_same(body).spans[0][11]["gen_ai.agent.name"]
    assert list(value.items()) == [("k", "3"), ("j", "2")]


def test_a_span_keeps_at_most_its_cap_of_wanted_keys_and_counts_the_new_ones_beyond() -> None:
    prefix = "llm.output_messages.0.message.tool_calls"
    one = span("llm", {"openinference.span.kind": "LLM", "unwanted.key": "x"})
    for i in range(4):
        one.attributes.add(key=f"{prefix}.{i}.tool_call.function.name", value=any_value(f"t{i}"))
    # Beyond the cap, none of these would add a key: a repeated key takes its last value as
    # below the cap, and values that read as None are never kept.
    one.attributes.add(key=f"{prefix}.0.tool_call.function.name", value=any_value("again"))
    one.attributes.add(key=f"{prefix}.9.tool_call.id")  # no value
    one.attributes.add(key=f"{prefix}.8.tool_call.id", value=AnyValue())  # a value, no member
    body = request_of(one.SerializeToString())
    kept = assert_same(body, max_span_attributes=3).spans[0]
    assert kept[11] == {
        "openinference.span.kind": "LLM",
        f"{prefix}.0.tool_call.function.name": "again",
        f"{prefix}.1.tool_call.function.name": "t1",
    }
    assert kept[12] == 2  # calls 2 and 3
    assert assert_same(body, max_span_attributes=5).spans[0][12] == 0
    # The same attributes in another order give the same verdict.
    one.attributes.sort(key=lambda pair: pair.key, reverse=True)
    reordered = assert_same(request_of(one.SerializeToString()), max_span_attributes=5)
    assert reordered.spans[0][12] == 0


def test_resources_split_over_two_fields_merge_as_protobuf_merges_them() -> None:
    resource = ld(1, ld(1, b"service.name") + ld(2, ld(1, b"first")))
    body = ld(
        1,
        ld(1, resource) + ld(2, ld(2, SPAN.SerializeToString())) + ld(1, resource[:0]),
    )
    twice = ld(
        1,
        ld(1, resource) + ld(1, ld(1, ld(1, b"toolwatch.case_id") + ld(2, ld(1, b"c")))),
    )
    assert assert_same(body).resources == [{"service.name": "first"}]
    assert assert_same(twice).resources == [{"service.name": "first", "toolwatch.case_id": "c"}]


@pytest.mark.parametrize(
    "attribute",
    [
        pytest.param(ld(1, b"gen_ai.agent.name") * 2 + ld(2, ld(1, b"x")), id="key-twice"),
        pytest.param(ld(1, b"gen_ai.agent.name") + ld(2, ld(1, b"a")) * 2, id="value-twice"),
        pytest.param(
            ld(1, b"gen_ai.agent.name") + ld(2, ld(1, b"a") + varint(3 << 3) + b"\x05"),
            id="two-members",
        ),
        pytest.param(
            ld(1, b"gen_ai.agent.name") + varint(95 << 3 | 3) + varint(95 << 3 | 4), id="group"
        ),
        pytest.param(ld(1, b"gen_ai.agent.name") + varint(2 << 3 | 0) + b"\x01", id="wire-type"),
    ],
)
def test_merged_and_unusual_encodings_go_to_the_reference(attribute: bytes) -> None:
    body = request_of(SPAN.SerializeToString() + ld(9, attribute))
    compiled = compiled_plan()
    assert compiled_scan(compiled, body) is None
    options = DecodeOptions(reference_keys=REFERENCE_KEYS)
    reference = DecodeOptions(reference_keys=REFERENCE_KEYS, decoder="reference")
    assert decode_protobuf(body, options) == decode_protobuf(body, reference)


# -- corrupt bytes: never accepted where protobuf rejects them --------------------------------


def realistic_body() -> bytes:
    spans = [
        span("invoke_agent bot", {"gen_ai.operation.name": "invoke_agent"}, parent=b""),
        span(
            "execute_tool t",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.call.arguments": {"a": [1, "é"]},
            },
            events=[event("gen_ai.tool.message", {"content": "{}", "id": "c1", "x": b"\x01"})],
        ),
        span(
            "chat m", {"gen_ai.output.messages": "[]", "gen_ai.response.finish_reasons": ["stop"]}
        ),
    ]
    body: bytes = request(*spans, resource={"service.name": "svc"}).SerializeToString()
    return body


def check_corrupt(body: bytes) -> None:
    compiled = compiled_plan()
    fast = compiled_scan(compiled, body)
    expected = reference_outcome(body, compiled.plan)
    if fast is not None:
        assert expected is not None, "the compiled scanner took a body protobuf rejects"
        assert fast == expected


def test_every_truncation_is_rejected_or_scanned_alike() -> None:
    body = realistic_body()
    for cut in range(len(body)):
        check_corrupt(body[:cut])


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_corrupted_bytes_are_rejected_or_scanned_alike(data: st.DataObject) -> None:
    body = bytearray(realistic_body())
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(body) - 1))
        action = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        if action == "flip":
            body[at] = data.draw(st.integers(0, 255))
        elif action == "insert":
            body[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        else:
            del body[at]
    check_corrupt(bytes(body))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_are_rejected_or_scanned_alike(body: bytes) -> None:
    check_corrupt(body)


@pytest.mark.parametrize(
    "bad",
    [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"ok\x80"],
    ids=["ff", "overlong", "surrogate", "past-max", "cut", "stray-continuation"],
)
@pytest.mark.parametrize("where", ["wanted-value", "unwanted-value", "key", "scope", "name"])
def test_invalid_utf8_anywhere_is_rejected_as_protobuf_rejects_it(bad: bytes, where: str) -> None:
    value = ld(2, ld(1, bad))
    fields = {
        "wanted-value": ld(9, ld(1, b"gen_ai.agent.name") + value),
        "unwanted-value": ld(9, ld(1, b"http.url") + value),
        "key": ld(9, ld(1, bad) + ld(2, ld(1, b"x"))),
        "name": ld(5, bad),
    }
    span_body = SPAN.SerializeToString() + fields.get(where, b"")
    body = request_of(span_body)
    if where == "scope":
        body = ld(1, ld(2, ld(1, ld(1, bad)) + ld(2, span_body)))
    compiled = compiled_plan()
    assert reference_outcome(body, compiled.plan) is None
    assert compiled_scan(compiled, body) is None


# -- no leaks ---------------------------------------------------------------------------------


def test_scanning_keeps_no_memory_behind() -> None:
    compiled = compiled_plan(max_value_bytes=16)
    bodies = [
        realistic_body(),
        realistic_body()[:-3],
        request_of(SPAN.SerializeToString() + b"\x0b"),
    ]
    bodies.append(request_of(SPAN.SerializeToString() + ld(9, ld(1, b"gen_ai.agent.name") * 2)))
    for body in bodies * 50:  # warm up interned strings and free lists
        compiled._compiled.scan(body)  # type: ignore[union-attr]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for body in bodies * 2_000:
            compiled._compiled.scan(body)  # type: ignore[union-attr]
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024  # 8,000 scans: a leak of one object each would be far more


# -- the ingest.decoder setting ---------------------------------------------------------------


def test_a_required_compiled_scanner_that_is_missing_stops_start_up_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve`` and ``check-config`` refuse it (``check_hot_path``); ``replay``, which decodes
    no OTLP, loads the configuration all the same."""
    monkeypatch.setattr(config_whole, "COMPILED_UNAVAILABLE", "the extension is not built")
    path = tmp_path / "toolwatch.yaml"
    path.write_text("ingest:\n  decoder: compiled\n")

    config = load_config(path)
    with pytest.raises(ConfigError) as caught:
        check_hot_path(config, path)
    message = str(caught.value)
    assert str(path) in message
    assert "ingest.decoder" in message
    assert "the compiled OTLP scanner cannot be used: the extension is not built" in message


@pytest.mark.parametrize("decoder", ["auto", "reference"])
def test_the_server_reports_the_scanner_and_hot_path_it_runs(decoder: str) -> None:
    config = Config.model_validate({"ingest": {"decoder": decoder}})
    app = App(config)
    runs = "reference" if decoder == "reference" or _wire is None else "compiled"
    hot_path = "compiled" if compiled_state.state().all_compiled else "python"
    labels = {"version": __version__, "revision": "unknown", "decoder": runs, "hot_path": hot_path}
    assert app.registry.get_sample_value("toolwatch_build_info", labels) == 1.0


@built
def test_a_required_compiled_build_runs_the_compiled_hot_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ingest.decoder: compiled`` refuses to start a server whose mypyc-compiled modules
    run as Python (TOOLWATCH_PURE_PYTHON=1 left set, or a build without them)."""
    config = Config.model_validate({"ingest": {"decoder": "compiled"}})
    if compiled_state.state().all_compiled:
        App(config)  # starts
    monkeypatch.setenv(compiled.PURE_PYTHON_ENV, "1")
    with pytest.raises(StartError, match=r"the hot path runs pure Python \(TOOLWATCH_PURE"):
        App(config)
