"""The files ``serve`` writes: the findings log (``output.findings``) and the ToolTrace dump
(``output.dump_tooltraces``), each a file or standard output (``-``), or a descriptor a path
names (``/dev/stderr``: the journal's socket under systemd, written through a copy).

Each is a ``LineFile`` (whole lines or none: a full disk tears no line) written by a thread of
its own (``BackgroundOutput``): an output that blocks (a stalled log driver on standard output,
a hung network mount) loses lines, counted in ``toolwatch_output_failures_total``, instead of
stopping the event loop with it. A SIGHUP opens again a file a log rotation renamed away, or
a FIFO its reader made again (``Outputs.reopen``), as each file's thread does by itself at
most a second later (``_Look``); ``close`` writes what is queued, for a bounded time, at
shutdown. No file is waited for (``toolwatch.output_files`` opens them): a FIFO no reader
has opened yet is not opened (at start-up its output starts without a file, its lines lost,
counted, until a reader comes).

Threading: everything here is called from the event loop, but ``_Look``, which each file's
own thread runs.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import select
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass

from toolwatch.config import OutputSettings
from toolwatch.engine import DiscardToolTraces, ToolTraceSink
from toolwatch.model import Clock
from toolwatch.output_files import NoReaderError, OutputError, Unopened, open_text, open_there
from toolwatch.sinks.background import BackgroundOutput
from toolwatch.sinks.findings import FanOutSink, FindingSink, JsonLinesFindingSink, Redaction
from toolwatch.sinks.linefile import LineFile, TextOutput, WriteFailures
from toolwatch.sinks.tooltraces import ToolTraceWriter

__all__ = ["OutputError", "Outputs", "open_outputs", "open_text", "output_paths"]

log = logging.getLogger(__name__)


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
        removed; a FIFO its reader made again), so that rotation by renaming needs no
        ``copytruncate``, and a collector's restart no restart of ``serve``. Each output's
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


def output_paths(output: OutputSettings) -> dict[str, str]:
    """Where each output goes, for the start-up log: ``stdout`` for ``-``, ``off`` when unset,
    else the absolute path it is opened at. A relative ``output.findings`` or
    ``output.dump_tooltraces`` is opened in ``serve``'s working directory, wherever it was
    given (unlike ``golden.cases_file`` and the security files, which a configuration file
    gives relative to itself): the log line says which file that is."""
    return {
        "findings": _where(output.findings),
        "dump_tooltraces": _where(output.dump_tooltraces),
    }


def _where(target: str | None) -> str:
    if target is None:
        return "off"
    return "stdout" if target == "-" else os.path.abspath(target)


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
    (``background_thread.FOLLOW_SECONDS``). Raises ``OutputError``, having closed what it opened."""
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
    """``target`` opened for ``kind``, and its thread. A FIFO no reader has opened yet (a
    collector started after ``serve``) does not hold the start-up: the output starts with no
    file (``Unopened``), its lines lost, counted, until its thread's look opens the FIFO
    once a reader has; one warning says so. Raises ``OutputError`` for anything else."""
    failures = WriteFailures(kind.what, lambda: failed(kind.label), log)
    if target == "-":
        standard = open_text(kind.setting, target, kind.private)
        return _File(kind, BackgroundOutput(standard, failures, clock=clock), None)
    unread: NoReaderError | None = None
    stream: TextOutput
    try:
        stream = open_text(kind.setting, target, kind.private)
    except OutputError as exc:
        if not isinstance(exc.__cause__, NoReaderError):
            raise
        unread = exc.__cause__
        stream = Unopened(target, unread)
        log.warning(
            "%s: %s is a FIFO, and no reader has opened it yet: its lines are lost, counted,"
            " until one does",
            kind.setting,
            target,
        )
    look = _Look(kind, target, told=unread is not None)
    follow = functools.partial(look, why=_Why.FOLLOW)
    output = BackgroundOutput(stream, failures, follow=follow, clock=clock, unopened=unread)
    return _File(kind, output, look)


class _Why(enum.Enum):
    """Why an output's thread looks at its path (``_Look``): a path that cannot be opened is
    told at each SIGHUP (the signal is answered), and once an outage at the thread's own look."""

    SIGHUP = enum.auto()  # ``Outputs.reopen``: logrotate's postrotate, a reload
    FOLLOW = enum.auto()  # its own look, ``background_thread.FOLLOW_SECONDS`` apart


