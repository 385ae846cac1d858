"""The ``toolwatch`` console script as a user runs it: a real subprocess.

``serve`` is waited for by reading its stderr line by line until the ``listening`` line,
with a deadline (waiting for a process to start, not for the pipeline). SIGTERM drains the
buffer, so a trace still waiting for its completion window is evaluated and dumped on
shutdown: the tests give it a 300 s window so only the drain can build it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import json
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import grpc
import pytest
import trustme
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpExporter,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import toolwatch
from tests.integration import agents
from tests.integration.cli_support import (
    EXAMPLES,
    FREE_PORTS,
    LISTENING,
    Served,
    clean_env,
    run_cli,
    tail_process,
    toolwatch_script,
)
from tests.integration.conftest import RunningServer
from tests.integration.evaluation_support import MINIMAL_POLICY
from tests.integration.reload_support import OTHER_POLICY, RELOADED
from toolwatch import cli, cli_sources
from toolwatch.sinks.tooltraces import read_tooltraces

SLOW_COMPLETION = "assembly:\n  completion_wait_seconds: 300\n  max_trace_age_seconds: 600\n"

LISTEN_VARIABLES = (
    "TOOLWATCH_GRPC_LISTEN",
    "TOOLWATCH_HTTP_LISTEN",
    "TOOLWATCH_METRICS_LISTEN",
    "TOOLWATCH_STREAM_LISTEN",
)


@pytest.fixture
def serve() -> Iterator[Callable[..., Served]]:
    """Factory for ``toolwatch serve`` processes; kills any still running afterwards."""
    started: list[Served] = []

    def start(*args: str, env: Mapping[str, str] | None = None) -> Served:
        served = Served(args, env if env is not None else clean_env())
        started.append(served)
        return served

    yield start
    for served in started:
        if served.process.poll() is None:
            served.process.kill()
            served.process.wait(timeout=10)


def slow_config(tmp_path: Path) -> Path:
    path = tmp_path / "slow.yaml"
    path.write_text(SLOW_COMPLETION)
    return path


def export_once(exporter: SpanExporter, spans: Sequence[ReadableSpan]) -> bool:
    """Whether the SDK exporter delivered ``spans``."""
    try:
        return exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def assert_dumped_on_shutdown(dump: Path, spans: Sequence[ReadableSpan]) -> None:
    """Exactly the trace sent, built by the shutdown drain: complete, its root arrived
    (though not quiet for completion_wait, 300 s)."""
    with dump.open(encoding="utf-8") as stream:
        (trace,) = list(read_tooltraces(stream))
    assert trace.trace_id == format(spans[0].context.trace_id, "032x")
    assert [call.tool_name for call in trace.calls] == ["lookup_order", "issue_refund"]
    assert (trace.complete, trace.incomplete_reason) == (True, None)


# --- information ----------------------------------------------------------------------------


def test_version_prints_the_package_version_and_the_build_revision() -> None:
    result = run_cli("--version")
    expected = f"toolwatch {toolwatch.__version__} (revision unknown)"  # no TOOLWATCH_REVISION
    assert (result.returncode, result.stdout.strip()) == (0, expected)


def test_help_shows_every_commands_examples() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert "examples:" in result.stdout
    assert "toolwatch serve --grpc-listen 127.0.0.1:0" in result.stdout
    assert "toolwatch check-config examples/toolwatch.yaml" in result.stdout
    assert "toolwatch replay --config" in result.stdout
    assert "toolwatch tail --category" in result.stdout


#: Each command, and words of its description that only it has.
DESCRIBED = {
    "serve": "Receive OTLP traces (gRPC and HTTP)",
    "check-config": "Validate the configuration serve would run with",
    "replay": "Evaluate recorded traces offline with serve's pipeline",
    "tail": "Print the findings of a running serve as it finds them",
}


def examples_of(help_text: str) -> list[str]:
    """The commands the ``examples:`` block of ``help_text`` runs (``toolwatch X ...``)."""
    block = help_text.split("\nexamples:\n", 1)[1]
    return re.findall(r"\btoolwatch (\S+)", block)


@pytest.mark.parametrize("command", sorted(DESCRIBED))
def test_each_commands_help_describes_it_and_shows_its_own_examples(command: str) -> None:
    """``serve --help`` showed no description, and the top level's examples (replay, tail and
    check-config lines); ``replay --help`` and ``tail --help`` neither."""
    result = run_cli(command, "--help")
    assert result.returncode == 0
    assert result.stdout.startswith(f"usage: toolwatch {command} ")
    assert DESCRIBED[command] in " ".join(result.stdout.split())
    examples = examples_of(result.stdout)
    assert len(examples) >= 3
    assert set(examples) == {command}


def test_an_unknown_option_is_refused_by_its_command_naming_the_closest() -> None:
    """``serve --confg x`` was refused by the top level, with ``toolwatch``'s usage and no
    hint; now by ``serve``, as argparse words it, with the option meant."""
    result = run_cli("serve", "--confg", "x")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("usage: toolwatch serve [-h] [--config FILE]")
    assert result.stderr.splitlines()[-2:] == [
        "toolwatch serve: error: unrecognized arguments: --confg x",
        "  --confg: did you mean --config?",
    ]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--verison"],
            [
                "toolwatch: error: unrecognized arguments: --verison",
                "  --verison: did you mean --version?",
            ],
        ),
        (
            ["replay", "--fromat", "json", "-"],
            [
                "toolwatch replay: error: unrecognized arguments: --fromat",
                "  --fromat: did you mean --format?",
            ],
        ),
        (
            ["tail", "--min-severty=high", "--jsn"],
            [
                "toolwatch tail: error: unrecognized arguments: --min-severty=high --jsn",
                "  --min-severty: did you mean --min-severity?",
                "  --jsn: did you mean --json?",
            ],
        ),
        (
            ["check-config", "--grpc-lisen", "x"],
            [
                "toolwatch check-config: error: unrecognized arguments: --grpc-lisen",
                "  --grpc-lisen: did you mean --grpc-listen?",
            ],
        ),
        (
            ["serve", "--tls-ca", "ca.pem"],
            [
                "toolwatch serve: error: unrecognized arguments: --tls-ca ca.pem",
                "  --tls-ca is an option of `toolwatch tail`",
            ],
        ),
        (["serve", "extra", "-"], ["toolwatch serve: error: unrecognized arguments: extra -"]),
        (["tail", "--", "--jsn"], ["toolwatch tail: error: unrecognized arguments: -- --jsn"]),
    ],
)
def test_each_unknown_option_is_told_the_closest_known_one(
    args: list[str], said: list[str]
) -> None:
    result = run_cli(*args)
    lines = result.stderr.splitlines()
    errors = [at for at, line in enumerate(lines) if ": error: " in line]
    assert (result.returncode, lines[errors[0] :]) == (2, said)


# --- serve ----------------------------------------------------------------------------------


def test_serve_with_flags_logs_addresses_and_drains_on_sigterm(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    dump = tmp_path / "tooltraces.jsonl"
    ports = [f"--{name}-listen" for name in ("grpc", "http", "metrics", "stream")]
    served = serve(
        *[arg for flag in ports for arg in (flag, "127.0.0.1:0")],
        *["--config", str(slow_config(tmp_path)), "--dump-tooltraces", str(dump)],
        *["--findings", str(tmp_path / "findings.jsonl")],
    )
    addresses = served.wait_for(LISTENING).groupdict()

    assert all(address.startswith("127.0.0.1:") for address in addresses.values())
    assert len({address.rsplit(":", 1)[1] for address in addresses.values()}) == 4
    with urllib.request.urlopen(f"http://{addresses['metrics']}/readyz", timeout=10) as ready:
        assert ready.status == 200
    spans = agents.record(agents.refund_run(), "genai")
    assert export_once(GrpcExporter(endpoint=addresses["grpc"], insecure=True, timeout=10), spans)

    assert served.terminate() == 0
    assert any("drained 1 buffered trace(s) at shutdown" in line for line in served.seen)
    assert_dumped_on_shutdown(dump, spans)


def test_serve_reads_environment_and_flags_win(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    dump = tmp_path / "tooltraces.jsonl"
    env = clean_env(
        TOOLWATCH_CONFIG=str(slow_config(tmp_path)),
        TOOLWATCH_GRPC_LISTEN="nonsense",  # the flag below wins, or serve would exit 2
        TOOLWATCH_HTTP_LISTEN="127.0.0.2:0",
        TOOLWATCH_METRICS_LISTEN="127.0.0.1:0",
        TOOLWATCH_STREAM_LISTEN="127.0.0.1:0",
        TOOLWATCH_DUMP_TOOLTRACES=str(dump),
        TOOLWATCH_FINDINGS=str(tmp_path / "findings.jsonl"),
    )
    served = serve("--grpc-listen", "127.0.0.1:0", env=env)
    addresses = served.wait_for(LISTENING).groupdict()

    assert addresses["grpc"].startswith("127.0.0.1:")
    assert addresses["http"].startswith("127.0.0.2:")
    spans = agents.record(agents.refund_run(), "genai")
    endpoint = f"http://{addresses['http']}/v1/traces"
    assert export_once(HttpExporter(endpoint=endpoint, timeout=10), spans)

    assert served.terminate() == 0
    assert_dumped_on_shutdown(dump, spans)


def test_empty_variables_are_unset(serve: Callable[..., Served]) -> None:
    """``VAR= toolwatch serve`` (a blanked-out variable) means the default, not the value ""."""
    env = clean_env(
        TOOLWATCH_CONFIG="",
        TOOLWATCH_BEARER_TOKEN_FILE="",
        TOOLWATCH_FINDINGS="",
        TOOLWATCH_LOG_LEVEL="",
        **{name: "127.0.0.1:0" for name in LISTEN_VARIABLES},
    )
    served = serve(env=env)
    served.wait_for(LISTENING)
    assert served.terminate() == 0


def test_serve_without_a_configuration_file_warns_that_it_has_no_policy(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    """docs/deployment.md: without a policy toolwatch finds no safety regressions. The image's
    default command, and --help's first example, ran so without a word: the quick start's
    unverified refund then found nothing."""
    served = serve(*FREE_PORTS)
    served.wait_for(
        re.compile(f"WARNING toolwatch: {re.escape(cli_sources.SERVE_DEFAULTS_WARNING)}$")
    )
    served.wait_for(LISTENING)
    assert served.terminate() == 0

    configured = serve(*FREE_PORTS, "--config", str(slow_config(tmp_path)))
    configured.wait_for(LISTENING)
    assert configured.terminate() == 0
    assert not any(cli_sources.SERVE_DEFAULTS_WARNING in line for line in configured.seen)


@pytest.mark.parametrize(("value", "target"), [("", "127.0.0.1:4319"), ("h:1", "h:1")])
def test_tail_takes_its_target_from_the_stream_variable_unless_empty(
    monkeypatch: pytest.MonkeyPatch, value: str, target: str
) -> None:
    monkeypatch.setenv("TOOLWATCH_STREAM", value)
    args = cli._parser().parse_args(["tail"])
    assert args.target == target


def test_an_unknown_log_level_is_a_configuration_error(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("assembly:\n  max_traces: 50\n")
    for known in ("warn", " debug ", "FATAL"):  # logging's own names and aliases
        accepted = run_cli("check-config", str(good), env=clean_env(TOOLWATCH_LOG_LEVEL=known))
        assert (accepted.returncode, accepted.stdout) == (0, f"{good}: ok\n"), known
    result = run_cli("check-config", str(good), env=clean_env(TOOLWATCH_LOG_LEVEL="verbose"))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "toolwatch: configuration error\n"
        "TOOLWATCH_LOG_LEVEL: 'VERBOSE' is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL\n"
    )


def test_serve_with_a_missing_config_file_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    result = run_cli("serve", "--config", str(missing))
    assert result.returncode == 2
    assert f"{missing}: cannot read: No such file or directory" in result.stderr


def test_a_missing_golden_case_file_names_the_setting_and_the_configuration(
    tmp_path: Path,
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text("golden:\n  cases_file: nope.yaml\n")
    result = run_cli("check-config", str(config))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"toolwatch: configuration error in golden.cases_file (named in {config})\n"
        f"{tmp_path / 'nope.yaml'}: cannot read: No such file or directory\n"
    )


def test_serve_with_an_invalid_listen_address_exits_2() -> None:
    result = run_cli("serve", "--grpc-listen", "nonsense")
    assert result.returncode == 2
    assert "listen.grpc: 'nonsense' is not HOST:PORT" in result.stderr


def _listen_config(tmp_path: Path, **addresses: str) -> Path:
    """A config whose listeners take free ports, except those named."""
    listen = {name: "127.0.0.1:0" for name in ("grpc", "http", "metrics", "stream")}
    listen.update(addresses)
    config = tmp_path / "listen.yaml"
    config.write_text("listen:\n" + "".join(f"  {k}: '{v}'\n" for k, v in listen.items()))
    return config


def _serve_with_its_port_taken(
    tmp_path: Path, listener: str
) -> tuple[int, subprocess.CompletedProcess[str]]:
    """``serve`` with ``listener`` on a 127.0.0.1 port another socket holds; it exits 3."""
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        config = _listen_config(tmp_path, **{listener: f"127.0.0.1:{port}"})
        result = run_cli("serve", "--config", str(config))
    assert result.returncode == 3
    return port, result


def test_serve_that_cannot_listen_names_the_address_and_exits_3(tmp_path: Path) -> None:
    port, result = _serve_with_its_port_taken(tmp_path, "http")
    said = f"toolwatch: cannot listen on 127.0.0.1:{port} (listen.http): Address already in use"
    hint = "  choose another with --http-listen HOST:PORT, TOOLWATCH_HTTP_LISTEN or listen.http"
    assert [said, f"{hint} in the file"] == result.stderr.splitlines()[-2:]
    assert "Traceback" not in result.stderr
    assert "Event loop is closed" not in result.stderr  # the gRPC server it started is stopped
    assert "drained" not in result.stderr  # nothing ran, nothing drained


def test_serve_whose_grpc_port_is_taken_says_so(tmp_path: Path) -> None:
    """gRPC says only that it bound nothing: the system's reason for the address is told."""
    port, result = _serve_with_its_port_taken(tmp_path, "grpc")
    said = f"toolwatch: cannot listen on 127.0.0.1:{port} (listen.grpc): Address already in use"
    assert said in result.stderr.splitlines()
    assert "--grpc-listen HOST:PORT, TOOLWATCH_GRPC_LISTEN" in result.stderr


