"""A SIGHUP to a configuration with ``ingest.decoder: compiled`` where this install cannot run
it (the hot path runs as Python, or the compiled scanner is not built), the one ``serve`` and
``check-config`` refuse with exit 2 (review of 73e1b44).

Was: a reload loaded the file without that check, kept ``ingest`` (restart-only) and said the
reload worked ("configuration reloaded without ingest, which changed: they take a restart",
``toolwatch_config_last_reload_successful`` 1); the restart it asked for was refused, so a
Deployment's pods crash-looped at their next restart, and nothing had named
``ingest.decoder``. Now: the reload fails, naming it (``_Sources.load_reloaded``, what
``serve`` reloads with), and ``ToolwatchConfigReloadFailed`` fires before any restart.

The server runs in-process and reloads as SIGHUP has it, with ``serve``'s own loader; the hot
path is made to run as Python by ``TOOLWATCH_PURE_PYTHON=1``, which the check reads."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import RunningServer
from toolwatch import cli_sources


def test_a_reload_to_a_decoder_this_install_cannot_run_fails_naming_it(
    start_server: Callable[..., RunningServer],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "toolwatch.yaml"
    config.write_text("ingest:\n  decoder: auto\n")
    server = start_server(config)
    assert server.sample("toolwatch_config_last_reload_successful") == 1.0
    config.write_text("ingest:\n  decoder: compiled\n")
    monkeypatch.setenv("TOOLWATCH_PURE_PYTHON", "1")
    sources = cli_sources.Sources(config, {}, {})

    with caplog.at_level(logging.INFO, logger="toolwatch"):
        reloaded = server.call(lambda: server.app.reload(sources.load_reloaded))

    assert reloaded is False
    assert server.sample("toolwatch_config_last_reload_successful") == 0.0
    said = [r.getMessage() for r in caplog.records if r.name.startswith("toolwatch")]
    assert any(
        f"{config}: ingest.decoder: 'compiled', but the hot path runs pure Python"
        " (TOOLWATCH_PURE_PYTHON=1)"
        in message
        and "reload failed" in message
        for message in said
    ), said
