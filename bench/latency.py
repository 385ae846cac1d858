"""Detection latency at a fixed load: last span acknowledged -> finding logged.

Open-loop clients send at a fixed rate (half the sustained throughput). Each client records
when every request was acknowledged; a run's spans all travel in one request, so that is
when its last span was received. The server logs each finding with its wall-clock time; the
run is found again from the finding's trace id (``bench.traces.trace_id`` encodes client,
request and run). Only runs built to lack verification are counted, and only from requests
acknowledged after the warm-up. The server's own ``toolwatch_detection_latency_seconds``
(clock time from the trace's last arrival to the finding) is reported alongside.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import report
from bench.loadgen import ClientPool, ClientResult
from bench.plans import Settings, plans
from bench.server import ServerProcess, scrape
from bench.traces import RequestTemplate, parse_trace_id, trace_id

__all__ = ["CLIENT_BASE", "measure_latency"]

#: Client numbers of this phase (trace ids stay unique for the server's lifetime).
CLIENT_BASE = 100
_CATEGORY = "MISSING_VERIFICATION_STEP"
_DETECTION = "toolwatch_detection_latency_seconds"

Found = dict[str, tuple[int, set[str]]]


def _first_findings(path: Path) -> Found:
    """Per trace id of this phase: the earliest finding's time (ns) and its categories."""
    found: Found = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        parsed = parse_trace_id(record["trace_id"])
        if parsed is None or parsed[0] < CLIENT_BASE:
            continue
        at = report.parse_timestamp(record["timestamp"])
        seen_at, categories = found.get(record["trace_id"], (at, set()))
        categories.add(record["category"])
        found[record["trace_id"]] = (min(at, seen_at), categories)
    return found


def _latencies(
    results: Sequence[ClientResult],
    templates: Sequence[RequestTemplate],
    found: Found,
    after_ns: int,
) -> tuple[list[float], int]:
    """Latency (s) of every expected finding of requests acknowledged after ``after_ns``,
    and how many findings were expected."""
    latencies, expected = [], 0
    for result in results:
        for sequence, acked in zip(result.sequences, result.acked_ns, strict=True):
            if acked < after_ns:
                continue
            for run in templates[sequence % len(templates)].unverified:
                expected += 1
                hit = found.get(trace_id(result.client, sequence, run).hex())
                if hit is not None and _CATEGORY in hit[1]:
                    latencies.append((hit[0] - acked) / 1e9)
    return latencies, expected


def _server_histogram(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    prefix = f'{_DETECTION}_bucket{{le="'

    def buckets(metrics: dict[str, float]) -> dict[float, float]:
        return {
            float(key[len(prefix) : -2]): value
            for key, value in metrics.items()
            if key.startswith(prefix)
        }

    start, end = buckets(before), buckets(after)
    delta = {bound: count - start.get(bound, 0.0) for bound, count in end.items()}
    count = after.get(f"{_DETECTION}_count", 0.0) - before.get(f"{_DETECTION}_count", 0.0)
    total = after.get(f"{_DETECTION}_sum", 0.0) - before.get(f"{_DETECTION}_sum", 0.0)
    return {
        "server_mean_seconds": total / count if count else math.nan,
        "server_p50_seconds": report.histogram_quantile(delta, 0.50),
        "server_p99_seconds": report.histogram_quantile(delta, 0.99),
    }


def measure_latency(
    settings: Settings,
    clients: ClientPool,
    server: ServerProcess,
    ports: dict[str, int],
    findings: Path,
    rate: float,
) -> dict[str, Any]:
    """Open-loop load at ``rate`` spans/s on the running toolwatch ``server``.

    The server's CPU utilization while the clients send (after the warm-up) says whether
    ``rate`` really was the load meant: on a machine whose speed changed since the
    throughput was measured, half of that throughput can be most of what it takes now."""
    templates = settings.templates().build()
    per_client = rate / statistics.mean(t.spans for t in templates) / settings.clients
    before = scrape(ports["metrics"])
    target = f"127.0.0.1:{ports['grpc']}"
    fleet = clients.start(
        plans(settings, target, "open", CLIENT_BASE, settings.latency_seconds, per_client)
    )
    time.sleep(max(0.0, fleet.start_at + settings.warmup - time.time()))
    cpu_before, started = server.cpu_seconds(), time.time()
    results = fleet.results()
    utilization = (server.cpu_seconds() - cpu_before) / max(time.time() - started, 1e-9)
    time.sleep(settings.completion_wait + 1.0)  # the last runs complete and are logged
    after = scrape(ports["metrics"])
    warm = int((fleet.start_at + settings.warmup) * 1e9)
    latencies, expected = _latencies(results, templates, _first_findings(findings), warm)
    return {
        "offered_spans_per_second": rate,
        "acked_spans_per_second": sum(sum(r.spans) for r in results) / settings.latency_seconds,
        "completion_wait_seconds": settings.completion_wait,
        "tick_seconds": settings.tick,
        "runs_expected": expected,
        "runs_detected": len(latencies),
        "p50_seconds": report.percentile(latencies, 0.50),
        "p99_seconds": report.percentile(latencies, 0.99),
        "max_seconds": max(latencies, default=math.nan),
        "server_cpu_utilization": utilization,
        "late_sends": sum(r.late_sends for r in results),
        "refused_requests": sum(r.refused for r in results),
        "timestamp_resolution_seconds": 0.001,  # the findings log writes milliseconds
        **_server_histogram(before, after),
    }
