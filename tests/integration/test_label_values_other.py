"""``toolwatch_label_values_other_total`` counts reports of a value as ``_other`` (each series
update folded into it), not distinct names, and its HELP text, as a scrape reads it, says so."""

from __future__ import annotations

import dataclasses
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.integration import agents
from tests.integration.conftest import RunningServer
from tests.integration.evaluation_support import MINIMAL_POLICY
from tests.integration.ingest_support import send_grpc

OTHERS = "toolwatch_label_values_other"


def _scraped_help(server: RunningServer, family: str) -> str:
    """``family``'s HELP text, as a GET of the metrics listener's /metrics reads it."""
    url = f"http://{server.address('metrics')}/metrics"
    with urllib.request.urlopen(url, timeout=10) as scraped:
        text = scraped.read().decode()
    [found] = [f for f in text_string_to_metric_families(text) if f.name == family]
    documentation: str = found.documentation
    return documentation


def test_the_help_text_says_it_counts_reports_not_distinct_names(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """Was: "Label values reported as _other", read as the distinct names past the cap,
    while 3 runs of 3 new agents, each with a finding, read 9: each run reports its agent
    for the run, its finding and the run's findings. Now the HELP says what it counts, the
    run's findings too (its list ended at "each finding", which makes 6)."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    server = start_server(config, metrics__label_value_cap=1)
    send_grpc(server, agents.record(agents.unverified_refund_run(), "genai"))  # the cap's
    for n in range(3):  # past it
        run = dataclasses.replace(agents.unverified_refund_run(), agent=f"refund-bot-{n}")
        send_grpc(server, agents.record(run, "genai"))
    server.settle()
    assert len(server.findings.findings) == 4  # one MISSING_VERIFICATION_STEP a run
    assert server.sample(f"{OTHERS}_total", {"label": "agent"}) == 9  # three names

    documentation = _scraped_help(server, OTHERS)
    assert documentation.startswith("Times a label value was reported as _other: each series")
    assert "this counts reports, not distinct names" in documentation
    assert "each finding; each label set of a run's findings)" in documentation
