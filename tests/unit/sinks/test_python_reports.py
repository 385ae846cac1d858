"""What Python reports itself while ``serve`` runs (``toolwatch.sinks.python_reports``): a
warning, an exception that ends a thread, an exception raised in ``__del__``. Each comes out as
one log record of the log thread (``queued_logging``), in the handler's format, where Python's
defaults wrote ``sys.stderr`` from the thread that reported, a traceback a line at a time,
past the lock the outputs take on a shared standard error.

Each test configures the root logger as ``toolwatch.cli.main`` does (a plain
``StreamHandler``), on a file instead of standard error, and reads the file once
``queued_logging``'s exit has waited for the log thread."""

from __future__ import annotations

import io
import logging
import re
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolwatch.sinks.logqueue import queued_logging
from toolwatch.sinks.python_reports import logged_python_reports

_FORMAT = "%(levelname)s %(name)s: %(message)s"  # the CLI's, less the time


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[Path]:
    """The root logger's one handler: a ``StreamHandler`` on this file; put back afterwards."""
    path = tmp_path / "stderr.log"
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    for handler in saved:
        root.removeHandler(handler)
    root.setLevel(logging.INFO)
    with path.open("w") as stream:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter(_FORMAT))
        root.addHandler(handler)
        try:
            yield path
        finally:
            root.removeHandler(handler)
            for handler in saved:
                root.addHandler(handler)
            root.setLevel(level)


def _traceback_of(lines: list[str]) -> tuple[str, list[str], str]:
    """A record's traceback, told apart: its first line, the frame lines (each indented:
    none is a line of something else), the exception's line."""
    return lines[0], [line for line in lines[1:-1] if not line.startswith("  ")], lines[-1]


def test_a_warning_is_one_log_record_line(log_file: Path) -> None:
    """Was: ``agent.py:12: UserWarning: ...`` and the source line under it, written to
    ``sys.stderr`` by the thread that warned. Now: one WARNING record of ``py.warnings``."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with queued_logging(), logged_python_reports():
            warnings.warn_explicit("the collector's TLS key is weak", UserWarning, "agent.py", 12)
    assert log_file.read_text() == (
        "WARNING py.warnings: agent.py:12: UserWarning: the collector's TLS key is weak\n"
    )


def test_a_warning_shown_to_a_file_of_the_callers_goes_there() -> None:
    """``warnings.showwarning(..., file=f)`` (a library printing its own report): written to
    ``f`` as the default writes it, not logged."""
    shown = io.StringIO()
    with logged_python_reports():
        warnings.showwarning("deprecated key", DeprecationWarning, "agent.py", 3, shown, "x = 1")
    assert shown.getvalue() == "agent.py:3: DeprecationWarning: deprecated key\n  x = 1\n"


def _raise_in_thread(error: BaseException, name: str) -> None:
    def fail() -> None:
        raise error

    thread = threading.Thread(target=fail, name=name)
    thread.start()
    thread.join()  # after the thread's excepthook has run


def test_an_exception_that_ends_a_thread_is_one_error_record_with_its_traceback(
    log_file: Path,
) -> None:
    """Was: "Exception in thread exporter:" and the traceback, a line at a time to
    ``sys.stderr``. Now: one ERROR record of ``py.threading``, the traceback in it."""
    with queued_logging(), logged_python_reports():
        _raise_in_thread(ValueError("no route to the collector"), "exporter")
    lines = log_file.read_text().splitlines()
    assert lines[0] == "ERROR py.threading: Exception in thread exporter"
    assert _traceback_of(lines[1:]) == (
        "Traceback (most recent call last):",
        [],
        "ValueError: no route to the collector",
    )
    assert "raise error" in lines[-2], lines  # the frame that raised, last


def test_system_exit_ends_a_thread_quietly_as_without_the_hook(log_file: Path) -> None:
    with queued_logging(), logged_python_reports():
        _raise_in_thread(SystemExit(3), "worker")
    assert log_file.read_text() == ""


def test_a_thread_report_without_an_exception_value_names_its_type(log_file: Path) -> None:
    """``threading.ExceptHookArgs`` allows ``exc_value=None``: the type is said, not a
    "NoneType: None" traceback (what ``exc_info`` would print)."""
    with queued_logging(), logged_python_reports():
        threading.excepthook(threading.ExceptHookArgs([TimeoutError, None, None, None]))
    assert log_file.read_text() == (
        f"ERROR py.threading: Exception in thread {threading.get_ident()}: TimeoutError\n"
    )


class _Unflushed:
    """An object whose finalizer raises: Python cannot raise that to anyone."""

    def __del__(self) -> None:
        raise OSError("flush of the spool file failed")


def test_an_exception_raised_in_del_is_one_error_record_with_its_traceback(
    log_file: Path,
) -> None:
    """Was: "Exception ignored in: <function ...>" and the traceback, a line at a time to
    ``sys.stderr``. Now: one ERROR record of ``py.unraisable``."""
    with queued_logging(), logged_python_reports():
        _Unflushed()  # finalized at once
    lines = log_file.read_text().splitlines()
    assert re.fullmatch(
        r"ERROR py\.unraisable: Exception ignored in: "
        r"<function _Unflushed\.__del__ at 0x[0-9a-f]+>",
        lines[0],
    ), lines[0]
    assert _traceback_of(lines[1:]) == (
        "Traceback (most recent call last):",
        [],
        "OSError: flush of the spool file failed",
    )


def test_the_hooks_found_are_put_back() -> None:
    """On leaving (``serve`` returned), Python's hooks, or whoever's were there, report
    again; a test runner's among them (pytest's own are in place here)."""
    found = (warnings.showwarning, threading.excepthook, sys.unraisablehook)
    with logged_python_reports():
        inside = (warnings.showwarning, threading.excepthook, sys.unraisablehook)
    assert [a is b for a, b in zip(inside, found, strict=True)] == [False, False, False]
    after = (warnings.showwarning, threading.excepthook, sys.unraisablehook)
    assert [a is b for a, b in zip(after, found, strict=True)] == [True, True, True]