def test_serve_whose_ports_are_all_taken_names_each_at_once(tmp_path: Path) -> None:
    """A second ``make serve`` beside the first: every listener's port is taken. Each is
    told, with its flag, in one go (not one per attempt), and before gRPC binds, so gRPC's
    own log line about its port does not come first."""
    with contextlib.ExitStack() as held:
        busy = {
            name: held.enter_context(socket.create_server(("127.0.0.1", 0)))
            for name in ("grpc", "http", "metrics", "stream")
        }
        ports = {name: sock.getsockname()[1] for name, sock in busy.items()}
        config = _listen_config(tmp_path, **{n: f"127.0.0.1:{p}" for n, p in ports.items()})
        env = clean_env()
        env.pop("GRPC_VERBOSITY", None)  # gRPC core's own logging as a user gets it
        result = run_cli("serve", "--config", str(config), env=env)
    assert result.returncode == 3
    lines = result.stderr.splitlines()
    told = [line for line in lines if line.startswith("toolwatch: cannot listen on")]
    assert told == [
        f"toolwatch: cannot listen on 127.0.0.1:{ports[name]} (listen.{name}):"
        " Address already in use"
        for name in ("grpc", "http", "metrics", "stream")
    ]
    assert lines[-1].startswith("  choose another with --stream-listen HOST:PORT")
    assert not [line for line in lines if "add_port" in line or "Failed to bind" in line]


