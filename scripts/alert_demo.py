"""``make alert-demo``: from nothing running to a firing Prometheus alert, on this machine.

Starts ``toolwatch serve`` with the example policy (examples/toolwatch.yaml) and a Prometheus
that scrapes it every second under ``job="toolwatch"`` and evaluates the shipped rules
(deploy/prometheus/toolwatch-rules.yaml) every second, both on free loopback ports; sends
the README's unverified refund (examples/unverified-refund.otlp.json) under a fresh trace id
over OTLP/HTTP, and waits for ``ToolwatchMissingVerificationStep`` to fire. Then it prints the
alert, toolwatch's finding and the URLs, stops both processes and removes its temporary
directory; with ``--keep`` both keep running until Ctrl-C.

Exit codes: 0 the alert fired, 1 it did not (diagnostics on stderr), 2 no ``prometheus`` on
PATH, 130 interrupted before the alert fired. Whatever happens the processes it started are
stopped (SIGTERM; a second one after 2 s, which spares toolwatch its wait for a last scrape;
SIGKILL after 5 more). Nothing here waits a fixed time: each step polls against a deadline.

Standard library only, plus PyYAML and prometheus_client (toolwatch's own dependencies).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import yaml
from prometheus_client.parser import text_string_to_metric_families

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_CONFIG = ROOT / "examples" / "toolwatch.yaml"
EXAMPLE_RUN = ROOT / "examples" / "unverified-refund.otlp.json"
RULES = ROOT / "deploy" / "prometheus" / "toolwatch-rules.yaml"
#: The trace id written in EXAMPLE_RUN; each demo sends the run under a new one, since
#: toolwatch evaluates a trace once (README, Quick start).
EXAMPLE_TRACE_ID = "ab14a7e84c14f9efb4c7e3bdc92f5886"
#: The scrape job name the shipped rules assume (the header of toolwatch-rules.yaml).
JOB = "toolwatch"
ALERT = "ToolwatchMissingVerificationStep"
CATEGORY = "MISSING_VERIFICATION_STEP"
REGRESSIONS = "toolwatch_regressions_total"
LISTENERS = ("grpc", "http", "metrics", "stream")
#: The PromQL selecting the demo's counter, URL-encoded.
SCRAPED = urllib.parse.quote(f'{REGRESSIONS}{{category="{CATEGORY}"}}')

EXIT_OK, EXIT_FAILED, EXIT_NO_PROMETHEUS, EXIT_INTERRUPTED = 0, 1, 2, 130
STARTUP_SECONDS = 30.0
ALERT_SECONDS = 60.0
POLL_SECONDS = 0.2
HURRY_SECONDS = 2.0
STOP_SECONDS = 5.0
PORT_ATTEMPTS = 3
TAIL_LINES = 20

NO_PROMETHEUS = """\
alert-demo: `prometheus` is not on PATH. Install it, then run `make alert-demo` again:
  Debian/Ubuntu: sudo apt-get install prometheus && sudo service prometheus stop
                 (the packaged service is not needed: the demo runs its own, on a free port)
  elsewhere:     the release tarball from https://prometheus.io/download/ (put the
                 `prometheus` binary on PATH)"""


class DemoError(Exception):
    """A step did not finish: the message says which; diagnostics follow."""


def prometheus_config(target: str, rules: Path = RULES) -> dict[str, Any]:
    """The ``prometheus.yml`` of the demo: scrape ``target`` (``host:port``) as job
    ``toolwatch`` and evaluate ``rules`` every second. No ``alerting`` block: with no
    Alertmanager to send to, Prometheus would log an error while the alert fires."""
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules.resolve())],
        "scrape_configs": [
            {"job_name": JOB, "metrics_path": "/metrics", "static_configs": [{"targets": [target]}]}
        ],
    }


def with_trace_id(body: str, trace_id: str) -> bytes:
    """The example run's OTLP/JSON ``body`` with every occurrence of its trace id replaced by
    ``trace_id`` (32 hex digits, as OTLP/JSON writes trace ids)."""
    if EXAMPLE_TRACE_ID not in body:
        raise ValueError(f"{EXAMPLE_RUN} no longer holds trace id {EXAMPLE_TRACE_ID}")
    return body.replace(EXAMPLE_TRACE_ID, trace_id).encode()


def listening_addresses(log: str) -> dict[str, str] | None:
    """The bound addresses of ``toolwatch serve``'s "listening grpc=... http=... metrics=...
    stream=..." start-up line in ``log`` (docs/commands.md), or None before it is written."""
    for line in log.splitlines():
        _, marker, rest = line.partition(" toolwatch: listening ")
        if marker:
            addresses = dict(item.split("=", 1) for item in rest.split())
            if all(name in addresses for name in LISTENERS):
                return addresses
    return None


