"""Start-up says where the outputs go: a relative ``output.findings`` is opened in serve's
working directory (not beside the configuration file, as ``golden.cases_file`` is), which the
on-call audit found nowhere in the log."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import RunningServer

ROOT = Path(__file__).resolve().parents[2]


def test_start_up_logs_each_outputs_absolute_path(
    start_server: Callable[..., RunningServer],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    serving = tmp_path / "serving"
    serving.mkdir()
    monkeypatch.chdir(serving)
    with caplog.at_level(logging.INFO, "toolwatch"):
        server = start_server(ROOT / "examples" / "toolwatch.yaml", output__findings="f.jsonl")
    said = [m for m in caplog.messages if m.startswith("outputs ")]
    dump = tmp_path / "tooltraces.jsonl"  # the fixture's, absolute
    assert said == [f"outputs findings={serving / 'f.jsonl'} dump_tooltraces={dump}"]
    assert server.app.outputs_written()
    assert (serving / "f.jsonl").exists()


def test_standard_output_and_an_output_that_is_off_are_named_so(
    start_server: Callable[..., RunningServer], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "toolwatch"):
        start_server(output__findings="-", output__dump_tooltraces=None)
    assert [m for m in caplog.messages if m.startswith("outputs ")] == [
        "outputs findings=stdout dump_tooltraces=off"
    ]
