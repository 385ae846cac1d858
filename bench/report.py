"""Turning measurements into the benchmark report: figures, targets, text and JSON.

Pure functions over what ``bench.run`` measured; nothing here talks to a server.
"""

from __future__ import annotations

import calendar
import json
import math
import os
import platform
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import google.protobuf
import grpc
from google.protobuf.internal import api_implementation

from toolwatch import compiled_state
from toolwatch.ingest.scan import COMPILED_UNAVAILABLE

__all__ = [
    "check_targets",
    "histogram_quantile",
    "machine",
    "parse_timestamp",
    "percentile",
    "render",
    "slope",
    "write_json",
]

#: The issue's targets.
TARGET_SPANS_PER_SECOND = 50_000
TARGET_RATIO = 0.60
TARGET_LATENCY_MARGIN = 0.050  # p99 detection latency within completion_wait + this
TARGET_BYTES_PER_SPAN = 2048
#: Server CPU above this during the latency phase means it was not measured at half load.
HALF_LOAD_CPU_LIMIT = 0.65


def machine() -> dict[str, Any]:
    """Where the numbers came from: cores, CPU model, Python and library versions."""
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "grpcio": grpc.__version__,
        "protobuf": f"{google.protobuf.__version__} ({api_implementation.Type()})",
        "otlp_scanner": "reference" if COMPILED_UNAVAILABLE else "compiled",
        "hot_path": compiled_state.state().describe(),
        "kernel": platform.release(),
    }


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest-rank; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def histogram_quantile(buckets: Mapping[float, float], q: float) -> float:
    """Prometheus-style quantile from cumulative ``{upper bound: count}`` buckets
    (linear interpolation inside a bucket, the first one starting at 0)."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return math.nan
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 0.0)
        lower, below = bound, count
    return math.nan


def slope(points: Iterable[tuple[float, float]]) -> float:
    """Least-squares slope of ``y`` over ``x``."""
    pairs = list(points)
    n = len(pairs)
    mean_x = sum(x for x, _ in pairs) / n
    mean_y = sum(y for _, y in pairs) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in pairs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in pairs)
    return sxy / sxx if sxx else math.nan


def parse_timestamp(text: str) -> int:
    """The findings log's ``2026-11-29T20:31:02.123Z`` as Unix nanoseconds."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
    return seconds * 1_000_000_000 + int(fraction.ljust(9, "0")[:9])


