"""``check-config`` checks what ``serve`` would run: the file, then the keys serve's flags and
``TOOLWATCH_*`` variables set over it (a flag wins over its variable), and the file
``--config`` or ``TOOLWATCH_CONFIG`` names when no FILE is given. Run in-process through
``cli.main``; check-config binds nothing."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest

from toolwatch import cli, cli_sources, compiled_state
from toolwatch.ingest import scan

DAY = datetime.timedelta(days=1)

#: A file check-config takes without a warning: a policy (one with none is warned of).
GOOD = (
    "listen:\n  grpc: 127.0.0.1:14317\n"
    "policy:\n  dangerous_tools: [issue_refund]\n  verification_tools: [lookup_order]\n"
)


@pytest.fixture(autouse=True)
def _no_toolwatch_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in os.environ:
        if name.startswith("TOOLWATCH_") and name != "TOOLWATCH_PURE_PYTHON":
            monkeypatch.delenv(name)


def check_config(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``toolwatch check-config ARGS``: the exit code, stdout and stderr."""
    code = cli.main(["check-config", *args])
    out, err = capsys.readouterr()
    return code, out, err


def good_file(tmp_path: Path, text: str = GOOD) -> Path:
    path = tmp_path / "toolwatch.yaml"
    path.write_text(text)
    return path


def test_a_variable_serve_would_refuse_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = good_file(tmp_path)
    monkeypatch.setenv("TOOLWATCH_GRPC_LISTEN", "nonsense")
    assert check_config(capsys, str(config)) == (
        2,
        "",
        "toolwatch: configuration error\n"
        f"{config}: 1 configuration error(s)\n"
        "  TOOLWATCH_GRPC_LISTEN: listen.grpc: 'nonsense' is not HOST:PORT (got 'nonsense')\n",
    )


def test_a_flag_serve_would_refuse_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = good_file(tmp_path)
    code, out, err = check_config(capsys, str(config), "--metrics-listen", "0.0.0.0:99999")
    assert (code, out) == (2, "")
    assert err.splitlines()[2] == (
        "  --metrics-listen: listen.metrics: '0.0.0.0:99999': port must be a number from 0 to"
        " 65535 (got '0.0.0.0:99999')"
    )


def test_a_variable_naming_a_missing_file_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = good_file(tmp_path)
    missing = tmp_path / "tokens"
    monkeypatch.setenv("TOOLWATCH_BEARER_TOKEN_FILE", str(missing))
    code, out, err = check_config(capsys, str(config))
    assert (code, out) == (2, "")
    assert err.splitlines()[2] == (
        f"  TOOLWATCH_BEARER_TOKEN_FILE: security.auth.bearer_token_file: {missing}: cannot"
        f" read: No such file or directory (got {str(missing)!r})"
    )


def test_an_output_a_variable_names_is_checked_as_serve_checks_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = good_file(tmp_path)
    missing = tmp_path / "missing" / "tooltraces.jsonl"
    monkeypatch.setenv("TOOLWATCH_DUMP_TOOLTRACES", str(missing))
    assert check_config(capsys, str(config)) == (
        2,
        "",
        "toolwatch: configuration error\nTOOLWATCH_DUMP_TOOLTRACES: output.dump_tooltraces:"
        f" directory {missing.parent} does not exist\n",
    )


