"""``toolwatch_assembly_overdue_seconds``, scraped from a running server's ``/metrics``: how
long a buffered trace's completion check has been due without being made. It grows only
while nothing completes traces (here: no tick, as when the ticker is stuck), not while a
long run waits for its anchor, which is what ``ToolwatchNoToolTraces`` tells apart with it.

The ticker is held off by ``tick_seconds: 10`` (it sleeps at least that long once spans are
buffered); only ``settle`` ticks the engine, on the injected clock.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable

from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client.parser import text_string_to_metric_families

from tests.integration import agents
from tests.integration.conftest import RunningServer
from tests.integration.faults_support import without_root
from tests.integration.ingest_support import send_grpc

MAX_AGE = 3600.0  # raised for runs of minutes, as docs/deployment.md advises


def scraped(server: RunningServer) -> dict[str, float]:
    """The unlabelled gauges of the buffer, as a scrape of ``/metrics`` reads them."""
    url = f"http://{server.address('metrics')}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    names = {"toolwatch_assembly_overdue_seconds", "toolwatch_buffered_traces"}
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in names
    }


def overdue(server: RunningServer) -> float:
    return scraped(server)["toolwatch_assembly_overdue_seconds"]


def advance(server: RunningServer, seconds: float) -> None:
    """Move the server's clock without completing anything (a tick that does not come)."""
    server.call(lambda: server.clock.advance(seconds))


def test_overdue_grows_only_while_due_traces_are_not_completed(
    start_server: Callable[..., RunningServer],
) -> None:
    server = start_server(
        assembly__completion_wait_seconds=2,
        assembly__max_trace_age_seconds=MAX_AGE,
        assembly__tick_seconds=10,
    )
    assert overdue(server) == 0.0  # nothing buffered
    done = agents.record(agents.refund_run(), "genai")
    going = without_root(agents.record(agents.refund_run(), "genai"))
    assert send_grpc(server, [*done, *going]) is SpanExportResult.SUCCESS
    assert overdue(server) == 0.0  # due in 2 s

    # Both traces' checks fell due 5 s ago and no tick came.
    advance(server, 7)
    assert scraped(server) == {
        "toolwatch_assembly_overdue_seconds": 5.0,
        "toolwatch_buffered_traces": 2.0,
    }

    # The tick completes the finished run; the other waits for its anchor until its age.
    assert server.settle(0) == 1
    assert scraped(server) == {
        "toolwatch_assembly_overdue_seconds": 0.0,
        "toolwatch_buffered_traces": 1.0,
    }

    # Half an hour on, that run is still going (its agent span has not ended): nothing is
    # built, and nothing is overdue.
    advance(server, MAX_AGE / 2)
    assert overdue(server) == 0.0

    # Its maximum age passed 30 s ago without a tick: overdue, until the tick times it out.
    advance(server, MAX_AGE / 2 - 7 + 30)
    assert overdue(server) == 30.0
    assert server.settle(0) == 1
    assert scraped(server) == {
        "toolwatch_assembly_overdue_seconds": 0.0,
        "toolwatch_buffered_traces": 0.0,
    }