class _Look:
    """Whether ``path`` still names the file an output writes, for its thread
    (``background_thread.Look``), at a SIGHUP or at its own follow (``_Why``): both look alike.

    The path is opened again when it names another file than the one written (told apart by
    device and inode), or nothing: a file removed or renamed away (a rotation, a cleanup that
    deleted the log), a FIFO its reader removed and made again (a collector's restart), a
    regular file put at a FIFO's path. What is there is opened without waiting for a reader
    (``O_NONBLOCK``: a FIFO no reader has opened yet is not opened, and looked at again at
    the next look), then written blocking, as a FIFO opened at start-up is. A path is
    created only for a regular file: a FIFO or a device written is its reader's, who makes it
    again; a regular file there would be read by no one, and fail the reader's ``mkfifo``.

    Where the path cannot be opened (its directory removed, a FIFO without a reader yet), a
    file renamed away goes on being written, and one removed loses its lines, counted,
    rather than fill a file no one can read: the look returns why. A FIFO written goes on
    (without a reader, its lines are lost, counted: EPIPE).

    An output that has no file yet (``Unopened``: start-up found a FIFO no reader had
    opened) has what is at its path opened once it can be, never created; its lines are
    lost, counted, until then.

    Logged: each path opened again, with what became of the file written; a path that
    cannot be opened, at each SIGHUP (the signal is answered) and once an outage at the
    thread's own look (every second), until the path names a file written again."""

    def __init__(self, kind: _Kind, path: str, *, told: bool = False) -> None:
        """``told``: the path could not be opened, and the log said so (start-up's warning
        of a FIFO no reader had opened)."""
        self._kind = kind
        self._path = path
        self._failing = told  # the path cannot be opened: told, until it names the file again

    def __call__(self, stream: TextOutput, why: _Why) -> TextOutput | OSError | None:
        """The file opened again at the path; ``None`` to go on with ``stream``; or why its
        lines are lost (removed, and the path cannot be opened; none opened yet)."""
        if isinstance(stream, Unopened):
            return self._first(why)
        try:
            written = _status(stream)
        except OSError:
            return None  # what it writes cannot be told: it goes on
        there = _status_at(self._path)
        if written is not None and there is not None and _same(written, there):
            self._failing = False
            return None
        own = _own_path(written)
        if there is None and not own:
            return None  # a FIFO, a device: its reader makes it again; nothing is created
        try:
            opened = self._open(own, there)
        except OutputError as exc:
            return self._not_opened(exc, stream, written, why)
        self._failing = False
        log.info(
            "%s: %s opened again (%s)", self._kind.setting, self._path, _became(written, there)
        )
        return opened

    def _first(self, why: _Why) -> TextOutput | OSError:
        """For an output with no file yet (``Unopened``): what the path holds, opened
        without waiting for a reader and never created (``open_there``: a FIFO's path is its
        reader's), or why it cannot be (its lines stay lost, counted). Told at each SIGHUP,
        and once an outage at the thread's own look (start-up's warning told the first)."""
        kind, path = self._kind, self._path
        try:
            opened = open_there(kind.setting, path, kind.private)
        except OutputError as exc:
            if why is _Why.SIGHUP or not self._failing:
                log.error("%s; no file is written yet: its lines are lost, counted", exc)
            self._failing = True
            cause = exc.__cause__
            return cause if isinstance(cause, OSError) else OSError(str(exc))
        self._failing = False
        log.info("%s: %s opened (%s)", kind.setting, path, _found(os.fstat(opened.fileno())))
        return opened

    def _open(self, own: bool, there: os.stat_result | None) -> LineFile:
        """The path opened: as at start-up (``open_text``, created when missing) when it is
        the output's to create (``own``) and a regular file or nothing is ``there``; else
        only what is there (``open_there``). Neither waits for a reader: a FIFO put at the path
        since ``there`` was looked at is opened only if it has one."""
        kind, path = self._kind, self._path
        if own and (there is None or stat.S_ISREG(there.st_mode)):
            return open_text(kind.setting, path, kind.private)
        return open_there(kind.setting, path, kind.private)

    def _not_opened(
        self, exc: OutputError, stream: TextOutput, written: os.stat_result | None, why: _Why
    ) -> OSError | None:
        """Why ``stream``'s lines are lost when it was a regular file and was removed, else
        ``None`` (it goes on)."""
        removed = _removed(stream)
        if why is _Why.SIGHUP or not self._failing:
            log.error("%s; %s", exc, _going_on(stream, written, removed))
        self._failing = True
        if not (removed and _own_path(written)):
            return None
        cause = exc.__cause__
        return cause if isinstance(cause, OSError) else OSError(str(exc))


