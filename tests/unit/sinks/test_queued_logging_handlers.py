"""Second review of af9fc02 (``queued_logging``): the log thread now writes a record straight to
the descriptor of any ``logging.StreamHandler`` whose stream has one (``_hand_to`` /
``_descriptor`` / ``_write_record``), instead of calling ``handler.handle``. That bypasses the
handler's own ``emit``, and ``_descriptor`` assumes every stream has ``fileno``.

These handlers are the ones users embedding ``serve`` (or running its tests with pytest's live
logging) configure on the root logger; each test installs one, runs records through
``queued_logging`` (whose exit waits for the log thread), and checks what the handler would
have done without it.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolwatch.sinks.logqueue import queued_logging

_log = logging.getLogger("toolwatch.review")


@pytest.fixture
def root_handler() -> Iterator[list[logging.Handler]]:
    """The root logger with only the handlers the test installs; put back afterwards."""
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    for handler in saved:
        root.removeHandler(handler)
    root.setLevel(logging.INFO)
    installed: list[logging.Handler] = []
    yield installed
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in installed:
        handler.close()
    for handler in saved:
        root.addHandler(handler)
    root.setLevel(level)


def _install(installed: list[logging.Handler], handler: logging.Handler) -> None:
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger().addHandler(handler)
    installed.append(handler)


def test_a_rotating_file_handler_still_rotates_while_serve_runs(
    tmp_path: Path, root_handler: list[logging.Handler]
) -> None:
    """Scenario: root logs to a ``RotatingFileHandler`` (maxBytes=1000, 3 backups); serve logs
    100 records of ~50 bytes inside ``queued_logging``.
    Was: ``_descriptor`` finds the handler's fd (it is a StreamHandler subclass), the records
    are ``os.write``-n to it and ``RotatingFileHandler.emit`` (shouldRollover/doRollover)
    never runs: the log grows without bound (5 KB here; a disk filled in production), no
    backup is made.
    Now: rotate as the handler does outside serve (``toolwatch.log.1`` exists, the live
    file stays within maxBytes).
    Regression of af9fc02 (1eeaddc called ``handler.handle``)."""
    path = tmp_path / "toolwatch.log"
    _install(root_handler, logging.handlers.RotatingFileHandler(path, maxBytes=1000, backupCount=3))
    with queued_logging():
        for i in range(100):
            _log.warning("record %03d %s", i, "x" * 40)
    assert (tmp_path / "toolwatch.log.1").exists(), f"no rotation: {path.stat().st_size} bytes"
    assert path.stat().st_size <= 1000


def test_a_watched_file_handler_reopens_a_log_file_logrotate_moved(
    tmp_path: Path, root_handler: list[logging.Handler]
) -> None:
    """Scenario: root logs to a ``WatchedFileHandler`` (the stdlib's handler for logrotate);
    logrotate moves ``toolwatch.log`` to ``toolwatch.log.1``; serve then logs a record.
    Was: the record is written to the old descriptor (``WatchedFileHandler.emit``, which
    stats the path and reopens it, is bypassed): it lands in the rotated file, and
    ``toolwatch.log`` is never created again for as long as serve runs.
    Now: a new ``toolwatch.log`` holding the record.
    Regression of af9fc02."""
    path = tmp_path / "toolwatch.log"
    _install(root_handler, logging.handlers.WatchedFileHandler(path))
    os.rename(path, tmp_path / "toolwatch.log.1")  # logrotate (without copytruncate)
    with queued_logging():
        _log.warning("after rotation")
    assert path.exists(), "the record went to the rotated file"
    assert path.read_text() == "after rotation\n"


class _Sink:
    """A stream as ``logging.StreamHandler`` documents it: ``write`` and ``flush``, no
    ``fileno`` (a GUI or network writer; pytest's live-logging handler, whose stream is its
    ``TerminalReporter``)."""

    def __init__(self) -> None:
        self.text: list[str] = []

    def write(self, text: str) -> None:
        self.text.append(text)

    def flush(self) -> None:
        pass


def test_a_stream_without_fileno_does_not_end_the_log_thread(
    root_handler: list[logging.Handler],
) -> None:
    """Scenario: root logs through a ``StreamHandler`` whose stream has only ``write`` and
    ``flush`` (all ``StreamHandler`` requires; e.g. ``pytest -o log_cli=true``, whose
    ``_LiveLoggingStreamHandler`` streams to the ``TerminalReporter``); serve logs two records.
    Was: ``_descriptor`` calls ``stream.fileno()``, which raises ``AttributeError`` (only
    OSError/ValueError are caught): the exception ends the ``toolwatch-log`` thread at the
    first record, and every record of the run is lost, uncounted, silently (the queue
    fills, then ``_BoundedQueueHandler`` counts losses nobody reports).
    Now: no fd -> ``handler.handle(record)``: both records written.
    Regression of af9fc02."""
    sink = _Sink()
    _install(root_handler, logging.StreamHandler(sink))
    with queued_logging():
        _log.warning("one")
        _log.warning("two")
    assert "".join(sink.text) == "one\ntwo\n"
