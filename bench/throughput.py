"""Sustained throughput: toolwatch and the decode-only ceiling under saturating load.

Both servers run for the whole phase, pinned to the server core; rounds alternate between
them (ceiling, then toolwatch) with the same closed-loop clients and requests, so both see
the same background load. toolwatch's rate is read from its own
``toolwatch_spans_built_total`` (spans assembled, evaluated and counted) over the window;
the ceiling's from the clients' acknowledgements (it does nothing else). The ratio is the
median over rounds of toolwatch's rate over the ceiling's in the same round, both per
second of server CPU: another process taking part of the server core (a shared machine)
then changes neither.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Container
from typing import Any

from bench.loadgen import ClientPool, ClientResult
from bench.plans import Settings, acked_rate, plans, sleep_until
from bench.server import ServerProcess, scrape

__all__ = ["BUFFERED", "measure_throughput"]

BUFFERED = "toolwatch_buffered_spans"
_BUILT = "toolwatch_spans_built_total"
_REFUSED = 'toolwatch_spans_refused_total{transport="grpc"}'

Sample = dict[str, float]


def _window(
    settings: Settings,
    clients: ClientPool,
    server: ServerProcess,
    target: str,
    base: int,
    sample: Callable[[], Sample],
) -> tuple[list[Sample], list[ClientResult], float, float]:
    """Saturating load; ``sample`` (plus time and server CPU) at the window's start, middle
    and end. Returns the samples, the clients' results and the window."""
    duration = settings.warmup + settings.window + 0.5
    fleet = clients.start(plans(settings, target, "closed", base, duration))
    start = fleet.start_at + settings.warmup
    end = start + settings.window
    samples = []
    for when in (start, start + settings.window / 2, end):
        sleep_until(when)
        samples.append({"time": time.time(), "cpu": server.cpu_seconds(), **sample()})
    return samples, fleet.results(), start, end


def _cpu(samples: list[Sample]) -> float:
    first, last = samples[0], samples[-1]
    return (last["cpu"] - first["cpu"]) / (last["time"] - first["time"])


def _rates(spans_per_second: float, samples: list[Sample]) -> dict[str, float]:
    """The wall-clock rate, the server's CPU utilization over the window, and the rate per
    second of server CPU: what one whole core sustains, whatever else the machine ran."""
    utilization = _cpu(samples)
    return {
        "spans_per_second": spans_per_second,
        "server_cpu_utilization": utilization,
        "spans_per_cpu_second": spans_per_second / utilization if utilization else 0.0,
    }


def _ceiling_round(
    settings: Settings, clients: ClientPool, server: ServerProcess, port: int
) -> dict[str, Any]:
    target = f"127.0.0.1:{port}"
    samples, results, start, end = _window(settings, clients, server, target, 0, dict)
    rates = _rates(acked_rate(results, start, end), samples)
    if not rates["spans_per_cpu_second"]:  # every ratio divides by it
        raise RuntimeError(
            f"{server.name} acknowledged no request in the {settings.window:g} s window "
            f"after {settings.warmup:g} s of warm-up: see its log, or lengthen --warmup"
        )
    return rates


def _toolwatch_round(
    settings: Settings,
    clients: ClientPool,
    server: ServerProcess,
    ports: dict[str, int],
    base: int,
) -> dict[str, Any]:
    def sample() -> Sample:
        metrics = scrape(ports["metrics"])
        return {name: metrics.get(name, 0.0) for name in (_BUILT, BUFFERED, _REFUSED)}

    target = f"127.0.0.1:{ports['grpc']}"
    samples, results, start, end = _window(settings, clients, server, target, base, sample)
    first, last = samples[0], samples[-1]
    built = (last[_BUILT] - first[_BUILT]) / (last["time"] - first["time"])
    return {
        **_rates(built, samples),
        "client_acked_spans_per_second": acked_rate(results, start, end),
        "buffered_spans": [int(s[BUFFERED]) for s in samples],
        "refused_requests": sum(r.refused for r in results),
        "failed_requests": sum(r.failed for r in results),
    }


def _median(rounds: list[dict[str, Any]], server: str, key: str) -> float:
    return statistics.median(float(r[server][key]) for r in rounds)


#: The informational ceilings: server name -> the key their figures are reported under.
_INFORMATIONAL = {"ceiling_reference": "reference", "ceiling_transport": "transport"}


def _informational(rounds: list[dict[str, Any]], ran: Container[str]) -> dict[str, float]:
    """Toolwatch's ratio to each informational ceiling that ran (median of rounds)."""
    figures: dict[str, float] = {}
    for name, key in _INFORMATIONAL.items():
        if name not in ran:
            continue
        ratios = [
            r["toolwatch"]["spans_per_cpu_second"] / r[name]["spans_per_cpu_second"] for r in rounds
        ]
        figures[f"{key}_ceiling_spans_per_cpu_second"] = _median(
            rounds, name, "spans_per_cpu_second"
        )
        figures[f"ratio_to_{key}_ceiling"] = statistics.median(ratios)
    return figures


def measure_throughput(
    settings: Settings,
    clients: ClientPool,
    toolwatch: ServerProcess,
    ports: dict[str, int],
    ceilings: dict[str, tuple[ServerProcess, int]],
) -> dict[str, Any]:
    """Alternate the ceilings' and toolwatch's windows for ``settings.rounds`` rounds. The
    ratios are taken per round on the rates per CPU-second (robust to other load on the
    machine). ``ceilings["ceiling"]`` is the strict one; ``"ceiling_reference"``, if given,
    the same server decoding with protobuf's parse; ``"ceiling_transport"``, if given, the same
    server decoding nothing."""
    rounds = []
    for number in range(settings.rounds):
        bare = {
            name: _ceiling_round(settings, clients, server, port)
            for name, (server, port) in ceilings.items()
        }
        full = _toolwatch_round(settings, clients, toolwatch, ports, base=10 * number)
        ratio = full["spans_per_cpu_second"] / bare["ceiling"]["spans_per_cpu_second"]
        rounds.append({**bare, "toolwatch": full, "ratio": ratio})
    buffered = max(rounds, key=lambda r: r["toolwatch"]["buffered_spans"][-1])
    growth = max(
        r["toolwatch"]["buffered_spans"][-1] - r["toolwatch"]["buffered_spans"][0] for r in rounds
    )
    processed = min(r["toolwatch"]["spans_per_second"] for r in rounds) * settings.window
    return {
        "spans_per_second": _median(rounds, "toolwatch", "spans_per_second"),
        "spans_per_cpu_second": _median(rounds, "toolwatch", "spans_per_cpu_second"),
        "server_cpu_utilization": _median(rounds, "toolwatch", "server_cpu_utilization"),
        "ceiling_spans_per_second": _median(rounds, "ceiling", "spans_per_second"),
        "ceiling_spans_per_cpu_second": _median(rounds, "ceiling", "spans_per_cpu_second"),
        "ceiling_server_cpu_utilization": _median(rounds, "ceiling", "server_cpu_utilization"),
        "ratio_to_ceiling": statistics.median(r["ratio"] for r in rounds),
        **_informational(rounds, ceilings),
        "buffered_spans_worst_round": buffered["toolwatch"]["buffered_spans"],
        # Steady: over any window the buffer grew by less than 5% of what was processed.
        "buffer_steady": growth < 0.05 * processed,
        "refused_requests": sum(r["toolwatch"]["refused_requests"] for r in rounds),
        "failed_requests": sum(r["toolwatch"]["failed_requests"] for r in rounds),
        "rounds": rounds,
    }
