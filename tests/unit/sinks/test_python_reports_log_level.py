"""Was (review of 3489464) (``toolwatch.sinks.python_reports``, entered by ``serve`` inside
``queued_logging``): Python's reports become log records, so ``TOOLWATCH_LOG_LEVEL`` now
decides whether they are shown at all.

The root logger is configured as ``toolwatch.cli.main`` configures it (``basicConfig`` with
``TOOLWATCH_LOG_LEVEL``'s level), on a file instead of standard error, and the hooks are
entered as ``serve`` enters them: ``with queued_logging(), logged_python_reports()``. (Checked
by hand with a real ``toolwatch serve`` too: at ``TOOLWATCH_LOG_LEVEL=ERROR`` a warning made
in the process leaves no line; at ``CRITICAL`` a thread that raised leaves none.)"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from toolwatch.sinks.logqueue import queued_logging
from toolwatch.sinks.python_reports import logged_python_reports

_FORMAT = "%(levelname)s %(name)s: %(message)s"  # the CLI's, less the time


@pytest.fixture
def logging_at(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``logging_at(level)``: the root logger's one handler a ``StreamHandler`` on a file,
    the root's level ``level`` (``TOOLWATCH_LOG_LEVEL``, as ``basicConfig(level=...)`` sets
    it); the file. Put back afterwards."""
    root = logging.getLogger()
    saved, saved_level = list(root.handlers), root.level
    for handler in saved:
        root.removeHandler(handler)
    opened: list[logging.StreamHandler] = []  # type: ignore[type-arg]

    def configure(level: str) -> Path:
        path = tmp_path / "stderr.log"
        handler = logging.StreamHandler(path.open("w"))
        handler.setFormatter(logging.Formatter(_FORMAT))
        root.addHandler(handler)
        root.setLevel(level)
        opened.append(handler)
        return path

    try:
        yield configure
    finally:
        for handler in opened:
            root.removeHandler(handler)
            handler.stream.close()
        for handler in saved:
            root.addHandler(handler)
        root.setLevel(saved_level)


def test_warnings_are_still_the_filters_choice_at_log_level_error(
    logging_at: Callable[[str], Path],
) -> None:
    """What is wrong: ``logged_python_reports`` says "Which warnings are shown is still the
    warnings filters' choice (-W, PYTHONWARNINGS)", but a warning is now a WARNING record
    of ``py.warnings``, and ``TOOLWATCH_LOG_LEVEL=ERROR`` (a documented value, set to quiet
    toolwatch's INFO lines) drops it at the logger: with ``-W always`` no warning is shown
    at all, where before the change Python wrote it whatever the log level.
    Should: the filters decide (the record is handed on whatever the root's level), or the
    docstring and docs/commands.md's ``TOOLWATCH_LOG_LEVEL`` row say that ERROR and CRITICAL hide
    Python's warnings.
    Shown: root at ERROR as the CLI sets it, filter ``always``, one warning inside the
    hooks: the file is empty."""
    log_file = logging_at("ERROR")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with queued_logging(), logged_python_reports():
            warnings.warn_explicit("the collector's TLS key is weak", UserWarning, "agent.py", 12)
    assert log_file.read_text() == (
        "WARNING py.warnings: agent.py:12: UserWarning: the collector's TLS key is weak\n"
    )


def test_a_thread_that_died_is_still_told_at_log_level_critical(
    logging_at: Callable[[str], Path],
) -> None:
    """What is wrong: an exception that ended a thread is an ERROR record of
    ``py.threading``; with ``TOOLWATCH_LOG_LEVEL=CRITICAL`` (a documented value) the logger
    drops it, so a thread of toolwatch's or a library's that died leaves no trace at all.
    Python's default hook (before the change) wrote it whatever the log level.
    Should: the report is written (handed on past the root's level), or docs/commands.md says
    CRITICAL hides dead threads.
    Shown: root at CRITICAL as the CLI sets it, a thread that raises inside the hooks: the
    file is empty."""
    log_file = logging_at("CRITICAL")

    def fail() -> None:
        raise ValueError("no route to the collector")

    with queued_logging(), logged_python_reports():
        thread = threading.Thread(target=fail, name="exporter")
        thread.start()
        thread.join()  # after the thread's excepthook has run
    lines = log_file.read_text().splitlines()
    assert lines[:1] == ["ERROR py.threading: Exception in thread exporter"], lines
    assert lines[-1:] == ["ValueError: no route to the collector"], lines
