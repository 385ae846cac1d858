"""``serve`` whose standard input is a terminal still waits for a last scrape on SIGTERM:
only Ctrl-C (SIGINT) there skips it (a review found SIGTERM skipped it too)."""

from __future__ import annotations

import os
from pathlib import Path

from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.faults_support import (
    GRACE_SECONDS,
    ServeProcess,
    export,
    without_root,
    write_config,
)


def test_sigterm_to_a_serve_attached_to_a_terminal_still_waits_for_a_last_scrape(
    tmp_path: Path,
) -> None:
    """Scenario: ``docker run -it`` (or a ``tmux``/``screen`` session, a pod with ``tty:
    true``): serve's standard input is a terminal; Prometheus scrapes it; a run is buffered;
    ``docker stop`` (a rollout, ``kill``) sends SIGTERM, not the terminal's Ctrl-C.
    Was: "not waiting for a last scrape of /metrics: serve runs in a terminal": the drain's
    findings (the run completed at shutdown) are never scraped, so they never page.
    Now: wait for the last scrape (``shutdown_metrics_linger_seconds``) as without a
    terminal; only Ctrl-C (SIGINT) from the terminal is someone done with it.
    Regression (3df9b33: ``interactive`` from ``stdin.isatty()`` skips the wait whatever
    the signal)."""
    config = write_config(
        tmp_path / "tty.yaml",
        {},
        shutdown_grace_seconds=GRACE_SECONDS,
        shutdown_metrics_linger_seconds=0.5,
    )
    terminal, side = os.openpty()
    server = ServeProcess(config, stdin=side)
    try:
        unfinished = without_root(agents.record(agents.refund_run(), "genai"))
        assert export(server.addresses["grpc"], unfinished) is SpanExportResult.SUCCESS
        assert server.sample("toolwatch_buffered_traces") == 1  # Prometheus scraped it
        code, _ = server.terminate(timeout=GRACE_SECONDS + 10)  # docker stop: SIGTERM
    finally:
        if server.proc.poll() is None:
            server.kill()
        os.close(terminal)
        os.close(side)

    assert code == 0
    said = [line for line in server.log if "scrape of /metrics" in line]
    assert said and "waiting up to 0.5s for a last scrape of /metrics" in said[0], server.log
