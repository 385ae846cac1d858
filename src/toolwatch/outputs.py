"""The files ``serve`` writes: the findings log (``output.findings``) and the ToolTrace dump
(``output.dump_tooltraces``), each a file or standard output (``-``).

Each is a ``LineFile`` (whole lines or none: a full disk tears no line) written by a thread of
its own (``BackgroundOutput``): an output that blocks (a stalled log driver on standard output,
a hung network mount) loses lines, counted in ``toolwatch_output_failures_total``, instead of
stopping the event loop with it. A SIGHUP opens again a file a log rotation renamed away
(``Outputs.reopen``); ``close`` writes what is queued, for a bounded time, at shutdown.

Threading: everything here is called from the event loop.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass

from toolwatch.config import OutputSettings, private_file_warning
from toolwatch.engine import DiscardToolTraces, ToolTraceSink
from toolwatch.model import Clock
from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.findings import FanOutSink, FindingSink, JsonLinesFindingSink, Redaction
from toolwatch.sinks.linefile import LineFile, TextOutput, WriteFailures
from toolwatch.sinks.tooltraces import ToolTraceWriter

__all__ = ["OutputError", "Outputs", "open_outputs", "open_text"]

log = logging.getLogger(__name__)


class OutputError(Exception):
    """An output file cannot be opened; the message names the setting and the reason."""


@dataclass(frozen=True, slots=True)
class _Kind:
    setting: str
    what: str  # in messages
    label: str  # of toolwatch_output_failures_total (``OUTPUTS``)
    private: bool  # created 0600: it holds argument values unredacted


_FINDINGS_LOG = _Kind("output.findings", "the findings log", "findings_log", private=False)
_DUMP = _Kind("output.dump_tooltraces", "the ToolTrace dump", "tooltraces", private=True)


@dataclass(frozen=True, slots=True)
class _File:
    kind: _Kind
    output: BackgroundOutput
    look: _Look | None  # at its path; none for standard output (``-``)


@dataclass(frozen=True, slots=True)
class Outputs:
    """What ``open_outputs`` opened: the sinks the engine publishes to, and the files."""

    findings: FindingSink  # every sink: the findings log, the stream, those added in code
    tooltraces: ToolTraceSink
    log: JsonLinesFindingSink | None  # the findings log, when configured
    files: tuple[_File, ...]

    def reopen(self) -> None:
        """SIGHUP: the findings log and the ToolTrace dump opened again at their paths when
        the file there is no longer the one written (renamed away by a log rotation, or
        removed), so that rotation by renaming needs no ``copytruncate``. Each output's
        thread looks and opens (``BackgroundOutput.reopen``, ``_Look`` for a SIGHUP), once it
        has written what was queued before, which goes to the file it was for; the event
        loop waits on no file system. A path that cannot be opened keeps the file it was, or
        loses its lines, counted, when that was removed; logged either way."""
        for file in self.files:
            if file.look is not None:
                file.output.reopen(functools.partial(file.look, why=_Why.SIGHUP))

    def write_queued(self) -> None:
        """Each file's thread writes what is queued now (``BackgroundOutput.write_queued``)."""
        for file in self.files:
            file.output.write_queued()

    def written(self, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds in all for every file to have written what was
        queued (each told to write it at once, then waited for in turn); whether they have."""
        deadline = time.monotonic() + timeout
        for file in self.files:
            file.output.write_queued()
        done = [file.output.written(max(deadline - time.monotonic(), 0.0)) for file in self.files]
        return all(done)

    def close(self, timeout: float) -> None:
        """Writes what is queued, waiting up to ``timeout`` seconds for all the files, and
        closes them: what a blocked output still holds then is counted lost."""
        deadline = time.monotonic() + timeout
        for file in self.files:
            file.output.stop_taking()
        for file in self.files:  # each thread had the whole grace since stop_taking
            file.output.close(deadline - time.monotonic(), grace=timeout)


def open_outputs(
    output: OutputSettings,
    sinks: list[FindingSink],
    labels: list[str],
    redaction: Redaction,
    *,
    wall_clock: Clock,
    failed: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
) -> Outputs:
    """Opens the files ``output`` names; ``sinks`` (labelled ``labels``: ``OUTPUTS``) and the
    findings log among them get every finding. ``failed`` is told each write an output
    failed, by its label; ``clock`` (seconds) says when a file looks at its path again
    (``background.FOLLOW_SECONDS``). Raises ``OutputError``, having closed what it opened."""
    files: list[_File] = []
    log_sink = None
    tooltraces: ToolTraceSink = DiscardToolTraces()
    try:
        if output.findings is not None:
            findings = _background(_FINDINGS_LOG, output.findings, failed, clock)
            files.append(findings)
            log_sink = JsonLinesFindingSink(findings.output, redaction, wall_clock=wall_clock)
            sinks = [log_sink, *sinks]
            labels = [_FINDINGS_LOG.label, *labels]
        if output.dump_tooltraces is not None:
            dump = _background(_DUMP, output.dump_tooltraces, failed, clock)
            files.append(dump)
            tooltraces = ToolTraceWriter(dump.output)
    except OutputError:
        for opened in files:
            opened.output.close(0.0)
        raise
    fan_out = FanOutSink(sinks, failed=lambda i: failed(labels[i]))
    return Outputs(fan_out, tooltraces, log_sink, tuple(files))


def _background(
    kind: _Kind, target: str, failed: Callable[[str], None], clock: Callable[[], float]
) -> _File:
    stream = open_text(kind.setting, target, kind.private)
    failures = WriteFailures(kind.what, lambda: failed(kind.label), log)
    if target == "-":
        return _File(kind, BackgroundOutput(stream, failures, clock=clock), None)
    look = _Look(kind, target)
    follow = functools.partial(look, why=_Why.FOLLOW)
    return _File(kind, BackgroundOutput(stream, failures, follow=follow, clock=clock), look)


class _Why(enum.Enum):
    """Why an output's thread looks at its path (``_Look``); the value says, when the path is
    opened again, what became of the file there."""

    SIGHUP = "rotated away"  # ``Outputs.reopen``: logrotate's postrotate, a reload
    FOLLOW = "removed or renamed away"  # its own look, ``background.FOLLOW_SECONDS`` apart


class _Look:
    """Whether ``path`` still names the file an output writes, for its thread
    (``background.Look``), at a SIGHUP or at its own follow (``_Why``): both look alike.

    A file removed or renamed away (a rotation, a cleanup that deleted the log) is opened
    again at the path. Where the path cannot be opened (its directory removed), a file
    renamed away goes on being written, and one removed loses its lines, counted, rather
    than fill a file no one can read: the look returns why. An output that is not a regular
    file (a FIFO, a device) is its reader's: its path is not looked at, so that a FIFO its
    reader removed (to make it again) is not replaced by a regular file no one reads.

    Logged: each path opened again; a path that cannot be opened, at each SIGHUP (the
    signal is answered) and once an outage at the thread's own look (every second), until
    the path names a file written again."""

    def __init__(self, kind: _Kind, path: str) -> None:
        self._kind = kind
        self._path = path
        self._failing = False  # the path cannot be opened: told, until it names the file again

    def __call__(self, stream: TextOutput, why: _Why) -> TextOutput | OSError | None:
        """The file opened again at the path; ``None`` to go on with ``stream``; or why its
        lines are lost (removed, and the path cannot be opened)."""
        if not _regular(stream):
            return None  # a FIFO, a device: its reader's, not to be replaced by a file
        if not _rotated(self._path, stream):
            self._failing = False
            return None
        kind = self._kind
        try:
            opened = open_text(kind.setting, self._path, kind.private)
        except OutputError as exc:
            return self._not_opened(exc, stream, why)
        self._failing = False
        log.info("%s: %s opened again (the file there was %s)", kind.setting, self._path, why.value)
        return opened

    def _not_opened(self, exc: OutputError, stream: TextOutput, why: _Why) -> OSError | None:
        """Why ``stream``'s lines are lost when it was removed, else ``None`` (it goes on)."""
        removed = _removed(stream)
        if why is _Why.SIGHUP or not self._failing:
            if removed:
                log.error("%s; the file written was removed: its lines will be lost, counted", exc)
            else:
                log.error("%s; still writing to the file it was", exc)
        self._failing = True
        if not removed:
            return None
        cause = exc.__cause__
        return cause if isinstance(cause, OSError) else OSError(str(exc))


def _removed(stream: TextOutput) -> bool:
    """Whether the file ``stream`` writes has no name left (removed, its directory too), or
    is closed already (so removed: ``BackgroundOutput`` closes such a file)."""
    try:
        return os.fstat(stream.fileno()).st_nlink == 0
    except ValueError:
        return True
    except OSError:
        return False


def _regular(stream: TextOutput) -> bool:
    """Whether ``stream`` writes a regular file (or did: a closed one was)."""
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except ValueError:
        return True
    except OSError:
        return False


def open_text(setting: str, target: str, private: bool = False) -> LineFile:
    """``target`` opened to append lines (``-``: stdout), each written whole or not at all
    (``LineFile``: a full disk tears none); created with mode 0600 when ``private``, else as
    the umask says. An existing file keeps its mode: a private one that others may read is
    warned about. Raises ``OutputError`` naming ``setting``."""
    try:
        if target == "-":
            stream = LineFile.standard_output()
        else:
            stream = LineFile(target, 0o600 if private else 0o666)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise OutputError(f"cannot open {target} ({setting}): {reason}") from exc
    if not private or target == "-":
        return stream
    warning = private_file_warning(target, setting, os.fstat(stream.fileno()))
    if warning is not None:
        log.warning("%s", warning)
    return stream


def _rotated(path: str, output: TextOutput) -> bool:
    """Whether ``path`` no longer names the file ``output`` writes: it is gone (or cannot be
    looked at: opening it says why), or another regular file is there. Not when something
    else is (a FIFO whose reader is not back yet would block the open)."""
    try:
        there = os.stat(path)
    except OSError:
        return True
    if not stat.S_ISREG(there.st_mode):
        return False
    written = None
    with contextlib.suppress(OSError, ValueError):  # closed
        written = os.fstat(output.fileno())
    if written is None:
        return True
    return (there.st_dev, there.st_ino) != (written.st_dev, written.st_ino)
