"""Resident memory per buffered span.

A fresh ``toolwatch serve`` with a completion wait and maximum trace age of hours receives
runs whose root span never comes (``TemplateSpec(orphan=True)``), so every span stays
buffered. After each of five equal steps the server's ``VmRSS`` and
``toolwatch_buffered_spans`` are read; the least-squares slope is the memory one more
buffered span costs (the interpreter, libraries and transient request buffers are the
intercept). Argument and result values are small; their mean size per span, as the buffered
records hold them, is measured in-process and reported apart.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from bench import report
from bench.plans import METHOD, Settings, free_ports
from bench.server import ServerProcess, bench_config, scrape
from bench.throughput import BUFFERED
from bench.traces import RequestTemplate, trace_id
from toolwatch.ingest.decode_requests import decode_protobuf
from toolwatch.ingest.decode_types import DecodeOptions

__all__ = ["measure_memory"]

_CLIENT = 200
_STEPS = 5
_SETTLE_SECONDS = 1.0


def _deep_size(value: Any) -> int:
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(_deep_size(k) + _deep_size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return sys.getsizeof(value) + sum(_deep_size(item) for item in value)
    return sys.getsizeof(value) if value is not None else 0


def _payload_per_span(templates: Sequence[RequestTemplate]) -> float:
    """Mean bytes of the argument and result values one buffered span holds (the strings of
    tool spans and the parsed arguments of the calls a model span requested)."""
    spans = [
        span
        for t in templates
        for span in decode_protobuf(t.render([bytes(range(1, 17))] * t.runs), DecodeOptions()).spans
    ]
    total = sum(
        _deep_size(s.arguments)
        + _deep_size(s.result)
        + sum(_deep_size(c.arguments) for c in s.output_tool_calls)
        for s in spans
    )
    return total / len(spans)


def _fill(
    server: ServerProcess, ports: dict[str, int], templates: Sequence[RequestTemplate], total: int
) -> list[tuple[int, int, int]]:
    """Send never-completing runs in steps; (buffered spans, RSS, buffered bytes) per step."""
    sequence, sent = 0, 0
    points = []
    with grpc.insecure_channel(f"127.0.0.1:{ports['grpc']}") as channel:
        export = channel.unary_unary(METHOD)
        for step in range(_STEPS + 1):
            while sent < total * step // _STEPS:
                template = templates[sequence % len(templates)]
                ids = [trace_id(_CLIENT, sequence, run) for run in range(template.runs)]
                export(template.render(ids), timeout=60)
                sequence, sent = sequence + 1, sent + template.spans
            time.sleep(_SETTLE_SECONDS)
            metrics = scrape(ports["metrics"])
            buffered_bytes = int(metrics.get("toolwatch_buffered_bytes", 0))
            points.append((int(metrics.get(BUFFERED, 0)), server.rss(), buffered_bytes))
    return points


def measure_memory(settings: Settings, workdir: Path) -> dict[str, Any]:
    ports = free_ports()
    config = bench_config(
        ports,
        workdir / "memory-findings.jsonl",
        completion_wait=3600.0,
        max_trace_age=7200.0,
        max_buffered_spans=settings.memory_spans * 2,
    )
    templates = settings.templates(orphan=True).build()
    server = ServerProcess.toolwatch(config, workdir, "memory")
    try:
        server.wait_for_port(ports["metrics"])
        points = _fill(server, ports, templates, settings.memory_spans)
    finally:
        server.stop()
    per_span = report.slope((spans, rss) for spans, rss, _ in points)
    payload = _payload_per_span(templates)
    spans, _, buffered_bytes = points[-1]
    return {
        "points": [
            {"buffered_spans": s, "rss_bytes": r, "buffered_bytes": b} for s, r, b in points
        ],
        "bytes_per_span": per_span,
        "payload_bytes_per_span": payload,
        "bytes_per_span_excluding_payload": per_span - payload,
        "buffer_estimate_bytes_per_span": buffered_bytes / spans if spans else math.nan,
    }