def regression_samples(metrics: str) -> list[str]:
    """The ``toolwatch_regressions_total`` series of the demo's category in a Prometheus
    text exposition, each as ``name{labels} value``."""
    found = []
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == REGRESSIONS and sample.labels.get("category") == CATEGORY:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                found.append(f"{sample.name}{{{labels}}} {sample.value:g}")
    return found


def demo_alert(alerts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The demo's alert among Prometheus' active ones (``/api/v1/alerts``), the firing one
    first if Prometheus lists it twice."""
    ours = [a for a in alerts if a.get("labels", {}).get("alertname") == ALERT]
    ours.sort(key=lambda a: a.get("state") != "firing")
    return ours[0] if ours else None


def finding_line(findings: str, trace_id: str) -> str | None:
    """The findings-log line (toolwatch's stdout) of the demo's category for ``trace_id``."""
    for line in findings.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("trace_id") == trace_id and record.get("category") == CATEGORY:
            return line
    return None


def free_port() -> int:
    """A loopback port nothing listens on now (bind port 0, read it back, release it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def http_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=2) as reply:
        body: bytes = reply.read()
        return body


def prometheus_api(url: str, path: str) -> Any:
    """The ``data`` of ``GET <url>/api/v1/<path>``."""
    body = json.loads(http_get(f"{url}/api/v1/{path}"))
    if body.get("status") != "success":
        raise ValueError(f"/api/v1/{path}: {body}")
    return body["data"]


def toolwatch_command() -> list[str]:
    """This interpreter's ``toolwatch`` console script, else its module."""
    script = Path(sys.executable).with_name("toolwatch")
    return [str(script)] if script.exists() else [sys.executable, "-m", "toolwatch.cli"]


def serve_command() -> list[str]:
    """``toolwatch serve`` with the example policy, findings on stdout, and port 0 for every
    listener: toolwatch binds free ports itself and logs them, so no other process can take
    one between probing and binding."""
    listen = [arg for name in LISTENERS for arg in (f"--{name}-listen", "127.0.0.1:0")]
    serve = ["serve", "--config", str(EXAMPLE_CONFIG), "--findings", "-"]
    return [*toolwatch_command(), *serve, *listen]


def toolwatch_shown() -> str:
    """How to run ``toolwatch`` from the repository (README: ``.venv/bin/toolwatch``)."""
    script = Path(toolwatch_command()[0])
    return str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else "toolwatch"


class Child:
    """A started process; its stdout and stderr go to files in the demo's directory."""

    def __init__(self, name: str, command: list[str], workdir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.stdout = workdir / f"{name}.stdout"
        self.stderr = workdir / f"{name}.stderr"
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=workdir, env=env
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self, stderr: bool = False) -> str:
        path = self.stderr if stderr else self.stdout
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def tail(self) -> str:
        lines = self.output(stderr=True).splitlines()[-TAIL_LINES:]
        return "\n".join(f"    {line}" for line in lines) or "    (empty)"

    def state(self) -> str:
        code = self.process.poll()
        return f"running (pid {self.process.pid})" if code is None else f"exited with {code}"

    def stop(self) -> None:
        """SIGTERM; again after HURRY_SECONDS, which spares toolwatch the rest of its wait
        for a last scrape of its metrics (docs/commands.md: Prometheus scrapes every second
        here, but not before its first target sync, and the demo's own reads of /metrics
        count as scrapes); SIGKILL after STOP_SECONDS more."""
        for wait in (HURRY_SECONDS, STOP_SECONDS):
            if not self.alive():
                return
            self.process.terminate()
            try:
                self.process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        if self.alive():
            self.process.kill()
            self.process.wait()


class Demo:
    """The two processes, their addresses, and the steps from start-up to the alert."""

    def __init__(self, prometheus: str, workdir: Path) -> None:
        self.started = time.monotonic()
        self.prometheus_bin = prometheus
        self.workdir = workdir
        self.toolwatch: Child | None = None
        self.prometheus: Child | None = None
        self.addresses: dict[str, str] = {}
        self.prometheus_url = ""

    def say(self, message: str) -> None:
        print(f"[{time.monotonic() - self.started:5.1f}s] {message}", flush=True)

    def run(self, keep: bool) -> int:
        try:
            self.start_toolwatch()
            self.start_prometheus()
            trace_id = self.send()
            alert = self.wait_for_alert()
        except DemoError as e:
            print(f"alert-demo: {e}", file=sys.stderr, flush=True)
            self.diagnose()
            return EXIT_FAILED
        self.report(alert, trace_id, keep)
        if keep:
            return self.keep_running()
        print("Stopping both (`make alert-demo ARGS=--keep` keeps them running).", flush=True)
        return EXIT_OK

    def poll(self, what: str, probe: Callable[[], T | None], seconds: float) -> T:
        """``probe()``'s first result other than None (an ``OSError`` or ``ValueError`` is
        a miss); fails after ``seconds`` or when a started process has exited."""
        deadline = time.monotonic() + seconds
        while True:
            for child in (self.toolwatch, self.prometheus):
                if child is not None and not child.alive():
                    raise DemoError(f"{child.name} {child.state()} while waiting for {what}")
            try:
                result = probe()
            except (OSError, ValueError):
                result = None
            if result is not None:
                return result
            if time.monotonic() > deadline:
                raise DemoError(f"{what}: not within {seconds:.0f}s")
            time.sleep(POLL_SECONDS)

    def start_toolwatch(self) -> None:
        """Starts ``serve_command()``; its addresses come from its start-up log line."""
        # Flags win over TOOLWATCH_* variables, but not all of them are flags here
        # (TOOLWATCH_LOG_LEVEL, TLS, bearer tokens): the demo runs the example as shipped.
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWATCH_")}
        self.toolwatch = child = Child("toolwatch", serve_command(), self.workdir, env)
        self.addresses = self.poll(
            "toolwatch's listening line",
            lambda: listening_addresses(child.output(stderr=True)),
            STARTUP_SECONDS,
        )
        metrics = f"http://{self.addresses['metrics']}"
        self.poll("toolwatch /readyz", lambda: http_get(f"{metrics}/readyz"), STARTUP_SECONDS)
        listening = ", ".join(f"{name} {self.addresses[name]}" for name in LISTENERS)
        self.say(f"toolwatch ready ({listening}) with {EXAMPLE_CONFIG.relative_to(ROOT)}")

    def start_prometheus(self) -> None:
        """Prometheus on a free port; a port taken between probing and binding is retried
        with another one."""
        config = self.workdir / "prometheus.yml"
        text = yaml.safe_dump(prometheus_config(self.addresses["metrics"]), sort_keys=False)
        config.write_text(text, encoding="utf-8")
        for _ in range(PORT_ATTEMPTS):
            if self._prometheus_on(config, free_port()):
                rules = RULES.relative_to(ROOT)
                url = self.prometheus_url
                self.say(f"prometheus ready on {url}, scraping toolwatch every 1s, rules {rules}")
                return
        raise DemoError(f"prometheus found no free port in {PORT_ATTEMPTS} attempts")

    def _prometheus_on(self, config: Path, port: int) -> bool:
        """Whether Prometheus started on ``port`` became ready; False if the port was taken."""
        command = self.prometheus_command(config, port)
        self.prometheus = child = Child("prometheus", command, self.workdir, dict(os.environ))
        self.prometheus_url = url = f"http://127.0.0.1:{port}"
        try:
            self.poll("Prometheus /-/ready", lambda: http_get(f"{url}/-/ready"), STARTUP_SECONDS)
        except DemoError:
            if child.alive() or "address already in use" not in child.output(stderr=True):
                raise
            return False
        return True

    def prometheus_command(self, config: Path, port: int) -> list[str]:
        return [
            self.prometheus_bin,
            f"--config.file={config}",
            f"--storage.tsdb.path={self.workdir / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            # Keeps the trace_id exemplars of toolwatch_regressions_total (feature flags:
            # https://prometheus.io/docs/prometheus/latest/feature_flags/#exemplars-storage).
            "--enable-feature=exemplar-storage",
        ]

    def send(self) -> str:
        """POSTs the example run under a new trace id to OTLP/HTTP; returns the trace id."""
        trace_id = secrets.token_hex(16)
        body = with_trace_id(EXAMPLE_RUN.read_text(encoding="utf-8"), trace_id)
        url = f"http://{self.addresses['http']}/v1/traces"
        request = urllib.request.Request(
            url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                reply.read()
        except OSError as e:
            raise DemoError(f"POST {url}: {e}") from e
        self.say(f"sent {EXAMPLE_RUN.relative_to(ROOT)} to {url}, trace id {trace_id}")
        return trace_id

    def toolwatch_metrics(self) -> str:
        return http_get(f"http://{self.addresses['metrics']}/metrics").decode()

    def wait_for_alert(self) -> dict[str, Any]:
        """Polls toolwatch's metrics for the finding and Prometheus for the scraped counter
        and the alert, saying each step once, until the alert fires."""
        said: set[str] = set()

        def say_once(message: str) -> None:
            if message not in said:
                said.add(message)
                self.say(message)

        def firing() -> dict[str, Any] | None:
            for sample in regression_samples(self.toolwatch_metrics())[:1]:
                say_once(f"finding counted in toolwatch's metrics: {sample}")
            if prometheus_api(self.prometheus_url, f"query?query={SCRAPED}")["result"]:
                say_once("Prometheus scraped the counter; its rules evaluate it every second")
            alert = demo_alert(prometheus_api(self.prometheus_url, "alerts")["alerts"])
            if alert is None:
                return None
            say_once(f"alert {ALERT} {alert['state']}")
            return alert if alert["state"] == "firing" else None

        return self.poll(f"alert {ALERT} firing", firing, ALERT_SECONDS)

    def report(self, alert: dict[str, Any], trace_id: str, keep: bool) -> None:
        """The alert and the finding; with ``keep``, where to look at the running pair (the
        addresses are of no use once they are stopped)."""
        assert self.toolwatch is not None
        labels = ", ".join(f"{k}={v}" for k, v in sorted(alert["labels"].items()))
        annotations = alert["annotations"]
        finding = finding_line(self.toolwatch.output(), trace_id)
        print(
            f"\n{ALERT} is firing:\n"
            f"  labels:      {labels}\n"
            f"  summary:     {' '.join(annotations.get('summary', '').split())}\n"
            f"  description: {' '.join(annotations.get('description', '').split())}\n"
            f"\ntoolwatch's finding (its stdout, the findings log):\n"
            f"  {finding or '(none found in its stdout)'}\n",
            flush=True,
        )
        if not keep:
            return
        url = self.prometheus_url
        print(
            f"  alerts       {url}/alerts\n"
            f"  the counter  {url}/graph?g0.expr={SCRAPED}&g0.tab=0\n"
            f"  targets      {url}/targets\n"
            f"  metrics      http://{self.addresses['metrics']}/metrics\n"
            f"  OTLP/HTTP    http://{self.addresses['http']}/v1/traces\n"
            f"  OTLP/gRPC    {self.addresses['grpc']}\n"
            f"  findings     {toolwatch_shown()} tail --target {self.addresses['stream']}\n",
            flush=True,
        )

    def keep_running(self) -> int:
        assert self.toolwatch is not None and self.prometheus is not None
        try:  # from the line that says Ctrl-C stops them: a Ctrl-C at once is a clean stop
            print(
                f"Both keep running (their logs and prometheus.yml in {self.workdir}, "
                f"removed at the end); Ctrl-C stops them. To send the run again, as a new "
                f"trace:\n"
                f"  sed \"s/{EXAMPLE_TRACE_ID}/$(python3 -c 'import secrets; "
                f"print(secrets.token_hex(16))')/\" {EXAMPLE_RUN.relative_to(ROOT)} |\n"
                f"    curl -s -X POST -H 'Content-Type: application/json' --data @- "
                f"http://{self.addresses['http']}/v1/traces",
                flush=True,
            )
            while self.toolwatch.alive() and self.prometheus.alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            return EXIT_OK
        for child in (self.toolwatch, self.prometheus):
            print(f"alert-demo: {child.name} {child.state()}\n{child.tail()}", file=sys.stderr)
        return EXIT_FAILED

    def diagnose(self) -> None:
        """What a failed demo needs to be understood, on stderr."""
        lines = ["--- diagnostics"]
        for child in (self.toolwatch, self.prometheus):
            if child is not None:
                lines.append(f"{child.name}: {child.state()}")
        lines.append(f"prometheus targets: {self._targets()}")
        lines.append(f'{REGRESSIONS}{{category="{CATEGORY}"}}: {self._regressions()}')
        for child in (self.toolwatch, self.prometheus):
            if child is not None:
                lines.append(f"{child.name} stderr, last {TAIL_LINES} lines:\n{child.tail()}")
        print("\n".join(lines), file=sys.stderr, flush=True)

    def _targets(self) -> str:
        if not self.prometheus_url:
            return "(not started)"
        try:
            targets = prometheus_api(self.prometheus_url, "targets")["activeTargets"]
        except (OSError, ValueError) as e:
            return f"(unavailable: {e})"
        health = [f"{t['scrapeUrl']} {t['health']} {t['lastError']!r}" for t in targets]
        return "; ".join(health) or "(none yet)"

    def _regressions(self) -> str:
        if "metrics" not in self.addresses:
            return "(toolwatch not listening)"
        try:
            samples = regression_samples(self.toolwatch_metrics())
        except (OSError, ValueError) as e:
            return f"(unavailable: {e})"
        return "; ".join(samples) or "none"

    def close(self) -> None:
        """Stops toolwatch (while Prometheus still scrapes it), then Prometheus, and removes
        the temporary directory. Ctrl-C and SIGTERM are ignored meanwhile (each stop is
        bounded): a second Ctrl-C must not leave a process behind."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for child in (self.toolwatch, self.prometheus):
            if child is not None:
                child.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--keep", action="store_true", help="keep toolwatch and Prometheus running until Ctrl-C"
    )
    args = parser.parse_args(argv)
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print(NO_PROMETHEUS, file=sys.stderr)
        return EXIT_NO_PROMETHEUS
    # SIGTERM or a closed terminal: unwind through Demo.close like Ctrl-C.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    demo = Demo(prometheus, Path(tempfile.mkdtemp(prefix="toolwatch-alert-demo-")))
    try:
        return demo.run(keep=args.keep)
    except KeyboardInterrupt:
        print("alert-demo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        demo.close()


if __name__ == "__main__":
    sys.exit(main())
