"""``ingest.max_connections`` against the process's open-file limit (``RLIMIT_NOFILE``):
``serve`` raises its soft limit to hold every listener's bound, and says, as ``check-config``
does, when the hard limit cannot (``toolwatch.process_tuning``). Real processes started
under ``prlimit``, real sockets, the OpenTelemetry SDK's gRPC exporter."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration.cli_support import FREE_PORTS, LISTENING, Served, clean_env, toolwatch_script
from tests.integration.conftest import until
from tests.integration.evaluation_support import MINIMAL_POLICY
from tests.integration.otlp_support import refund_spans

#: What the warning says under a hard limit of 1,024 with the default bound (512).
SHORT = (
    "the open-file limit (ulimit -n, hard) is 1024, under the 2112 that ingest.max_connections"
    " (512) on the four listeners and a reserve of 64 need"
)


def _flood(address: str, n: int) -> list[socket.socket]:
    host, port = address.rsplit(":", 1)
    return [socket.create_connection((host, int(port)), timeout=10) for _ in range(n)]


def test_default_max_connections_floods_do_not_exhaust_a_1024_descriptor_limit() -> None:
    """Under ``ulimit -n 1024`` (systemd's default soft limit) with the default bound (512),
    a peer holding 512 idle connections on the OTLP/HTTP listener and 512 on the metrics one
    (each within the bound). Was: they took every descriptor of the process, and the
    OTLP/gRPC listener accepted nothing (EMFILE). Now: ``serve`` raised its soft limit
    toward the hard one (20,000) at start-up, and the gRPC listener serves."""
    served = Served(
        FREE_PORTS,
        clean_env(),
        command=["prlimit", "--nofile=1024:20000", toolwatch_script(), "serve"],
    )
    held: list[socket.socket] = []
    try:
        match = served.wait_for(LISTENING)
        descriptors = Path(f"/proc/{served.process.pid}/fd")  # prlimit execs toolwatch
        at_rest = len(list(descriptors.iterdir()))
        held += _flood(match["http"], 512)
        held += _flood(match["metrics"], 512)
        # The accepts are the server's, in its own time: wait until it holds them all.
        assert until(lambda: len(list(descriptors.iterdir())) >= at_rest + 1024)
        exporter = OTLPSpanExporter(endpoint=match["grpc"], insecure=True, timeout=10)
        try:
            result = exporter.export(refund_spans())
        finally:
            exporter.shutdown()
        assert result is SpanExportResult.SUCCESS, served.seen[-5:]
        assert not [line for line in served.seen if "open-file limit" in line]
    finally:
        for sock in held:
            sock.close()
        served.process.kill()
        served.process.wait(timeout=10)


def test_serve_warns_when_the_hard_limit_cannot_hold_every_listeners_bound() -> None:
    """Was: nothing said that four times ``ingest.max_connections`` did not fit. Now: a
    warning naming the limit, what is needed and what to do, then ``serve`` serves."""
    served = Served(
        FREE_PORTS,
        clean_env(),
        command=["prlimit", "--nofile=1024:1024", toolwatch_script(), "serve"],
    )
    try:
        served.wait_for(LISTENING)
        (line,) = [line for line in served.seen if "open-file limit" in line]
        assert SHORT in line
        assert line.endswith("or lower ingest.max_connections to 240 or less")
    finally:
        assert served.terminate() == 0


def _check_limited(config: Path) -> subprocess.CompletedProcess[str]:
    """``toolwatch check-config CONFIG`` under a hard open-file limit of 1,024."""
    return subprocess.run(
        ["prlimit", "--nofile=1024:1024", toolwatch_script(), "check-config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
        check=False,
    )


def test_check_config_prints_the_open_file_warning_serve_would_log(tmp_path: Path) -> None:
    """As serve warns at start-up, under the hard limit check-config runs with. Was: not
    said. Now: printed as the other warnings are, the file still ok; not for a bound that
    fits (240 x 4 + 64 = 1,024)."""
    fits, short = tmp_path / "fits.yaml", tmp_path / "short.yaml"
    fits.write_text(f"{MINIMAL_POLICY}ingest:\n  max_connections: 240\n")
    short.write_text(f"{MINIMAL_POLICY}ingest:\n  max_connections: 512\n")
    checked = _check_limited(fits)
    assert (checked.returncode, checked.stdout.strip(), checked.stderr) == (0, f"{fits}: ok", "")
    checked = _check_limited(short)
    assert (checked.returncode, checked.stdout.strip()) == (0, f"{short}: ok")
    assert checked.stderr.startswith(f"{short}: warning: {SHORT}: ")
    assert checked.stderr.endswith("or lower ingest.max_connections to 240 or less\n")
