"""``toolwatch tail``'s TLS files: an unusable one is a usage error naming its flag."""

from __future__ import annotations

import concurrent.futures
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import trustme

from tests.integration.cli_support import clean_env, run_cli


@pytest.fixture
def listening() -> Iterator[str]:
    """A loopback port that accepts connections (what tail dials is reachable)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"127.0.0.1:{server.getsockname()[1]}"


def _not_a_certificate(tmp_path: Path) -> Path:
    wrong = tmp_path / "ca.pem"
    wrong.write_text("policy:\n  dangerous_tools: [issue_refund]\n")  # the wrong file
    return wrong


def test_a_ca_file_that_holds_no_certificate_is_a_usage_error(
    tmp_path: Path, listening: str
) -> None:
    """docs/commands.md, Exit codes: 2 bad usage or configuration. A --tls-ca file that holds no
    certificate (the wrong file, a DER file) was told as an unreachable server, exit 1,
    with advice wrong whatever the server speaks: "(is the stream plaintext? drop
    --tls/--tls-ca)"."""
    wrong = _not_a_certificate(tmp_path)
    result = run_cli("tail", "--target", listening, "--tls-ca", str(wrong))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        f"toolwatch tail: --tls-ca: {wrong}: holds no PEM CA certificate ("
    ), result.stderr
    assert "drop --tls" not in result.stderr, result.stderr


def test_reconnect_does_not_retry_for_ever_on_a_ca_file_that_holds_no_certificate(
    tmp_path: Path, listening: str
) -> None:
    """With --reconnect the same file was taken for an outage: tail said "reconnecting" and
    retried for ever (a service manager restarting it saw it running, printing nothing)."""
    wrong = _not_a_certificate(tmp_path)
    try:
        result = run_cli(
            "tail", "--reconnect", "--target", listening, "--tls-ca", str(wrong), timeout=30
        )
    except subprocess.TimeoutExpired as still_running:
        pytest.fail(f"tail --reconnect still retrying after 30 s: {still_running.stderr!r}")
    assert result.returncode == 2, result.stderr
    assert f"--tls-ca: {wrong}" in result.stderr


@pytest.mark.parametrize("flag", ["--tls-ca", "--tls-cert", "--tls-key", "--bearer-token-file"])
def test_a_missing_file_names_its_flag(tmp_path: Path, listening: str, flag: str) -> None:
    """A missing --tls-ca, --tls-cert or --tls-key was told as a bare "[Errno 2] No such file
    or directory", naming the path but not which flag (or TOOLWATCH_TAIL_* variable) gave
    it; a missing --tls-ca with a --bearer-token-file was blamed on the token file."""
    missing = tmp_path / "missing.pem"
    present = _not_a_certificate(tmp_path)
    pair = flag in ("--tls-cert", "--tls-key")
    given = {"--tls-cert": present, "--tls-key": present} if pair else {}
    if flag == "--tls-ca":
        given["--bearer-token-file"] = _token(tmp_path)
    given[flag] = missing
    args = [arg for name, path in given.items() for arg in (name, str(path))]
    result = run_cli("tail", "--target", listening, *args)
    assert result.returncode == 2, result.stderr
    told = f"toolwatch tail: {flag}: {missing}: cannot read: No such file or directory\n"
    assert result.stderr.endswith(told), result.stderr


def _token(tmp_path: Path) -> Path:
    token = tmp_path / "token"
    token.write_text("s3cret-token-value\n")
    return token


def test_a_client_certificate_and_key_that_do_not_load_name_both_flags(
    tmp_path: Path, listening: str
) -> None:
    wrong = _not_a_certificate(tmp_path)
    result = run_cli(
        "tail", "--target", listening, "--tls-cert", str(wrong), "--tls-key", str(wrong)
    )
    assert result.returncode == 2, result.stderr
    assert f"--tls-cert {wrong} with --tls-key {wrong}: not a PEM certificate" in result.stderr


@pytest.mark.parametrize(
    ("flag", "env"),
    [
        ("--tls-ca", "TOOLWATCH_TAIL_TLS_CA"),
        ("--bearer-token-file", "TOOLWATCH_TAIL_BEARER_TOKEN_FILE"),
    ],
)
def test_a_file_a_variable_gave_is_named_by_the_variable(
    tmp_path: Path, listening: str, flag: str, env: str
) -> None:
    """A file set by a TOOLWATCH_TAIL_* variable was blamed on its flag, which the operator
    (a unit file, a pod's env) never passed; the flag given too wins, and is named."""
    missing = tmp_path / "missing.pem"
    result = run_cli("tail", "--target", listening, env={**clean_env(), env: str(missing)})
    assert result.returncode == 2, result.stderr
    told = f"toolwatch tail: {env}: {missing}: cannot read: No such file or directory\n"
    assert result.stderr.endswith(told), result.stderr
    other = tmp_path / "other.pem"
    result = run_cli(
        "tail", "--target", listening, flag, str(other), env={**clean_env(), env: str(missing)}
    )
    assert result.stderr.endswith(
        f"toolwatch tail: {flag}: {other}: cannot read: No such file or directory\n"
    )


def test_half_a_client_certificate_from_a_variable_names_it_and_what_is_missing(
    tmp_path: Path, listening: str
) -> None:
    present = _not_a_certificate(tmp_path)
    result = run_cli(
        "tail", "--target", listening, env={**clean_env(), "TOOLWATCH_TAIL_TLS_CERT": str(present)}
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.endswith(
        "toolwatch tail: TOOLWATCH_TAIL_TLS_CERT without --tls-key (or TOOLWATCH_TAIL_TLS_KEY):"
        " a client certificate needs both\n"
    ), result.stderr


def test_tls_a_variable_turned_on_against_a_plaintext_stream_says_to_unset_it(
    tmp_path: Path,
) -> None:
    """The advice named the flags ("drop --tls/--tls-ca") when TOOLWATCH_TAIL_TLS_CA, set in
    a unit file or a pod's env, had turned TLS on."""
    ca = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca))
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        env = clean_env(TOOLWATCH_TAIL_TLS_CA=str(ca))
        env.pop("GRPC_VERBOSITY", None)
        result = run_cli("tail", "--tls", "--target", f"127.0.0.1:{port}", env=env)
    finally:
        server.stop(None)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines()[-1].endswith(
        "(is the stream plaintext? drop --tls and unset TOOLWATCH_TAIL_TLS_CA)"
    ), result.stderr