def test_serve_does_not_start_half_bound_on_a_name(tmp_path: Path) -> None:
    """gRPC binds each address of ``localhost`` it can and reports success if one bound: with
    127.0.0.1 held elsewhere it would listen on ::1 alone, and exporters sending to
    127.0.0.1 would reach the other process."""
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        config = _listen_config(tmp_path, grpc=f"localhost:{port}")
        result = run_cli("serve", "--config", str(config))
    assert result.returncode == 3
    said = (
        f"toolwatch: cannot listen on localhost:{port} (listen.grpc): the port is in use on "
        "127.0.0.1 (gRPC would listen on the other addresses only)"
    )
    assert said in result.stderr.splitlines()


def test_serve_that_cannot_open_an_output_names_it(tmp_path: Path) -> None:
    config = _listen_config(tmp_path)
    listen = config.read_text()
    # A directory that does not exist: a configuration error, check-config says it too.
    missing = tmp_path / "missing" / "tooltraces.jsonl"
    config.write_text(listen + f"output:\n  dump_tooltraces: '{missing}'\n")
    for command in ("serve", "check-config"):
        args = ("serve", "--config", str(config)) if command == "serve" else (command, str(config))
        result = run_cli(*args)
        assert result.returncode == 2, command
        said = f"{config}: output.dump_tooltraces: directory {missing.parent} does not exist"
        assert said in result.stderr.splitlines(), command
    # Given on the command line, the path is blamed on its flag, not on the file.
    config.write_text(listen)
    result = run_cli("serve", "--config", str(config), "--dump-tooltraces", str(missing))
    assert result.returncode == 2
    said = f"--dump-tooltraces: output.dump_tooltraces: directory {missing.parent}"
    assert f"{said} does not exist" in result.stderr.splitlines()
    # A name too long for the file system: the same, with the system's reason.
    too_long = tmp_path / ("t" * 300)
    config.write_text(listen + f"output:\n  dump_tooltraces: '{too_long}'\n")
    result = run_cli("serve", "--config", str(config))
    assert result.returncode == 2
    assert f"output.dump_tooltraces: {too_long}: File name too long" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_second_server_cannot_take_a_port_a_first_serves_grpc_on(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    # gRPC's default SO_REUSEPORT would let both bind and split the connections (and so the
    # spans of a trace) between them.
    taken = start_server().address("grpc")
    result = run_cli("serve", "--config", str(_listen_config(tmp_path, grpc=taken)))
    assert result.returncode == 3
    assert f"toolwatch: cannot listen on {taken} (listen.grpc): " in result.stderr
    assert "Traceback" not in result.stderr


# --- check-config ---------------------------------------------------------------------------


def test_check_config_accepts_a_good_file(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        f"{MINIMAL_POLICY}listen:\n  grpc: 127.0.0.1:14317\nassembly:\n  max_traces: 50\n"
    )
    result = run_cli("check-config", str(good))
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, f"{good}: ok", "")


