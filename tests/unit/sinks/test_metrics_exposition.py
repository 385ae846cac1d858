"""The metrics listener, through a real aiohttp server on an ephemeral port."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from toolwatch.model import Category, ReferenceKind, Severity, Traffic
from toolwatch.model_evaluation import Finding
from toolwatch.sinks.exposition import metrics_app
from toolwatch.sinks.prometheus import BufferState, PrometheusMetrics, StateCollector

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


@dataclass
class Reply:
    status: int
    content_type: str
    content_encoding: str | None
    text: str


def build_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, agents=["refund-bot"])
    registry.register(StateCollector(lambda: BufferState(traces=2, spans=7, bytes=512)))
    finding = Finding(
        Category.MISSING_VERIFICATION_STEP,
        Severity.HIGH,
        "safety",
        ReferenceKind.POLICY,
        0.0,
        "issue_refund without lookup_order",
        TRACE_ID,
        agent="refund-bot",
        tool="issue_refund",
    )
    metrics.finding(finding, detection_seconds=2.2, traffic=Traffic.LIVE)
    return registry


async def get(app: web.Application, path: str, headers: dict[str, str] | None = None) -> Reply:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with (
            aiohttp.ClientSession(auto_decompress=True) as session,
            session.get(f"http://127.0.0.1:{port}{path}", headers=headers) as response,
        ):
            return Reply(
                response.status,
                response.headers["Content-Type"],
                response.headers.get("Content-Encoding"),
                await response.text(),
            )
    finally:
        await runner.cleanup()


def fetch(
    path: str,
    headers: dict[str, str] | None = None,
    ready: Callable[[], bool] = lambda: True,
) -> Reply:
    app = metrics_app(build_registry(), ready)
    return asyncio.run(get(app, path, headers))


def test_metrics_default_to_the_text_format_without_exemplars() -> None:
    reply = fetch("/metrics")
    assert reply.status == 200
    assert reply.content_type.startswith("text/plain")
    assert "toolwatch_buffered_spans 7.0" in reply.text
    assert 'agent="refund-bot"' in reply.text
    assert TRACE_ID not in reply.text


def test_openmetrics_when_asked_carries_the_trace_id_exemplar() -> None:
    reply = fetch("/metrics", {"Accept": OPENMETRICS})
    assert reply.status == 200
    assert reply.content_type.startswith("application/openmetrics-text")
    assert reply.text.endswith("# EOF\n")
    lines = [line for line in reply.text.splitlines() if "toolwatch_regressions_total{" in line]
    assert len(lines) == 1
    assert f'# {{trace_id="{TRACE_ID}"}}' in lines[0]


def test_prometheus_default_accept_header_negotiates_openmetrics() -> None:
    accept = (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
        "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    reply = fetch("/metrics", {"Accept": accept})
    assert reply.content_type.startswith("application/openmetrics-text")
    assert TRACE_ID in reply.text


def test_metrics_are_gzipped_when_the_scraper_accepts_it() -> None:
    reply = fetch("/metrics", {"Accept-Encoding": "gzip"})
    assert reply.content_encoding == "gzip"
    assert "toolwatch_buffered_traces 2.0" in reply.text


def test_healthz_is_ok_while_the_process_serves() -> None:
    reply = fetch("/healthz", ready=lambda: False)
    assert (reply.status, reply.text) == (200, "ok\n")


@pytest.mark.parametrize(
    ("ready", "status", "body"), [(True, 200, "ready\n"), (False, 503, "not ready\n")]
)
def test_readyz_follows_the_ready_callable(ready: bool, status: int, body: str) -> None:
    reply = fetch("/readyz", ready=lambda: ready)
    assert (reply.status, reply.text) == (status, body)


def test_unknown_paths_are_404() -> None:
    assert fetch("/nope").status == 404


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not on PATH (CI installs it: apt-get install prometheus)",
)
def test_promtool_accepts_what_the_listener_serves() -> None:
    reply = fetch("/metrics")
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=reply.text.encode(),
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
