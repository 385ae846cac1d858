"""What tests read back of toolwatch's metrics: a scrape of ``/metrics`` as a client makes
it (``Accept`` choosing the exposition format), and the ``toolwatch_regressions_total`` series
of a server's registry."""

from __future__ import annotations

import urllib.request

from tests.integration.conftest import RunningServer

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def scrape(server: RunningServer, accept: str) -> str:
    request = urllib.request.Request(
        f"http://{server.address('metrics')}/metrics", headers={"Accept": accept}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        text: str = reply.read().decode()
        return text


def regression_series(server: RunningServer) -> list[dict[str, str]]:
    return [
        dict(sample.labels)
        for family in server.registry.collect()
        if family.name == "toolwatch_regressions"
        for sample in family.samples
        if sample.name == "toolwatch_regressions_total"
    ]
