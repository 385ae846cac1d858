"""Empty envelopes (OTLP: messages with nothing in them, two bytes each) cost a small factor
of their request's size to decode, like any request (docs/deployment.md, Memory): a request dense in
resources, scopes or spans is decoded in pieces (``toolwatch.ingest.protobuf_pieces``)."""

from __future__ import annotations

import os
import re
import sys
import urllib.request
from pathlib import Path

import pytest
from google.protobuf.internal.encoder import _VarintBytes
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from bench.hostile_decode import SHAPES
from tests.integration.cli_support import LISTENING, Served, clean_env
from tests.integration.otlp_support import PROTOBUF, refund_request
from toolwatch.ingest import scan


def _length_delimited(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + _VarintBytes(len(payload)) + payload


def _empty_envelopes(kind: str, size: int) -> bytes:
    """A protobuf ``ExportTraceServiceRequest`` of about ``size`` bytes holding nothing but
    empty messages, two bytes each: ``ResourceSpans`` with no ``ScopeSpans``, or one scope
    of spans that are empty (no ids)."""
    if kind == "empty resource_spans":
        return b"\x0a\x00" * (size // 2)
    spans = b"\x12\x00" * (size // 2 - 16)
    return _length_delimited(0x0A, _length_delimited(0x12, spans))


def _peak_resident_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmHWM:\s+(\d+) kB", status)
    assert match is not None
    return int(match.group(1)) / 1024


@pytest.mark.parametrize("decoder", ["auto", "reference"])
@pytest.mark.parametrize("kind", ["empty resource_spans", "empty spans"])
def test_a_request_of_empty_envelopes_stays_within_the_documented_decode_memory(
    tmp_path: Path, kind: str, decoder: str
) -> None:
    """docs/deployment.md, Memory: the request being decoded costs ``7 x max_request_bytes`` in the
    sizing formula, 11 times for spans of nothing but ids and 16 times at worst ("arrays of
    empty arrays ... from a sender that writes them on purpose"). A body of empty messages,
    two bytes each (OTLP calls them empty envelopes: receivers MAY ignore them), takes a
    real ``toolwatch serve`` far past that: measured with the reference scanner, 2 MiB of
    empty spans took the server's peak from 81 to 545 MiB (232 times the body), and the
    default 20 MiB took it to 4.7 GB, with every other export waiting 66 s for its decoding
    turn; empty ResourceSpans cost 70 times their size. One such request, from any client
    that can reach the port, gets a pod sized by the documented formula (1.6 GiB) OOM-killed.
    Fixed, the growth stays within the documented worst case, 16 times the body."""
    size = 2 * 2**20
    body = _empty_envelopes(kind, size)
    assert len(body) <= size

    grown, response = _served_decode(tmp_path, decoder, size, body)

    assert grown <= 16 * size / 2**20, f"decoding {len(body)} bytes grew the peak {grown:.0f} MiB"
    spans = size // 2 - 16 if kind == "empty spans" else 0
    assert response.partial_success.rejected_spans == spans


@pytest.mark.skipif(scan._SIFT is None, reason=scan.COMPILED_UNAVAILABLE or "built")
def test_a_request_alternating_kept_and_corrupt_spans_stays_within_the_documented_memory(
    tmp_path: Path,
) -> None:
    """The compiled sift (``_wire.sift``) makes a piece of each span of a dense request that
    alternates spans it keeps with spans it rejects (``bench.hostile_decode``'s ``mixed``:
    spans of ids only and 3-byte corrupt ones). Returned all at once, the pieces took 21
    times the body (20 MiB, ``decode_protobuf`` alone), past the documented 16; handed on
    and decoded a batch at a time, what grows is the records of the valid spans."""
    size = 2 * 2**20
    body = SHAPES["mixed"](size - 1024)

    grown, response = _served_decode(tmp_path, "auto", size, body)

    assert grown <= 16 * size / 2**20, f"decoding {len(body)} bytes grew the peak {grown:.0f} MiB"
    corrupt = body.count(b"\x12\x01\x00")  # the others: over max_spans_per_trace (one trace)
    assert response.partial_success.error_message.startswith(f"{corrupt} spans rejected; ")


def _served_decode(
    tmp_path: Path, decoder: str, size: int, body: bytes
) -> tuple[float, ExportTraceServiceResponse]:
    """How much a real ``toolwatch serve`` (``max_request_bytes: size``) grew its peak
    resident memory to take ``body`` over OTLP/HTTP, and its answer."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(f"ingest:\n  max_request_bytes: {size}\n  decoder: {decoder}\n")
    env = clean_env(PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    if "TOOLWATCH_PURE_PYTHON" in os.environ:
        env["TOOLWATCH_PURE_PYTHON"] = os.environ["TOOLWATCH_PURE_PYTHON"]
    command = [sys.executable, "-c", "import sys; from toolwatch.cli import main; sys.exit(main())"]
    addresses = ("--grpc-listen", "--http-listen", "--metrics-listen", "--stream-listen")
    args = ["serve", "--config", str(config), "--findings", str(tmp_path / "findings.jsonl")]
    for flag in addresses:
        args += [flag, "127.0.0.1:0"]
    served = Served(args, env, command=command)
    try:
        http = served.wait_for(LISTENING)["http"]
        url = f"http://{http}/v1/traces"
        headers = {"Content-Type": PROTOBUF}
        warm = urllib.request.Request(url, refund_request().SerializeToString(), headers)
        with urllib.request.urlopen(warm, timeout=30) as answer:
            assert answer.status == 200
        before = _peak_resident_mib(served.process.pid)

        request = urllib.request.Request(url, body, headers)
        with urllib.request.urlopen(request, timeout=300) as answer:
            assert answer.status == 200  # a full or partial success
            response = ExportTraceServiceResponse.FromString(answer.read())

        return _peak_resident_mib(served.process.pid) - before, response
    finally:
        served.process.kill()
        served.process.wait(timeout=30)