def _status(stream: TextOutput) -> os.stat_result | None:
    """What ``stream`` writes; ``None`` once closed (``BackgroundOutput`` closes a regular
    file removed whose path could not be opened: its lines are lost). Raises ``OSError``
    as ``fstat`` does."""
    try:
        fd = stream.fileno()
    except ValueError:
        return None
    return os.fstat(fd)


def _status_at(path: str) -> os.stat_result | None:
    """What ``path`` names; ``None`` when nothing (or it cannot be looked at: opening it
    says why)."""
    try:
        return os.stat(path)
    except OSError:
        return None


def _same(one: os.stat_result, other: os.stat_result) -> bool:
    return (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)


def _own_path(written: os.stat_result | None) -> bool:
    """Whether the path of what is ``written`` is the output's to create: a regular file's
    (or a closed one's, which was one), not a FIFO's or a device's."""
    return written is None or stat.S_ISREG(written.st_mode)


def _removed(stream: TextOutput) -> bool:
    """Whether the file ``stream`` writes has no name left (removed, its directory too), or
    is closed already (so removed: ``BackgroundOutput`` closes such a file)."""
    try:
        return os.fstat(stream.fileno()).st_nlink == 0
    except ValueError:
        return True
    except OSError:
        return False


def _what(status: os.stat_result) -> str:
    """The kind of file ``status`` says, for messages."""
    if stat.S_ISFIFO(status.st_mode):
        return "FIFO"
    if stat.S_ISCHR(status.st_mode) or stat.S_ISBLK(status.st_mode):
        return "device"
    if stat.S_ISSOCK(status.st_mode):
        return "socket"
    return "file"


def _became(written: os.stat_result | None, there: os.stat_result | None) -> str:
    """What became of the file ``written`` (``None``: closed, its lines lost), now that the
    path, which names ``there`` (``None``: created), is opened again."""
    if written is None:
        what = "file"
        was = "the file written was removed, and the path could not be opened until now"
    else:
        what = _what(written)
        if what == "socket" and there is not None:  # a copy of a descriptor: never renamed
            return _pointed_elsewhere(there)
        again = there is not None and stat.S_ISFIFO(there.st_mode)
        if what == "FIFO" and again and not written.st_nlink:
            return "its reader made the FIFO there again"
        was = f"the {what} there was {'renamed away' if written.st_nlink else 'removed'}"
    if there is None or _what(there) == what:
        return was
    return f"{was}; {_kind_phrase(there)} is there now"


def _pointed_elsewhere(there: os.stat_result) -> str:
    """What became of a socket written through a copy of the descriptor its path led to
    (``output_files``): nothing renames or removes it; the path, a link, leads elsewhere."""
    now = "another socket" if stat.S_ISSOCK(there.st_mode) else _kind_phrase(there)
    return f"the path names {now} now, not the socket written"


def _kind_phrase(status: os.stat_result) -> str:
    """The kind of file ``status`` says, with its article: ``a regular file``, ``a FIFO``."""
    return "a regular file" if stat.S_ISREG(status.st_mode) else f"a {_what(status)}"


def _found(there: os.stat_result) -> str:
    """What an output with no file yet (``_Look._first``) found opened at its path."""
    if stat.S_ISFIFO(there.st_mode):
        return "a reader has opened the FIFO"
    return f"{_kind_phrase(there)} is there now"


def _going_on(stream: TextOutput, written: os.stat_result | None, removed: bool) -> str:
    """What becomes of the lines when the path cannot be opened (``_Look._not_opened``): a
    FIFO written goes on, read by whoever still holds it (``_read``), else lost, counted
    (EPIPE); a device goes on; a regular file removed loses its lines."""
    if written is not None and not _own_path(written):
        what = _what(written)
        if what == "socket":  # a copy of a descriptor: it was neither renamed nor removed
            return "still writing to the socket it was"
        became = "removed" if removed else "renamed away"
        was = f"still writing to the {what} it was, which was {became}"
        if what != "FIFO":
            return was
        if _read(stream):
            return f"{was}: its lines go to the reader that still holds it"
        return f"{was}: its lines are lost, counted, while no one reads it"
    if removed:
        return "the file written was removed: its lines will be lost, counted"
    return "still writing to the file it was"


def _read(stream: TextOutput) -> bool:
    """Whether a reader holds the pipe ``stream`` writes: its write end polls ``POLLERR``
    when none does (asked without waiting). Polled, not judged from the FIFO's name: one
    removed may still be read by the process that had it open."""
    poller = select.poll()
    poller.register(stream.fileno(), 0)  # POLLERR is told whatever is asked
    return not any(events & select.POLLERR for _, events in poller.poll(0))
