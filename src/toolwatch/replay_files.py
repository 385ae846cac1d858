"""``toolwatch replay``'s recorded files: their records, one JSON object at a time.

A file holds OTLP/JSON requests or ToolTrace lines, a record per line, or is one
(pretty-printed) JSON document; gzip-compressed or not; ``STDIN`` names standard input.
Records come with where they are (``file:line``) for every message that names one, and a
file that cannot be read raises ``ReplayInputError`` naming the file, the line and the
reason (OTLP protobuf told as that). The OTLP/JSON requests of the other signals (logs,
metrics, profiles) are counted and skipped (``OtherSignals``). With ``--stream``, several
files are merged in recorded time (``in_time_order``). ``Progress`` draws the bar on a
terminal.

Memory: a file is read a line at a time, except one that is a single JSON document, read
whole; merged files are opened once the merge reaches their time.
"""

from __future__ import annotations

import gzip
import heapq
import io
import json
import os
import stat
import sys
import zlib
from collections import deque
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median_low
from typing import IO, Any, Final

from toolwatch import jsontext
from toolwatch.ingest.decode_requests import looks_like_otlp_protobuf
from toolwatch.ingest.otlp_json import latest_end_ns, read_integer
from toolwatch.model_traces import ToolTrace
from toolwatch.sinks.tooltraces import tooltrace_from_dict

__all__ = [
    "CLOCK_RECORDS",
    "STDIN",
    "OtherSignals",
    "Progress",
    "ReplayInputError",
    "file_records",
    "in_time_order",
    "is_otlp",
    "tooltrace_line",
]


#: The path that names standard input.
STDIN: Final = Path("-")


class ReplayInputError(ValueError):
    """A recorded file that cannot be read; names the file, the line and the reason."""


#: With ``--stream``, replay's clock is the median of the latest end times of this many
#: recent records (until that many were read, the first record's): a host whose clock runs
#: hours ahead, or one absurd end time, moves it only when it sent most of them.
CLOCK_RECORDS: Final = 63


def is_otlp(record: dict[str, Any]) -> bool:
    return "resourceSpans" in record or "resource_spans" in record


#: The top-level keys of the OTLP/JSON requests of the other signals, and their names.
_OTHER_SIGNALS: Final = {
    "resourceLogs": "logs",
    "resource_logs": "logs",
    "resourceMetrics": "metrics",
    "resource_metrics": "metrics",
    "resourceProfiles": "profiles",
    "resource_profiles": "profiles",
}


class OtherSignals:
    """The OTLP/JSON lines of logs, metrics or profiles that replay leaves out, counted by
    signal: a Collector's ``file`` exporter listed in several pipelines writes them all to
    its file, a request per line, beside the traces."""

    def __init__(self) -> None:
        self.lines: dict[str, int] = {}
        self._first = ""

    def add(self, record: dict[str, Any], where: str) -> bool:
        """Whether ``record`` is another signal's request (then counted, and skipped)."""
        signal = next((name for key, name in _OTHER_SIGNALS.items() if key in record), None)
        if signal is None:
            return False
        self.lines[signal] = self.lines.get(signal, 0) + 1
        self._first = self._first or where
        return True

    def told(self) -> str:
        counts = ", ".join(f"{name}={n}" for name, n in sorted(self.lines.items()))
        return (
            f"{self._first}: skipped {sum(self.lines.values())} line(s) of OTLP logs, metrics"
            f" or profiles ({counts}), the first here: replay evaluates traces only"
        )


