"""``python -m bench.json_memory``: the peak memory of decoding one OTLP/JSON body.

Each case's body is written to a file; a fresh interpreter per case and measure reads it,
decodes a small body first (imports, caches), then resets its peak resident set (Linux
proc(5), ``/proc/self/clear_refs``) and decodes the case's body with
``decode_otlp_json``. Reported: the growth of the peak resident set (``VmHWM``) over the
resident set before, and tracemalloc's peak (Python's allocations only: protobuf's upb
arenas are not traced), each as bytes and as a multiple of the body's size; the batch's
records are part of both peaks, as they are in the server's. The bound on JSON values is
lifted unless ``--bounded``, so that what the decode itself costs is measured. Run it with
``PYTHONPATH`` naming the source to measure (another checkout's ``src`` for a comparison).

Cases (``--cases`` picks some; sizes in MiB after a colon):

- ``captures``: the recorded captures (tests/fixtures/otlp), one ResourceSpans per capture,
  repeated with new trace ids up to the size;
- ``agent``: spans shaped like the captures' whose largest text attribute (a prompt, a
  message list, a tool result) is grown to 10-40 KB, up to the size (512 spans of about
  25 KB at 12.5 MiB); ``agent_utf8``: the same, written as the OpenTelemetry JavaScript
  SDK writes JSON, non-ASCII characters (an accent, a check mark, an emoji) as UTF-8;
- ``dense``: attribute-less spans with names and times, the densest an SDK writes;
  ``attrs``: small spans with 12 short attributes each (HTTP-like);
- ``ids``: spans of nothing but ids (no SDK sends them), the most records a body makes;
- ``empty_resources``: ``{"resourceSpans":[{},{},...]}``; ``empty_spans``: one scope of
  ``{}`` spans; ``strings``: a field toolwatch does not read holding an array of 2-character
  strings; ``keys``: such a field holding an object of distinct keys; ``span_keys``: the
  same in a span; ``arrays``: empty arrays; ``resource_attrs``: a resource of many
  attributes over 200 scopes of a span.

``--bounded N`` passes N as ``decode_otlp_json``'s bound on what a body may hold (the
receiver's: a body beyond it is refused unparsed, 413; see ``toolwatch.ingest.otlp_json``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["BUILDERS", "main"]

MIB = 2**20
_FIXTURES = Path(__file__).parents[1] / "tests" / "fixtures" / "otlp"
_ROOT = Path(__file__).parents[1]


def _captures() -> list[dict[str, Any]]:
    return [
        json.loads(path.read_bytes())
        for path in sorted(_FIXTURES.glob("*.json"))
        if not path.name.endswith(".expected.json")
    ]


def _retraced(resource_spans: dict[str, Any], copy: int) -> dict[str, Any]:
    """A deep copy of ``resource_spans`` whose spans have a trace id of their own."""
    clone: dict[str, Any] = json.loads(json.dumps(resource_spans))
    for scope in clone.get("scopeSpans", ()):
        for span in scope.get("spans", ()):
            span["traceId"] = f"{copy + 1:032x}"
    return clone


def _filled(parts: Iterator[dict[str, Any]], size: int, key: str = "resourceSpans") -> bytes:
    """A document of ``parts`` under ``key`` until it reaches ``size`` bytes."""
    chosen: list[dict[str, Any]] = []
    total = 0
    for part in parts:
        chosen.append(part)
        total += len(json.dumps(part)) + 1
        if total >= size:
            break
    return json.dumps({key: chosen}, separators=(",", ":")).encode()


def captures(size: int) -> bytes:
    documents = _captures()

    def parts() -> Iterator[dict[str, Any]]:
        copy = 0
        while True:
            for document in documents:
                for resource_spans in document["resourceSpans"]:
                    yield _retraced(resource_spans, copy)
                    copy += 1

    return _filled(parts(), size)


_UTF8_FILLER = " café ✓ 🙂 "


def _grown(span: dict[str, Any], target: int, utf8: bool) -> None:
    """Grow the span's longest string attribute (or a new ``input.value``) to ``target``
    characters by repeating it."""
    attributes = span.setdefault("attributes", [])
    texts = [a for a in attributes if isinstance(a.get("value", {}).get("stringValue"), str)]
    if texts:
        longest = max(texts, key=lambda a: len(a["value"]["stringValue"]))
    else:
        longest = {"key": "input.value", "value": {"stringValue": "tool input"}}
        attributes.append(longest)
    text = longest["value"]["stringValue"] or "x"
    if utf8:
        text += _UTF8_FILLER
    longest["value"]["stringValue"] = (text * (target // len(text) + 1))[:target]


def _agent(size: int, utf8: bool) -> bytes:
    documents = _captures()
    rng = random.Random(512)

    def parts() -> Iterator[dict[str, Any]]:
        copy = 0
        while True:
            for document in documents:
                for resource_spans in document["resourceSpans"]:
                    clone = _retraced(resource_spans, copy)
                    copy += 1
                    for scope in clone.get("scopeSpans", ()):
                        for span in scope.get("spans", ()):
                            _grown(span, rng.randint(10_000, 40_000), utf8)
                    yield clone

    if not utf8:
        return _filled(parts(), size)
    chosen: list[dict[str, Any]] = []
    total = 0
    for part in parts():
        chosen.append(part)
        total += len(json.dumps(part, ensure_ascii=False).encode())
        if total >= size:
            break
    document = {"resourceSpans": chosen}
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def agent(size: int) -> bytes:
    return _agent(size, utf8=False)


def agent_utf8(size: int) -> bytes:
    return _agent(size, utf8=True)


def _one_scope(spans: Iterator[dict[str, Any]], size: int) -> bytes:
    chosen: list[dict[str, Any]] = []
    total = 0
    for span in spans:
        chosen.append(span)
        total += len(json.dumps(span, separators=(",", ":"))) + 1
        if total >= size:
            break
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]}
    scope_spans = {"scope": {"name": "bench"}, "spans": chosen}
    document = {"resourceSpans": [{"resource": resource, "scopeSpans": [scope_spans]}]}
    return json.dumps(document, separators=(",", ":")).encode()


def _small_span(n: int) -> dict[str, Any]:
    start = 1_700_000_000_000_000_000 + n * 1_000
    return {
        "traceId": f"{n // 100 + 1:032x}",
        "spanId": f"{n + 1:016x}",
        "parentSpanId": f"{n // 100 * 100 + 1:016x}" if n % 100 else "",
        "name": f"span-{n % 1000}",
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 500),
    }


def dense(size: int) -> bytes:
    return _one_scope((_small_span(n) for n in range(10**8)), size)


_HTTP = (
    ("http.request.method", "GET"),
    ("url.path", "/api/orders/1042"),
    ("url.scheme", "https"),
    ("server.address", "orders.internal"),
    ("network.protocol.version", "1.1"),
    ("user_agent.original", "python-httpx/0.27"),
    ("http.route", "/api/orders/{id}"),
    ("client.address", "10.0.0.7"),
    ("thread.name", "worker-3"),
)


def _attribute_span(n: int) -> dict[str, Any]:
    span = _small_span(n)
    span["attributes"] = [
        *({"key": key, "value": {"stringValue": value}} for key, value in _HTTP),
        {"key": "http.response.status_code", "value": {"intValue": "200"}},
        {"key": "server.port", "value": {"intValue": 443}},
        {"key": "thread.id", "value": {"intValue": str(n % 64)}},
    ]
    return span


def attrs(size: int) -> bytes:
    return _one_scope((_attribute_span(n) for n in range(10**8)), size)


def empty_resources(size: int) -> bytes:
    return b'{"resourceSpans":[' + b",".join([b"{}"] * (size // 3)) + b"]}"


def empty_spans(size: int) -> bytes:
    inner = b",".join([b"{}"] * (size // 3))
    return b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + inner + b"]}]}]}"


def strings(size: int) -> bytes:
    return b'{"resourceSpans":[],"x":[' + b",".join([b'"ab"'] * (size // 5)) + b"]}"


def ids(size: int) -> bytes:
    """Spans of nothing but ids, which no SDK sends: the most records a body can make."""
    return _one_scope(
        ({k: v for k, v in _small_span(n).items() if k.endswith("Id")} for n in range(10**8)), size
    )


def keys(size: int) -> bytes:
    pairs = b",".join(b'"%x":"ab"' % n for n in range(size // 10))
    return b'{"resourceSpans":[],"x":{' + pairs + b"}}"


def span_keys(size: int) -> bytes:
    pairs = ",".join(f'"{n:x}":"ab"' for n in range(size // 10))
    span = json.dumps(_small_span(1), separators=(",", ":"))[:-1] + ',"x":{' + pairs + "}}"
    return _one_scope(iter([json.loads(span)]), 0)


def arrays(size: int) -> bytes:
    return b'{"resourceSpans":[],"x":[' + b",".join([b"[]"] * (size // 3)) + b"]}"


def resource_attrs(size: int) -> bytes:
    attributes = [{"key": f"{n:x}", "value": {"intValue": n}} for n in range(size // 30)]
    resource = {"attributes": attributes}
    scope_spans = [{"spans": [_small_span(n)]} for n in range(200)]
    document = {"resourceSpans": [{"resource": resource, "scopeSpans": scope_spans}]}
    return json.dumps(document, separators=(",", ":")).encode()


BUILDERS: dict[str, Callable[[int], bytes]] = {
    "captures": captures,
    "agent": agent,
    "agent_utf8": agent_utf8,
    "dense": dense,
    "attrs": attrs,
    "empty_resources": empty_resources,
    "empty_spans": empty_spans,
    "strings": strings,
    "ids": ids,
    "keys": keys,
    "span_keys": span_keys,
    "arrays": arrays,
    "resource_attrs": resource_attrs,
}

_DEFAULT_CASES = (
    "captures:5,20",
    "agent:5,12.5,20",
    "agent_utf8:20",
    "dense:5,20",
    "attrs:5,20",
    "ids:16",
    "empty_resources:0.75,3",
    "empty_spans:0.75,3",
    "strings:2,5",
    "keys:2,5",
    "span_keys:2,5",
    "arrays:2",
    "resource_attrs:2",
)

#: Run in the fresh interpreter: argv is the body's file, the mode and the container bound.
_CHILD = """
import gc, json, sys, time, tracemalloc
from pathlib import Path
from toolwatch.ingest.decode_types import DecodeError, DecodeOptions
from toolwatch.ingest.otlp_json import decode_otlp_json