def test_a_file_value_an_override_replaces_is_not_refused_and_the_ok_line_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve takes this file with the variable set: its listen.grpc is never used."""
    config = good_file(tmp_path, GOOD.replace("127.0.0.1:14317", "nonsense"))
    monkeypatch.setenv("TOOLWATCH_GRPC_LISTEN", "127.0.0.1:4317")
    monkeypatch.setenv("TOOLWATCH_FINDINGS", str(tmp_path / "findings.jsonl"))
    assert check_config(capsys, str(config)) == (
        0,
        f"{config}: ok; overrides: listen.grpc from TOOLWATCH_GRPC_LISTEN, output.findings"
        " from TOOLWATCH_FINDINGS\n",
        "",
    )


def test_a_flag_wins_over_its_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = good_file(tmp_path)
    monkeypatch.setenv("TOOLWATCH_GRPC_LISTEN", "nonsense")  # serve never reads it
    monkeypatch.setenv("TOOLWATCH_HTTP_LISTEN", "127.0.0.1:0")
    code, out, err = check_config(capsys, str(config), "--grpc-listen", "127.0.0.1:0")
    assert (code, err) == (0, "")
    assert out == (
        f"{config}: ok; overrides: listen.grpc from --grpc-listen, listen.http from"
        " TOOLWATCH_HTTP_LISTEN\n"
    )


def test_an_empty_variable_is_unset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = good_file(tmp_path)
    monkeypatch.setenv("TOOLWATCH_GRPC_LISTEN", "")
    monkeypatch.setenv("TOOLWATCH_CONFIG", "")
    assert check_config(capsys, str(config)) == (0, f"{config}: ok\n", "")


def test_without_a_file_it_checks_the_one_config_or_the_variable_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = good_file(tmp_path, "assembly:\n  max_traces: -1\n")
    monkeypatch.setenv("TOOLWATCH_CONFIG", str(config))
    for args in ((), ("--config", str(config))):
        code, out, err = check_config(capsys, *args)
        assert (code, out) == (2, ""), args
        assert err.splitlines()[1:] == [
            f"{config}: 1 configuration error(s)",
            f"  {config}: assembly.max_traces: Input should be greater than 0 (got -1)"
            " (line 2, column 15)",
        ], args


def test_a_file_given_wins_over_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = good_file(tmp_path)
    monkeypatch.setenv("TOOLWATCH_CONFIG", str(tmp_path / "elsewhere.yaml"))
    assert check_config(capsys, str(config)) == (0, f"{config}: ok\n", "")


def test_a_file_and_config_together_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = good_file(tmp_path)
    with pytest.raises(SystemExit) as usage:
        check_config(capsys, str(config), "--config", str(config))
    assert usage.value.code == 2
    assert "argument --config: not allowed with argument CONFIG_FILE" in capsys.readouterr().err


def test_without_any_file_it_checks_the_defaults_with_the_overrides(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    warned = f"defaults: warning: {cli_sources.SERVE_DEFAULTS_WARNING}\n"
    assert check_config(capsys) == (0, "defaults: ok\n", warned)
    monkeypatch.setenv("TOOLWATCH_STREAM_LISTEN", "127.0.0.1:4317")  # the gRPC default's port
    code, out, err = check_config(capsys)
    assert (code, out) == (2, "")
    assert err.splitlines()[2] == (
        "  defaults and TOOLWATCH_STREAM_LISTEN: listen: listen.grpc and listen.stream both use"
        " port 4317 ('127.0.0.1:4317', '127.0.0.1:4317')"
    )


def test_help_lists_the_flags_serve_takes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["check-config", "--help"])
    shown = capsys.readouterr().out
    for flag, variable, _key, _help in cli_sources.SERVE_FLAGS:
        assert flag in shown
        assert variable in shown
    assert "--config" in shown


def test_an_expired_certificate_is_refused_as_serve_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``serve`` checks it at start-up only (a SIGHUP does not: security is restart-only)."""
    import trustme  # noqa: PLC0415 (only this test needs certificates)

    now = datetime.datetime.now(datetime.UTC)
    issued = trustme.CA().issue_cert("127.0.0.1", not_before=now - 30 * DAY, not_after=now - DAY)
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    config = good_file(tmp_path)
    code, out, err = check_config(
        capsys, str(config), "--tls-cert", str(cert), "--tls-key", str(key)
    )
    assert (code, out) == (2, "")
    assert err.splitlines()[1].startswith(
        f"--tls-cert: security.tls.cert_file: {cert}: the certificate expired at"
    )


@pytest.mark.parametrize(
    ("listen", "said"),
    [
        ("--grpc-listen=0.0.0.0:4317", "grpc listener 0.0.0.0:4317"),
        ("--metrics-listen=[::]:9464", "metrics listener [::]:9464"),
        ("--http-listen=localhost:4318", None),
        ("--stream-listen=[::1]:4319", None),
    ],
)
def test_a_listener_serve_would_warn_about_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], listen: str, said: str | None
) -> None:
    """Beyond loopback without TLS or authentication, as ``serve`` warns once it listens."""
    config = good_file(tmp_path)
    code, out, err = check_config(capsys, str(config), listen)
    assert (code, out.startswith(f"{config}: ok")) == (0, True)
    warned = (
        f"{config}: warning: {said} is reachable beyond loopback without TLS or authentication\n"
    )
    assert err == (warned if said else "")


def test_a_required_compiled_build_that_runs_as_python_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ingest.decoder: compiled`` with the hot path running as Python
    (``TOOLWATCH_PURE_PYTHON=1``). Was (the README walk-through of stop 46): check-config
    said ``ok`` while ``serve`` refused to start (exit 3), "which check-config cannot see".
    Now: both refuse the configuration (2), naming the field, as they refuse it where the
    compiled scanner cannot be used."""
    config = good_file(tmp_path, GOOD + "ingest:\n  decoder: compiled\n")
    monkeypatch.setenv("TOOLWATCH_PURE_PYTHON", "1")
    assert check_config(capsys, str(config)) == (
        2,
        "",
        "toolwatch: configuration error\n"
        f"{config}: ingest.decoder: 'compiled', but the hot path runs pure Python"
        " (TOOLWATCH_PURE_PYTHON=1): about twice the CPU per span\n",
    )
    monkeypatch.delenv("TOOLWATCH_PURE_PYTHON")
    code, _out, err = check_config(capsys, str(config))
    if compiled_state.state().all_compiled and not scan.COMPILED_UNAVAILABLE:
        assert (code, err) == (0, "")
    else:  # a build without the compiled parts: refused for one or the other
        assert code == 2 and "ingest.decoder" in err
