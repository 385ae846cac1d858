"""Argument values stay out of metric labels, the findings log and the stream unless a field
is named; start-up warnings and errors of the security settings (dump file modes,
listeners beyond loopback, missing or mismatched certificate and token files)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import RunningServer, StartServer
from tests.integration.pki_support import Pki
from tests.integration.security_support import (
    POLICY,
    auth,
    missing_verification,
    tail_during,
    tls,
    unverified_refund,
)
from toolwatch.config import ConfigError, load_config
from toolwatch.sinks.findings import REDACTED
from toolwatch.tail_access import StreamAccess


def metric_label_values(server: RunningServer) -> set[str]:
    samples = (s for metric in server.registry.collect() for s in metric.samples)
    return {value for sample in samples for value in sample.labels.values()}


@pytest.mark.parametrize(
    ("show_fields", "logged", "streamed"),
    [
        (
            [],
            {"failed_verification_spans": [], "fields": {"order_id": REDACTED}, "outcome": "ok"},
            {
                "failed_verification_spans": "[]",
                "fields": '{"order_id":"[redacted]"}',
                "outcome": "ok",
            },
        ),
        (
            ["issue_refund.order_id"],
            {"failed_verification_spans": [], "fields": {"order_id": "A-1001"}, "outcome": "ok"},
            {"failed_verification_spans": "[]", "fields": '{"order_id":"A-1001"}', "outcome": "ok"},
        ),
        (
            ["issue_refund.value", "fields"],
            {"failed_verification_spans": [], "fields": {"order_id": REDACTED}, "outcome": "ok"},
            {
                "failed_verification_spans": "[]",
                "fields": '{"order_id":"[redacted]"}',
                "outcome": "ok",
            },
        ),
    ],
)
def test_argument_values_are_shown_only_for_configured_fields(
    start_server: StartServer,
    tmp_path: Path,
    show_fields: list[str],
    logged: dict[str, Any],
    streamed: dict[str, Any],
) -> None:
    server = start_server(output__show_fields=show_fields, **POLICY)

    run = tail_during(server, unverified_refund(server), StreamAccess(), as_json=True)

    log_text = (tmp_path / "findings.jsonl").read_text()
    [in_log] = missing_verification(log_text)
    [in_stream] = missing_verification(run.out)
    assert in_log["details"] == logged
    assert in_stream["details"] == streamed
    if "issue_refund.order_id" not in show_fields:
        assert "A-1001" not in log_text
        assert "A-1001" not in run.out
    assert (
        server.sample(
            "toolwatch_regressions_total",
            {
                "category": "MISSING_VERIFICATION_STEP",
                "severity": in_log["severity"],
                "evaluator": in_log["evaluator"],
                "agent": "refund-bot",
                "tool": "issue_refund",
            },
        )
        == 1
    )
    assert not any("A-1001" in value for value in metric_label_values(server))


def test_the_unredacted_tooltrace_dump_is_created_readable_by_its_owner_alone(
    start_server: StartServer, tmp_path: Path
) -> None:
    """The dump holds arguments and results as agents sent them; the findings log, redacted,
    is created as the umask says."""
    umask = os.umask(0o022)
    try:
        start_server()
    finally:
        os.umask(umask)
    assert (tmp_path / "tooltraces.jsonl").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "findings.jsonl").stat().st_mode & 0o777 == 0o644


def test_an_existing_tooltrace_dump_others_may_read_is_warned_about(
    start_server: StartServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dump = tmp_path / "tooltraces.jsonl"
    dump.touch(mode=0o644)
    dump.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        start_server()
    assert f"{dump} (output.dump_tooltraces) may be read by others (mode 644)" in caplog.text
    assert dump.stat().st_mode & 0o777 == 0o644  # kept: its owner decides


def test_a_tooltrace_dump_to_a_device_is_not_warned_about(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        start_server(output__dump_tooltraces="/dev/null")
    assert "may be read by others" not in caplog.text


@pytest.mark.parametrize(
    ("protection", "warning"),
    [
        ("none", "without TLS or authentication"),
        ("tls", "with TLS but no client authentication: any client that reaches it is served"),
        ("mutual", None),
        ("auth", "without TLS: its bearer tokens cross the network in clear text"),
        ("both", None),
    ],
)
def test_a_listener_beyond_loopback_warns_without_tls_or_auth(
    start_server: StartServer,
    pki: Pki,
    caplog: pytest.LogCaptureFixture,
    protection: str,
    warning: str | None,
) -> None:
    overrides = {
        "none": {},
        "tls": tls(pki),
        "mutual": tls(pki, mutual=True),
        "auth": auth(pki.token_file),
        "both": {**tls(pki), **auth(pki.token_file)},
    }[protection]
    with caplog.at_level(logging.WARNING, logger="toolwatch"):
        server = start_server(listen__grpc="0.0.0.0:0", **overrides)
    address = server.address("grpc")
    assert address.startswith("0.0.0.0:")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    expected = f"grpc listener {address} is reachable beyond loopback {warning}"
    assert warnings == ([expected] if warning else [])


def test_a_missing_certificate_file_fails_naming_the_file(pki: Pki, tmp_path: Path) -> None:
    missing = tmp_path / "absent.pem"
    overrides = {
        "security.tls.cert_file": str(missing),
        "security.tls.key_file": str(pki.server_key),
    }
    with pytest.raises(ConfigError) as error:
        load_config(None, overrides)
    message = str(error.value)
    assert "security.tls.cert_file" in message
    assert f"{missing}: cannot read: No such file or directory" in message


def test_a_key_that_does_not_match_the_certificate_fails(pki: Pki) -> None:
    overrides = {
        "security.tls.cert_file": str(pki.server_cert),
        "security.tls.key_file": str(pki.client_key),
    }
    with pytest.raises(ConfigError) as error:
        load_config(None, overrides)
    assert f"security.tls: {pki.server_cert} with key {pki.client_key}" in str(error.value)
    assert "(key values mismatch)" in str(error.value)


def test_an_empty_token_file_fails_naming_the_file(tmp_path: Path) -> None:
    empty = tmp_path / "tokens"
    empty.write_text("\n")
    with pytest.raises(ConfigError) as error:
        load_config(None, {"security.auth.bearer_token_file": str(empty)})
    assert f"security.auth.bearer_token_file: {empty}: holds no bearer token" in str(error.value)


def test_paths_in_a_config_file_are_relative_to_the_file(pki: Pki, tmp_path: Path) -> None:
    config_file = pki.ca.parent / "toolwatch.yaml"
    config_file.write_text(
        "security:\n"
        "  tls: {cert_file: server.pem, key_file: server.key, client_ca_file: client-ca.pem}\n"
        "  auth: {bearer_token_file: tokens, listeners: [grpc]}\n"
    )
    config = load_config(config_file).security
    assert config.tls is not None and config.auth is not None
    assert (config.tls.cert_file, config.tls.client_ca_file) == (pki.server_cert, pki.client_ca)
    assert config.auth.bearer_token_file == pki.token_file
    assert [config.uses_auth(name) for name in ("grpc", "http")] == [True, False]
    assert config.uses_tls("metrics")