def status(name):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name):
            return int(line.split()[1]) * 1024
    raise SystemExit(name)

options = DecodeOptions()
decode_otlp_json(Path(sys.argv[4]).read_bytes(), options)  # imports and caches
body = Path(sys.argv[1]).read_bytes()
limit = int(sys.argv[3])
gc.collect()
traced = sys.argv[2] == "tracemalloc"
if traced:
    tracemalloc.start()
Path("/proc/self/clear_refs").write_text("5")
before = status("VmRSS:")
started = time.perf_counter()
try:
    batch = decode_otlp_json(body, options, limit)
    outcome = f"{len(batch.spans)} records, {batch.received - len(batch.spans)} rejected"
except DecodeError as exc:
    outcome = f"{type(exc).__name__}: {str(exc)[:60]}"
seconds = time.perf_counter() - started
peak = tracemalloc.get_traced_memory()[1] if traced else status("VmHWM:") - before
print(json.dumps({"peak": peak, "seconds": seconds, "outcome": outcome}))
"""


def _measure(path: Path, mode: str, limit: int, warm: Path, env: dict[str, str]) -> dict[str, Any]:
    command = [sys.executable, "-c", _CHILD, str(path), mode, str(limit), str(warm)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="*", default=list(_DEFAULT_CASES))
    parser.add_argument("--bounded", type=int, default=0, help="the bound (0: none)")
    parser.add_argument("--modes", nargs="*", default=["rss", "tracemalloc"])
    args = parser.parse_args(argv)
    limit = args.bounded or sys.maxsize
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as directory:
        warm = Path(directory) / "warm.json"
        warm.write_bytes(captures(1))
        head = f"{'case':<22}{'body MiB':>9}  {'mode':<12}{'peak MiB':>9}{'x body':>8}{'s':>7}"
        print(f"{head}  outcome")
        for case in args.cases:
            name, _, sizes = case.partition(":")
            for size in (float(s) for s in sizes.split(",")):
                path = Path(directory) / f"{name}-{size}.json"
                body = BUILDERS[name](int(size * MIB))
                path.write_bytes(body)
                for mode in args.modes:
                    got = _measure(path, mode, limit, warm, env)
                    print(
                        f"{name:<22}{len(body) / MIB:>9.2f}  {mode:<12}{got['peak'] / MIB:>9.1f}"
                        f"{got['peak'] / len(body):>8.2f}{got['seconds']:>7.2f}  {got['outcome']}",
                        flush=True,
                    )
                path.unlink()


if __name__ == "__main__":
    main()