def check_targets(results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target measured in ``results``: the value, the bar and whether it was met."""
    # One core's capacity: spans per second of server CPU (equal to spans/s when the server
    # had its core to itself, and unaffected when something else took part of it).
    full = results["throughput"]["spans_per_cpu_second"]
    ratio = results["throughput"]["ratio_to_ceiling"]
    latency = results["latency"]
    bar = latency["completion_wait_seconds"] + TARGET_LATENCY_MARGIN
    checks = {
        "spans_per_cpu_second": (full, TARGET_SPANS_PER_SECOND, full >= TARGET_SPANS_PER_SECOND),
        "ratio_to_ceiling": (ratio, TARGET_RATIO, ratio >= TARGET_RATIO),
        "p99_detection_seconds": (latency["p99_seconds"], bar, latency["p99_seconds"] <= bar),
    }
    if "memory" in results:
        per_span = results["memory"]["bytes_per_span_excluding_payload"]
        met = per_span < TARGET_BYTES_PER_SPAN
        checks["bytes_per_buffered_span"] = (per_span, TARGET_BYTES_PER_SPAN, met)
    return {
        name: {"measured": value, "target": target, "met": bool(met)}
        for name, (value, target, met) in checks.items()
    }


def _throughput_lines(t: Mapping[str, Any]) -> list[str]:
    buffered = " -> ".join(f"{n:,}" for n in t["buffered_spans_worst_round"])
    lines = [
        f"  sustained, fully processed:  {t['spans_per_second']:>8,.0f} spans/s at "
        f"{t['server_cpu_utilization']:.0%} server CPU = {t['spans_per_cpu_second']:,.0f} "
        "spans per CPU-second",
        f"    buffer over the window (worst round): {buffered} spans "
        f"({'steady' if t['buffer_steady'] else 'GROWING'}); refused requests "
        f"{t['refused_requests']}, failed {t['failed_requests']}",
        f"  ceiling (decode to records): {t['ceiling_spans_per_second']:>8,.0f} spans/s at "
        f"{t['ceiling_server_cpu_utilization']:.0%} server CPU = "
        f"{t['ceiling_spans_per_cpu_second']:,.0f} spans per CPU-second",
        f"  ratio to ceiling:            {t['ratio_to_ceiling']:>8.1%} "
        "(median of rounds, per CPU-second)",
    ]
    if "ratio_to_reference_ceiling" in t:
        lines.append(
            "  for information, the same bare server on protobuf's decoder: "
            f"{t['reference_ceiling_spans_per_cpu_second']:,.0f} spans per CPU-second, "
            f"ratio {t['ratio_to_reference_ceiling']:.1%}"
        )
    if "ratio_to_transport_ceiling" in t:
        lines.append(
            "  for information, the same bare server decoding nothing (gRPC alone): "
            f"{t['transport_ceiling_spans_per_cpu_second']:,.0f} spans per CPU-second"
        )
    for i, r in enumerate(t["rounds"], start=1):
        full, bare = r["toolwatch"], r["ceiling"]
        lines.append(
            f"    round {i}: toolwatch {full['spans_per_second']:,.0f} spans/s "
            f"({full['server_cpu_utilization']:.0%} CPU), ceiling "
            f"{bare['spans_per_second']:,.0f} ({bare['server_cpu_utilization']:.0%} CPU), "
            f"ratio {r['ratio']:.1%}"
        )
    return lines


def _load_line(lat: Mapping[str, Any]) -> list[str]:
    """The server's CPU while the latency clients sent, and a warning when it was far from
    half: each span cost more than in the throughput phase (here, mostly because the shared
    machine's speed moves within minutes)."""
    utilization = lat.get("server_cpu_utilization")
    if utilization is None:  # results written before it was measured
        return []
    line = f"    server CPU while sending: {utilization:.0%}"
    if utilization > HALF_LOAD_CPU_LIMIT:
        line += " - not half load: each span took more CPU than in the throughput phase"
    return [line]


def _latency_lines(lat: Mapping[str, Any]) -> list[str]:
    return [
        f"  detection latency at {lat['offered_spans_per_second']:,.0f} spans/s offered "
        f"(50%), completion_wait {lat['completion_wait_seconds']} s, tick "
        f"{lat['tick_seconds']} s; {lat['runs_detected']}/{lat['runs_expected']} "
        "unverified runs detected:",
        *_load_line(lat),
        f"    last span acknowledged -> finding logged: p50 {lat['p50_seconds'] * 1e3:.0f} ms, "
        f"p99 {lat['p99_seconds'] * 1e3:.0f} ms, max {lat['max_seconds'] * 1e3:.0f} ms",
        f"    server's toolwatch_detection_latency_seconds: mean "
        f"{lat['server_mean_seconds'] * 1e3:.0f} ms, p50 ~{lat['server_p50_seconds'] * 1e3:.0f}"
        f" ms, p99 ~{lat['server_p99_seconds'] * 1e3:.0f} ms (interpolated in coarse buckets)",
    ]


def _memory_lines(mem: Mapping[str, Any]) -> list[str]:
    return [
        f"  memory per buffered span: {mem['bytes_per_span']:.0f} B resident, of which "
        f"{mem['payload_bytes_per_span']:.0f} B argument/result payload -> "
        f"{mem['bytes_per_span_excluding_payload']:.0f} B excluding payload "
        f"(the buffer's own estimate: {mem['buffer_estimate_bytes_per_span']:.0f} B)",
    ]


def _stage_lines(stages: Mapping[str, Any]) -> list[str]:
    lines = [f"  per-stage CPU, in-process ({stages['spans']} spans, {stages['runs']} runs):"]
    for name, us in stages["per_span_us"].items():
        lines.append(f"    {name:<14} {us:7.2f} µs/span")
    return lines


def render(results: Mapping[str, Any]) -> str:
    """The printed report."""
    m = results["machine"]
    lines = [
        "toolwatch benchmark",
        f"  machine: {m['nproc']} cores, {m['cpu_model']}, Python {m['python']}, "
        f"grpcio {m['grpcio']}, protobuf {m['protobuf']}, {m['otlp_scanner']} OTLP scanner, "
        f"hot path {m.get('hot_path', 'pure Python')}",
        f"  load: {results['load']['describe']}",
        "",
        *_throughput_lines(results["throughput"]),
        "",
        *_latency_lines(results["latency"]),
    ]
    if "memory" in results:
        lines += ["", *_memory_lines(results["memory"])]
    if "stages" in results:
        lines += ["", *_stage_lines(results["stages"])]
    lines += ["", "  targets:"]
    for name, check in results["targets"].items():
        verdict = "met" if check["met"] else "MISSED"
        lines.append(
            f"    {name:<24} {check['measured']:>12.4g}  target {check['target']:<8g} {verdict}"
        )
    return "\n".join(lines)


def write_json(results: Mapping[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