def in_time_order(
    paths: Sequence[Path], progress: Progress | None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The records of several files merged by recorded time, for ``--stream``: each file is
    read in its own order, one record ahead, and of the files' next records the one whose
    file is earliest in time goes first. So captures of the same hours by several
    Collectors, or files given out of order, reach the assembler as one capture in time
    order would. A file's place in time is the median of the latest end times of its last
    ``CLOCK_RECORDS`` records, as replay's clock is, so one batch from a host whose clock
    runs ahead does not hold the rest of its file back (unless it is the file's first).

    A file is opened once the merge reaches the time of its first record (read beforehand,
    then the file closed; standard input and pipes are read from the start): a rotated
    capture's files are open one or two at a time, however many there are."""
    waiting = deque(sorted((_first_time(path), index, path) for index, path in enumerate(paths)))
    if progress is not None:  # one line for them all, from the start
        progress.expect({str(path): path.stat().st_size for at, _, path in waiting if at >= 0})
    heads: list[tuple[int, int, str, dict[str, Any], Iterator[_Timed]]] = []

    def read_on(index: int, records: Iterator[_Timed]) -> None:
        head = next(records, None)
        if head is not None:
            at, where, record = head
            heapq.heappush(heads, (at, index, where, record, records))

    while waiting or heads:
        while waiting and (not heads or waiting[0][0] <= heads[0][0]):
            _, index, path = waiting.popleft()
            read_on(index, _timed(path, progress))
        if heads:
            _, index, where, record, records = heapq.heappop(heads)
            yield where, record
            read_on(index, records)


#: A record with its file's place in recorded time, and where it is.
_Timed = tuple[int, str, dict[str, Any]]


def _timed(path: Path, progress: Progress | None) -> Iterator[_Timed]:
    recent: deque[int] = deque(maxlen=CLOCK_RECORDS)
    at = 0
    for where, record in file_records(path, progress):
        latest = latest_end_ns(record) if is_otlp(record) else 0
        if latest > 0:
            recent.append(latest)
            at = max(at, median_low(recent))
        yield at, where, record


def _first_time(path: Path) -> int:
    """When the first record of ``path`` ends, read from its first line (0: it has none, or
    the file is one JSON document over many lines); -1 for standard input and the other
    files that are no regular file (a pipe, ``<(zcat ...)``): they cannot be read twice, and
    are opened at once."""
    if path == STDIN or not stat.S_ISREG(path.stat().st_mode):
        return -1
    with path.open("rb") as raw:
        for line in _Lines(str(path), raw):
            if line.strip():
                record, _ = _json_object(line)
                return latest_end_ns(record) if record is not None and is_otlp(record) else 0
    return 0


def tooltrace_line(record: dict[str, Any], where: str) -> ToolTrace:
    try:
        return tooltrace_from_dict(record)
    except ValueError as exc:
        raise ReplayInputError(f"{where}: not a ToolTrace line: {exc}") from None


class _Lines:
    """A file's lines as text, one at a time, gunzipped when it is gzip; each error names the
    file and line (``ReplayInputError``)."""

    def __init__(self, path: str, raw: io.BufferedReader) -> None:
        self.path = path
        self._raw = raw  # the file as stored: its position is the progress
        self._source: io.BufferedReader | gzip.GzipFile = raw
        if raw.peek(2)[:2] == b"\x1f\x8b":
            self._source = gzip.GzipFile(fileobj=raw)
        self.number = 0  # of the last line read
        self._offset = 0  # bytes (uncompressed) before the next line

    def __iter__(self) -> Iterator[str]:
        while True:
            try:
                data = self._source.readline()
            except (OSError, EOFError, zlib.error) as exc:
                raise ReplayInputError(f"{self.path}: not a readable gzip file: {exc}") from None
            if not data:
                return
            self.number += 1
            try:  # the first may open with a BOM, as the OTLP/JSON receiver accepts
                line = data.decode("utf-8-sig" if self.number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                where = f"{self.path}:{self.number}"
                at = self._offset + exc.start
                raise ReplayInputError(
                    f"{where}: not UTF-8 text (byte {at}: {exc.reason})"
                ) from None
            self._offset += len(data)
            yield line

    @property
    def position(self) -> int:
        """Bytes of the stored file read so far."""
        return self._raw.tell()


def file_records(
    path: Path, progress: Progress | None
) -> Generator[tuple[str, dict[str, Any]], None, None]:
    """The file's JSON objects, one per line, or the one object of a file that is a single
    (pretty-printed) JSON document, with where each is (``file:line``, or the file).
    ``STDIN`` reads standard input (named ``<stdin>``, without progress)."""
    if path == STDIN:
        stdin = getattr(sys.stdin, "buffer", None)  # None when closed; no buffer: text only
        if stdin is None:
            raise ReplayInputError("-: standard input is closed or not a byte stream")
        if not isinstance(stdin, io.BufferedReader):  # replaced, by an embedding application
            stdin = io.BufferedReader(io.BytesIO(stdin.read()))
        yield from _read_records("<stdin>", stdin, None)
        return
    with path.open("rb") as raw:
        regular = stat.S_ISREG(os.fstat(raw.fileno()).st_mode)  # a pipe has no size, no place
        yield from _read_records(str(path), raw, progress if regular else None)


def _read_records(
    path: str, raw: io.BufferedReader, progress: Progress | None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``_json_records``; a file whose first record is no JSON, and whose first bytes look
    like OTLP protobuf, is told as that."""
    protobuf = looks_like_otlp_protobuf(raw.peek(64)[:64])
    read = False
    try:
        for record in _json_records(path, raw, progress):
            read = True
            yield record
    except ReplayInputError:
        if protobuf and not read:
            raise ReplayInputError(
                f"{path}: looks like OTLP protobuf (an OTLP/HTTP protobuf body, or the"
                " Collector file exporter's `format: proto`): replay reads OTLP/JSON and"
                " ToolTrace lines; write the capture with the file exporter's `format: json`"
                " (its default)"
            ) from None
        raise


def _json_records(
    path: str, raw: io.BufferedReader, progress: Progress | None
) -> Iterator[tuple[str, dict[str, Any]]]:
    size = os.fstat(raw.fileno()).st_size if progress is not None else 0
    lines = _Lines(path, raw)
    rest = iter(lines)
    first = True
    for line in rest:
        if not line.strip():
            continue
        number = lines.number
        record, error = _json_object(line)
        ends_early = isinstance(error, json.JSONDecodeError) and error.pos >= len(line.rstrip())
        if first and ends_early:
            # The first line ends before its value does: one document over many lines.
            document, error = _json_object("".join([line, *rest]))
            if document is not None:
                yield path, document
                if progress is not None:
                    progress.done(path)
                return
            if isinstance(error, json.JSONDecodeError):
                number += error.lineno - 1
        if record is None:
            raise ReplayInputError(f"{path}:{number}: {_problem(error)}")
        first = False
        yield f"{path}:{number}", record
        if progress is not None:
            progress.update(path, lines.position, size)
    if progress is not None:
        progress.done(path)


def _json_object(text: str) -> tuple[dict[str, Any] | None, ValueError | None]:
    """``text`` parsed as one JSON object, or why it is not one; ``NaN``, ``Infinity`` and a
    number beyond the float range kept as their text, as the server keeps them
    (``jsontext.loads``): a dump line holding one is no JSON the report could write."""
    try:
        try:
            value = jsontext.loads(text)
        except ValueError as exc:
            if isinstance(exc, json.JSONDecodeError):
                raise
            # int() of a literal too long: read as the server reads it (``read_integer``)
            value = jsontext.loads_mended(text, read_integer)
    except json.JSONDecodeError as exc:
        return None, exc
    except RecursionError:
        return None, ValueError("not usable JSON: nested too deeply")
    if not isinstance(value, dict):
        return None, ValueError("expected a JSON object per line")
    return value, None


def _problem(error: ValueError | None) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"not JSON: {error.msg} (column {error.colno})"
    return str(error)


@dataclass
class Progress:
    """A one-line progress bar on a terminal; silent otherwise. Files read one after
    another get a line each; files read together (``--stream`` merging them) share one."""

    stream: IO[str]
    enabled: bool
    _last: int = -1
    _files: dict[str, tuple[int, int]] = field(default_factory=dict)  # done, total bytes
    _ended: set[str] = field(default_factory=set)

    def expect(self, sizes: dict[str, int]) -> None:
        """Files to be read together (and their sizes): one line covers them all."""
        for path, size in sizes.items():
            self._files.setdefault(path, (0, size))

    def update(self, path: str, done: int, total: int) -> None:
        """``done`` of ``total`` bytes of ``path`` read."""
        self._files[path] = (done, total)
        done, total = (sum(sizes) for sizes in zip(*self._files.values(), strict=True))
        percent = done * 100 // max(total, 1)
        if not self.enabled or total < 1_000_000 or percent == self._last:
            return
        self._last = percent
        bar = "#" * (percent // 4)
        name = os.path.basename(path) if len(self._files) == 1 else f"{len(self._files)} files"
        self.stream.write(f"\r{name}: [{bar:<25}] {percent:3d}%")
        self.stream.flush()

    def done(self, path: str) -> None:
        """``path`` is read to its end; the line ends with the last file read with it."""
        self._ended.add(path)
        if path in self._files:  # read whole, as a one-document file is
            total = self._files[path][1]
            self._files[path] = (total, total)
        if not self._ended.issuperset(self._files):
            return
        if self.enabled and self._last >= 0:
            self.stream.write("\n")
        self._last = -1
        self._files.clear()
        self._ended.clear()