def test_check_config_prints_what_serve_would_warn_of(tmp_path: Path) -> None:
    (tmp_path / "tokens").write_text("s3cret-token-value\n")
    rare = tmp_path / "rare.yaml"
    rare.write_text("security:\n  auth:\n    bearer_token_file: tokens\n    reload_seconds: 600\n")
    result = run_cli("check-config", str(rare))
    assert (result.returncode, result.stdout.strip()) == (0, f"{rare}: ok")
    assert result.stderr.startswith(f"{rare}: warning: security.auth.reload_seconds is 600: ")


def test_check_config_warns_of_a_certificate_expiring_within_14_days(tmp_path: Path) -> None:
    """As serve warns at start-up: the file and the date, on the real clock."""
    ends = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(days=3)
    leaf = trustme.CA().issue_cert("127.0.0.1", not_after=ends)
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    leaf.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    config = tmp_path / "tls.yaml"
    config.write_text(
        f"{MINIMAL_POLICY}security:\n  tls:\n    cert_file: tls.crt\n    key_file: tls.key\n"
    )
    result = run_cli("check-config", str(config))
    assert (result.returncode, result.stdout.strip()) == (0, f"{config}: ok")
    assert result.stderr == (
        f"{config}: warning: security.tls.cert_file {tmp_path / 'tls.crt'}: the certificate"
        f" expires at {ends:%Y-%m-%d %H:%M:%S} UTC, in 2 days 23 hours: every client refuses"
        " it from then on; renew it (toolwatch takes the renewed file within"
        " tls.reload_seconds, without a restart)\n"
    )


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        ("assembly:\n  max_traces: -1\n", "assembly.max_traces", "greater than 0"),
        ("listen:\n  http: 4318\n", "listen.http", "'4318' is not HOST:PORT"),
        ("ingest:\n  max_body: 5\n", "ingest.max_body", "unknown setting (allowed: "),
        (
            "ingest:\n  max_concurrent_requests: 0\n",
            "ingest.max_concurrent_requests",
            "greater than 0",
        ),
        (
            "listen:\n  grpc: 127.0.0.1:14317\n  metrics: 0.0.0.0:14317\n",
            "listen",
            "listen.grpc and listen.metrics both use port 14317",
        ),
        (
            "assembly:\n  completion_wait_seconds: 400\n",
            "assembly",
            "completion_wait_seconds (400) must be shorter than max_trace_age_seconds (300)",
        ),
        # Settings that could never take effect: accepted, they did nothing, without a word.
        (
            "assembly:\n  local_parent_wait_seconds: 900\n  max_trace_age_seconds: 300\n",
            "assembly",
            "local_parent_wait_seconds (900) must be shorter than max_trace_age_seconds (300)",
        ),
        (
            "assembly:\n  max_spans_per_trace: 300000\n  max_buffered_spans: 200000\n",
            "assembly",
            "max_spans_per_trace (300000) must be smaller than max_buffered_spans (200000)",
        ),
        (
            "assembly:\n  max_buffered_spans: 3000\n",  # below the cap's default
            "assembly",
            "max_spans_per_trace (5000) must be smaller than max_buffered_spans (3000)",
        ),
    ],
)
def test_check_config_rejects_a_bad_file(
    tmp_path: Path, text: str, field: str, reason: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    result = run_cli("check-config", str(bad))
    assert result.returncode == 2
    (line,) = [line for line in result.stderr.splitlines() if field in line]
    assert line.strip().startswith(f"{bad}: {field}: ")
    assert reason in line


@pytest.mark.parametrize(
    ("args", "variables"),
    [
        ((), {"TOOLWATCH_GRPC_LISTEN": "nonsense"}),
        (("--http-listen", "127.0.0.1:70000"), {}),
        (("--tls-cert", "{missing}"), {"TOOLWATCH_TLS_KEY": "{missing}"}),
        ((), {"TOOLWATCH_FINDINGS": "{missing}/findings.jsonl"}),
    ],
)
def test_check_config_refuses_what_serve_refuses_in_its_words(
    tmp_path: Path, args: tuple[str, ...], variables: dict[str, str]
) -> None:
    """The command line and environment of a Deployment, ``serve`` replaced by
    ``check-config``: the same refusal, before serve would bind anything."""
    missing = str(tmp_path / "missing")
    args = tuple(arg.format(missing=missing) for arg in args)
    env = clean_env(
        TOOLWATCH_CONFIG=str(_listen_config(tmp_path)),
        **{name: value.format(missing=missing) for name, value in variables.items()},
    )
    served = run_cli("serve", *args, env=env)
    checked = run_cli("check-config", *args, env=env)
    assert (served.returncode, checked.returncode, checked.stdout) == (2, 2, "")
    assert checked.stderr == served.stderr
    assert checked.stderr.startswith("toolwatch: configuration error\n")


@pytest.mark.parametrize(
    "assembly",
    [
        "{completion_wait_seconds: 0.0000000001}",
        "{completion_wait_seconds: 1.0e-12, max_trace_age_seconds: 1.0e-10}",
    ],
)
def test_durations_below_a_nanosecond_are_refused_up_front(tmp_path: Path, assembly: str) -> None:
    """User-visible harm: ``check-config`` says ``ok`` for a positive assembly duration
    below one nanosecond (``gt=0`` passes), but ``AssemblySettings.limits()`` truncates it
    to 0 ns and ``AssemblyLimits`` then raises ``ValueError: completion_wait_ns: must be at
    least 1, got 0``: ``serve`` dies at start with a Python traceback and exit 1 (not the
    documented 2 with file/field/reason), and so does ``replay``. docs/configuration.md promises
    that a value check-config accepts does not stop serve or replay later. (The same truncation
    turns ``local_parent_wait_seconds: 1e-10`` into 0, which means "off": accepted and
    silently ignored.) Correct: refuse at load, naming the file, the field and the reason
    (a minimum of 1 ns, or round up), in ``config.AssemblySettings``."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(f"assembly: {assembly}\n")
    capture = tmp_path / "run.otlp.jsonl"
    example = json.loads((EXAMPLES / "unverified-refund.otlp.json").read_text())
    capture.write_text(json.dumps(example) + "\n")
    free = [
        arg
        for name in ("grpc", "http", "metrics", "stream")
        for arg in (f"--{name}-listen", "127.0.0.1:0")
    ]
    checked = run_cli("check-config", str(config))
    replayed = run_cli("replay", "--config", str(config), str(capture))
    served = run_cli("serve", "--config", str(config), *free)
    refused = (
        f"  {config}: assembly.completion_wait_seconds: below one nanosecond, the clock's unit,"
        " so it would be 0: give at least 1e-09"
    )
    for done in (checked, replayed, served):
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("toolwatch: configuration error\n"), done.stderr
        assert refused in done.stderr.splitlines()[2], done.stderr


def test_serving_freezes_the_start_up_heap_and_collects_cycles_less_often() -> None:
    # In a fresh interpreter: the collector's state is process-wide. The app imported, as
    # serve has it: its modules are the heap frozen.
    code = (
        "import gc; from toolwatch import app, process_tuning as tuning;"
        " before = gc.get_freeze_count(); tuning.tune_gc();"
        " print(before, gc.get_freeze_count(), *gc.get_threshold(), *tuning._GC_THRESHOLDS)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, frozen, *numbers = (int(n) for n in out.stdout.split())
    assert before == 0
    assert frozen > 10_000  # modules, classes and functions of everything imported
    assert numbers[:3] == numbers[3:] == [20_000, 20, 20]


def test_tail_with_tls_against_a_plaintext_stream_prints_its_own_message_alone() -> None:
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        env = clean_env()
        env.pop("GRPC_VERBOSITY", None)  # gRPC core's own logging as a user gets it
        result = run_cli("tail", "--tls", "--target", f"127.0.0.1:{port}", env=env)
    finally:
        server.stop(None)
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()  # no gRPC core log line about the handshake
    assert line.startswith(f"toolwatch tail: cannot reach the findings stream at 127.0.0.1:{port}")
    assert line.endswith("(is the stream plaintext? drop --tls)")


@pytest.mark.parametrize(
    ("host", "warned"), [("127.0.0.1", False), ("dns:///localhost", False), ("0.0.0.0", True)]
)
def test_tail_warns_before_sending_a_token_beyond_loopback_in_clear_text(
    tmp_path: Path, host: str, warned: bool
) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    with socket.socket() as probe:  # a port nothing listens on: tail gives up at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run_cli("tail", "--target", f"{host}:{port}", "--bearer-token-file", str(token))
    assert result.returncode == 1
    warning = (
        f"toolwatch tail: warning: the bearer token goes to {host}:{port} without TLS, in clear"
        " text on the network: pass --tls-ca (or --tls) if the stream has TLS"
    )
    assert (warning in result.stderr.splitlines()) is warned
    assert result.stderr.splitlines()[-1].startswith("toolwatch tail: cannot reach")


@pytest.mark.parametrize("port", ["70000", "99999", "\u0664\u0663\u0661\u0669"])
def test_target_port_out_of_range_is_a_usage_error(port: str) -> None:
    """User-visible harm: docs/commands.md (Exit codes) says a ``--target`` that is no HOST:PORT
    is a usage error, 2, also with ``--reconnect`` (which otherwise "ends only on Ctrl-C, 130,
    or a usage error"). ``tail`` checks only ``port.isdigit()``: a port above 65535 is handed
    to gRPC, which silently dials it modulo 65536 (``127.0.0.1:99999`` connects to 34463:
    another service's port, or a refused connection), and a port in non-ASCII digits
    (``isdigit`` takes Arabic-Indic digits) fails to resolve. Both are then reported as an
    outage, exit 1, and ``tail --reconnect`` (a systemd unit, a bot) retries them forever.
    Correct: refuse them before dialling, exit 2, as ``listen.*`` addresses are refused
    (``config.parse_listen_address``: "port must be a number from 0 to 65535"); the check
    is in ``tail.run_tail``."""
    target = f"127.0.0.1:{port}"
    try:
        done = subprocess.run(
            [toolwatch_script(), "tail", "--reconnect", "--target", target],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=8,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"tail --reconnect --target {target} kept retrying (no usage error)")
    hint = "" if port.isascii() else ", in the ASCII digits 0-9"
    assert (done.returncode, done.stderr) == (
        2,
        f"toolwatch tail: --target {target!r} is not HOST:PORT (listen.stream): port must be"
        f" a number from 0 to 65535{hint}\n",
    )


def test_target_port_zero_is_a_usage_error() -> None:
    """Port 0 is a listener's (any free port): dialled, it fails, and ``--reconnect`` would
    retry it forever as an outage."""
    done = subprocess.run(
        [toolwatch_script(), "tail", "--reconnect", "--target", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=8,
        check=False,
    )
    assert (done.returncode, done.stderr) == (
        2,
        "toolwatch tail: --target '127.0.0.1:0' is not HOST:PORT (listen.stream): port 0 is a"
        " listener's (any free port), not one to dial\n",
    )


def test_tail_reconnect_waits_for_an_unreachable_stream_until_interrupted() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = tail_process("--reconnect", "--target", f"127.0.0.1:{port}")
    try:
        assert process.stderr is not None
        said = process.stderr.readline()  # tail is waiting to try again
        process.send_signal(signal.SIGINT)
        out, rest = process.communicate(timeout=30)
    finally:
        process.kill()
    assert said.startswith(f"toolwatch tail: cannot reach the findings stream at 127.0.0.1:{port}")
    assert said.endswith("; reconnecting\n")
    assert (process.returncode, out, rest) == (130, "", "")


def test_replay_into_a_pipe_whose_reader_left_ends_quietly_as_sigpipe_would() -> None:
    """`toolwatch replay ... | head -1`: a traceback and exit 1, which means a failed gate."""
    example = Path(__file__).parents[2] / "examples" / "unverified-refund.otlp.json"
    process = subprocess.Popen(
        [toolwatch_script(), "replay", "--no-progress", str(example)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    assert process.stdout is not None
    process.stdout.close()  # the reader leaves before replay writes its report
    _, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (128 + signal.SIGPIPE, b"")


PRODUCTION = """\
listen:
  grpc: 0.0.0.0:4317
  http: 0.0.0.0:4318
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
output:
  findings: /var/log/toolwatch-review-missing/findings.jsonl
security:
  tls:
    cert_file: /etc/toolwatch-review-missing/tls/tls.crt
    key_file: /etc/toolwatch-review-missing/tls/tls.key
  auth:
    bearer_token_file: /etc/toolwatch-review-missing/token
"""


def test_replay_takes_a_production_configuration_without_its_secrets(tmp_path: Path) -> None:
    """User-visible harm: docs/commands.md's CI gate is ``toolwatch replay --config toolwatch.yaml
    canary.otlp.jsonl --max-findings ...`` and says "replay writes none, so it takes a
    production configuration anywhere". But replay validates the whole configuration with
    ``load_config``, including ``security``: the TLS certificate and key are opened and
    loaded (``TlsSettings._file``/``_files_load``) and the bearer-token file read
    (``AuthSettings._has_tokens``), although replay binds no listener and checks no token.
    A production file naming ``/etc/toolwatch/tls/tls.crt`` (a Secret mounted only in the
    pod) is refused in CI with exit 2 ("cannot read"), so the gate never runs unless the
    production TLS key and tokens are copied onto the CI runner. Correct: replay validates
    what it uses (policy, golden, shadow, evaluators, assembly, ingest) and does not require
    the listeners' security files (e.g. load with ``security`` left out, or skip the file
    checks, in ``cli_replay._replay``)."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(PRODUCTION)
    capture = tmp_path / "canary.otlp.jsonl"
    example = json.loads((EXAMPLES / "unverified-refund.otlp.json").read_text())
    capture.write_text(json.dumps(example) + "\n")
    done = run_cli(
        "replay", "--config", str(config), str(capture),
        "--max-findings", "MISSING_VERIFICATION_STEP=0",
    )  # fmt: skip
    # The gate ran and failed on the unverified refund: exit 1, not a configuration error.
    assert done.returncode == 1, done.stderr
    assert "MISSING_VERIFICATION_STEP" in done.stdout
    # check-config still reads them, as serve does before it binds its listeners.
    checked = run_cli("check-config", str(config))
    assert checked.returncode == 2
    assert "security.tls.cert_file: /etc/toolwatch-review-missing/tls/tls.crt: cannot read" in (
        checked.stderr
    )


def test_serve_keeps_the_created_series_the_alert_rules_read(
    serve: Callable[..., Served],
) -> None:
    """PROMETHEUS_DISABLE_CREATED_SERIES (set fleet-wide to save series) would leave the page
    alerts blind to a regression's first finding: toolwatch keeps them and says so."""
    ports = [f"--{name}-listen" for name in ("grpc", "http", "metrics", "stream")]
    served = serve(
        *[arg for flag in ports for arg in (flag, "127.0.0.1:0")],
        env=clean_env(PROMETHEUS_DISABLE_CREATED_SERIES="True"),
    )
    addresses = served.wait_for(LISTENING).groupdict()
    with urllib.request.urlopen(f"http://{addresses['metrics']}/metrics", timeout=10) as page:
        scraped = page.read().decode()
    assert served.terminate() == 0
    assert re.search(r"^toolwatch_spans_received_created\{.*\} 1\.\d+e\+09$", scraped, re.M)
    assert any(
        "WARNING toolwatch: PROMETHEUS_DISABLE_CREATED_SERIES is ignored: the alert rules need"
        " toolwatch_regressions_created" in line
        for line in served.seen
    )


def test_tail_takes_its_cursor_file_from_the_command_line(tmp_path: Path) -> None:
    cursor_file = tmp_path / "tail.cursor"
    cursor_file.write_text("[]")
    result = run_cli("tail", "--target", "127.0.0.1:9", "--cursor-file", str(cursor_file))
    assert result.returncode == 2
    assert result.stderr.startswith(f"toolwatch tail: --cursor-file {cursor_file}: not a tail")


def test_sighup_reloads_a_running_server(serve: Callable[..., Served], tmp_path: Path) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    ports = [f"--{name}-listen" for name in ("grpc", "http", "metrics", "stream")]
    served = serve(
        "--config", str(config), *[arg for flag in ports for arg in (flag, "127.0.0.1:0")]
    )
    metrics = served.wait_for(LISTENING)["metrics"]

    def reload_gauge() -> float:
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as page:
            text = page.read().decode()
        match = re.search(rf"^{RELOADED} (\S+)$", text, re.M)
        assert match is not None
        return float(match[1])

    assert reload_gauge() == 1
    config.write_text("policy: [\n")
    served.process.send_signal(signal.SIGHUP)
    served.wait_for(re.compile("configuration reload failed; the running configuration stays"))
    assert reload_gauge() == 0
    config.write_text(OTHER_POLICY)
    served.process.send_signal(signal.SIGHUP)
    served.wait_for(re.compile("configuration reloaded: policy, golden, evaluators apply"))
    assert reload_gauge() == 1
    assert served.terminate() == 0


#: ``serve`` as the CLI runs it, told that a SIGHUP came while it started (the CLI remembers
#: one that comes before its handler is in place: a window of a few milliseconds a test
#: cannot aim at).
_HUNG_UP_WHILE_STARTING = """
import asyncio, logging, sys
from pathlib import Path
from toolwatch.serving import serve
from toolwatch.config import load_config
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
ports = {f"listen.{name}": "127.0.0.1:0" for name in ("grpc", "http", "metrics", "stream")}
def load():
    return load_config(Path(sys.argv[1]), ports)
sys.exit(asyncio.run(serve(load(), load, hung_up=lambda: True)))
"""


def test_a_sighup_that_came_while_serve_started_is_acted_on_once_it_serves(
    tmp_path: Path,
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    served = Served(
        [str(config)], clean_env(), command=[sys.executable, "-c", _HUNG_UP_WHILE_STARTING]
    )
    try:
        served.wait_for(re.compile("INFO toolwatch: listening "))
        served.wait_for(re.compile("INFO toolwatch: configuration reloaded: policy, golden"))
        assert served.terminate() == 0
    finally:
        served.process.kill()


def test_a_sigterm_that_came_while_serve_started_stops_it_once_it_serves(
    tmp_path: Path,
) -> None:
    """The CLI remembers a SIGTERM or SIGINT that comes before serve's handler is in place
    (its imports take about 0.4 s): the server starts, drains nothing and exits 0, where the
    default handler ended it with 143."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    script = _HUNG_UP_WHILE_STARTING.replace("hung_up=lambda: True", "terminated=lambda: True")
    served = Served([str(config)], clean_env(), command=[sys.executable, "-c", script])
    try:
        served.wait_for(re.compile("INFO toolwatch: listening "))
        served.wait_for(re.compile("INFO toolwatch: shutting down"))
        assert served.process.wait(timeout=30) == 0
    finally:
        served.process.kill()


def test_serve_that_does_not_start_leaves_sigterm_and_sigint_as_they_were(
    tmp_path: Path,
) -> None:
    """While serve starts it only remembers a SIGTERM or SIGINT; one that never served (a
    configuration error here) gives them back: a later Ctrl-C in the process interrupts."""
    from toolwatch import cli  # noqa: PLC0415  (in process: its handlers are this process's)

    bad = tmp_path / "bad.yaml"
    bad.write_text("listen: 5\n", encoding="utf-8")
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        assert cli.main(["serve", "--config", str(bad)]) == 2
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])
