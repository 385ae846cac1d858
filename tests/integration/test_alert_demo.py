"""``make alert-demo`` (scripts/alert_demo.py) run as a user runs it: a subprocess that starts
``toolwatch serve`` and a real Prometheus (Debian's ``prometheus`` package), sends the
example run and waits for ``ToolwatchMissingVerificationStep`` to fire. Each test checks what
the demo printed against what the shipped rules and example must give, and that nothing it
started is left listening and nothing it wrote is left on disk."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

import pytest
import yaml

from scripts.alert_demo import EXAMPLE_TRACE_ID, prometheus_config
from tests.integration.prometheus_server import requires_prometheus, requires_promtool

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "alert_demo.py"
RULES = ROOT / "deploy" / "prometheus" / "toolwatch-rules.yaml"
ALERT = "ToolwatchMissingVerificationStep"
LABELS = {
    "agent": "refund-bot",
    "alertname": ALERT,
    "category": "MISSING_VERIFICATION_STEP",
    "component": "toolwatch",
    "severity": "critical",
    "team": "agent-platform",
    "tool": "issue_refund",
}
SUMMARY = "A run of agent refund-bot called issue_refund without verifying first."
#: Start-up, the example's 2 s completion_wait, Prometheus' first scrape: about 7 s here.
DEMO_SECONDS = 120


def demo_env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    """The caller's environment with TMPDIR in ``tmp_path``, so what the demo leaves shows."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp), **overrides}


def printed(output: str, pattern: str) -> str:
    """The first group of ``pattern``'s first match in the demo's output (a line each)."""
    found = re.search(pattern, output, re.MULTILINE)
    assert found is not None, f"{pattern!r} not in:\n{output}"
    return found.group(1)


def check_report(output: str) -> str:
    """Checks the demo's report of a fired alert; returns the trace id it says it sent."""
    trace_id = printed(
        output, r"^\[.*\] sent examples/unverified-refund\.otlp\.json .*, trace id ([0-9a-f]{32})$"
    )
    assert trace_id != EXAMPLE_TRACE_ID
    assert printed(output, r"^\[.*\] alert (\S+) firing$") == ALERT
    labels = printed(output, r"^  labels: +(.*)$")
    assert dict(item.split("=", 1) for item in labels.split(", ")) == LABELS
    assert printed(output, r"^  summary: +(.*)$") == SUMMARY
    description = printed(output, r"^  description: +(.*)$")
    assert description.startswith("1 MISSING_VERIFICATION_STEP finding(s) in the last 5m")
    finding = json.loads(printed(output, r"^  (\{.*\})$"))
    assert (finding["category"], finding["tool"], finding["agent"], finding["trace_id"]) == (
        "MISSING_VERIFICATION_STEP",
        "issue_refund",
        "refund-bot",
        trace_id,
    )
    return trace_id


def urls(output: str) -> list[str]:
    """Prometheus' alerts and toolwatch's metrics URL, from the demo's progress lines."""
    return [
        printed(output, r"^\[.*\] prometheus ready on (http://[^,]+),") + "/alerts",
        "http://" + printed(output, r"^\[.*\] toolwatch ready \(.*metrics ([^,]+),") + "/metrics",
    ]


def refused(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        return False
    except OSError:
        return True
    return False


def check_cleaned_up(output: str, tmp_path: Path) -> None:
    assert [url for url in urls(output) if not refused(url)] == []
    assert list((tmp_path / "tmp").iterdir()) == []


@requires_promtool
def test_promtool_accepts_the_generated_config(tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config("127.0.0.1:9464")), encoding="utf-8")

    checked = subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True, check=False
    )

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {config} is valid prometheus config file syntax" in checked.stdout
    assert f"Checking {RULES}\n  SUCCESS: " in checked.stdout


def test_without_prometheus_on_path_it_says_how_to_get_it(tmp_path: Path) -> None:
    ran = subprocess.run(
        [sys.executable, str(SCRIPT)],
        env=demo_env(tmp_path, PATH=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert ran.returncode == 2
    assert ran.stdout == ""
    assert "`prometheus` is not on PATH" in ran.stderr
    assert "apt-get install prometheus" in ran.stderr
    assert "https://prometheus.io/download/" in ran.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.prometheus
@requires_prometheus
def test_the_demo_fires_the_missing_verification_alert_and_stops(tmp_path: Path) -> None:
    ran = subprocess.run(
        [sys.executable, str(SCRIPT)],
        env=demo_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=DEMO_SECONDS,
        check=False,
    )

    assert ran.returncode == 0, ran.stdout + ran.stderr
    check_report(ran.stdout)
    assert "/alerts" not in ran.stdout.partition(" is firing:")[2]  # no address of a stopped server
    check_cleaned_up(ran.stdout, tmp_path)


def read_until(stream: IO[str], marker: str, timeout: float) -> str:
    """The lines of ``stream`` up to and including the first holding ``marker``."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    read = []
    while not read or marker not in read[-1]:
        read.append(lines.get(timeout=timeout))
    return "".join(read)


@pytest.mark.prometheus
@requires_prometheus
def test_keep_leaves_the_alert_firing_until_ctrl_c(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--keep"],
        env=demo_env(tmp_path),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert demo.stdout is not None
        output = read_until(demo.stdout, "Ctrl-C stops them", DEMO_SECONDS)
        check_report(output)
        prometheus = urls(output)[0].removesuffix("/alerts")
        assert f"  alerts       {prometheus}/alerts\n" in output
        with urllib.request.urlopen(f"{prometheus}/api/v1/alerts", timeout=10) as reply:
            alerts = json.load(reply)["data"]["alerts"]
        # Firing: only the demo's. (ToolwatchAbsent may still be pending from an evaluation
        # before Prometheus's first scrape.)
        firing = [a["labels"]["alertname"] for a in alerts if a["state"] == "firing"]
        assert firing == [ALERT]
        # The README sends whoever needs the demo's ports to the configuration it wrote.
        (workdir,) = re.findall(r"prometheus\.yml in (\S+), removed at the end", output)
        assert "job_name: toolwatch" in (Path(workdir) / "prometheus.yml").read_text()

        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=30) == 0
    finally:
        if demo.poll() is None:
            demo.kill()
    check_cleaned_up(output, tmp_path)
