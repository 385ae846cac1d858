"""``toolwatch replay``: evaluate recorded traces offline, report, and gate.

Inputs, detected per line (or per file when the file is one JSON document):

- OTLP/JSON ``ExportTraceServiceRequest`` objects, as the Collector's file exporter writes
  them (one per line); their spans are assembled exactly as the server assembles them;
- ToolTrace lines, as ``toolwatch serve --dump-tooltraces`` writes them.

Files may be gzip-compressed (a rotated Collector export). Spans the server would reject (an
all-zero id, say) are left out as there, each named on stderr with its file and line.

Memory: every span of the input is held until the input ends (recorded spans carry no arrival
time to complete a trace by), about three times the size of the OTLP/JSON input; split a
large export into files that each hold whole traces and replay them one at a time.

Every ToolTrace goes through the same evaluation pipeline as in ``serve`` (policy, golden
cases matched by attribute, shadow pairs joined by pair key — offline, with no timeout).
Gates (``--min-score``, ``--max-findings``) make the command exit 1 when they fail.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from toolwatch.assembly.buffer import AssemblyLimits, TraceBuffer
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.config import Config
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.ingest.decode import DecodeError, decode_request
from toolwatch.ingest.otlp_json import parse_otlp_json
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock, ReferenceKind, ToolTrace
from toolwatch.references.golden import GoldenCaseSet, load_golden_cases
from toolwatch.replay_report import Gate, Report, ReportBuilder, parse_gate
from toolwatch.sinks.findings import tooltrace_from_dict

__all__ = ["ReplayInputError", "add_arguments", "load_tool_traces", "run_replay"]

EXIT_OK, EXIT_GATE, EXIT_USAGE = 0, 1, 2


class ReplayInputError(ValueError):
    """A recorded file that cannot be read; names the file, the line and the reason."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, help="OTLP/JSON or ToolTrace JSON lines")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument(
        "--min-score",
        action="append",
        default=[],
        metavar="EVALUATOR[.SCORE]=MIN",
        help="fail when the mean score is lower, e.g. composite=0.9, composite.step_efficiency=0.8",
    )
    parser.add_argument(
        "--max-findings",
        action="append",
        default=[],
        metavar="CATEGORY=MAX",
        help="fail when there are more findings, e.g. DANGEROUS_ACTION_DRIFT=0 or any=10",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def run_replay(args: argparse.Namespace, config: Config) -> int:
    """The ``replay`` command. Returns the exit code."""
    try:
        gates = [parse_gate(text, "min") for text in args.min_score]
        gates += [parse_gate(text, "max") for text in args.max_findings]
    except ValueError as exc:
        print(f"toolwatch replay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    progress = _Progress(sys.stderr, enabled=not args.no_progress and sys.stderr.isatty())
    try:
        traces = list(load_tool_traces(args.files, config, progress, _warn))
    except (ReplayInputError, OSError) as exc:
        print(f"toolwatch replay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    report = evaluate_offline(traces, config, gates)
    out = report.to_json() if args.format == "json" else report.to_text()
    print(out)
    return EXIT_OK if report.passed else EXIT_GATE


def _warn(message: str) -> None:
    print(f"toolwatch replay: {message}", file=sys.stderr)


def evaluate_offline(traces: Sequence[ToolTrace], config: Config, gates: Sequence[Gate]) -> Report:
    """Evaluate ``traces`` as ``serve`` would and build the report."""
    settings = EvaluationSettings(policy=config.policy, evaluators=config.evaluators)
    pipeline = EvaluationPipeline(settings)
    golden = _golden(config)
    builder = ReportBuilder(settings, gates)
    for trace in traces:
        # As in serve: an incomplete run is judged against the policy only.
        case = golden.match(trace) if golden is not None and trace.complete else None
        builder.add(trace, case, pipeline.evaluate(trace, case, None))
    for source, target in _shadow_pairs(traces, config):
        result = pipeline.evaluate(target, None, source, policy=False)
        builder.add_pair(target, result, ReferenceKind.SOURCE)
    return builder.build()


def _golden(config: Config) -> GoldenCaseSet | None:
    cases = config.golden.cases_file
    if cases is None:
        return None
    return load_golden_cases(
        cases,
        normalize=config.policy.normalizer(),
        case_id_attribute=config.golden.case_id_attribute,
    )


def _shadow_pairs(
    traces: Sequence[ToolTrace], config: Config
) -> Iterator[tuple[ToolTrace, ToolTrace]]:
    shadow = config.shadow
    if not shadow.enabled:
        return
    halves: dict[str, dict[str, ToolTrace]] = {}
    for trace in traces:
        if not trace.complete:
            continue
        key = trace.reference_keys.get(shadow.pair_key_attribute)
        role = trace.reference_keys.get(shadow.role_attribute, "").strip().casefold()
        if key:
            halves.setdefault(key, {}).setdefault(role, trace)
    source, target = shadow.source_value.casefold(), shadow.target_value.casefold()
    for pair in halves.values():
        if source in pair and target in pair:
            yield pair[source], pair[target]


def load_tool_traces(
    paths: Sequence[Path],
    config: Config,
    progress: _Progress | None = None,
    warn: Callable[[str], None] | None = None,
) -> Iterator[ToolTrace]:
    """Every ToolTrace in ``paths``: dumped ToolTraces as they are, OTLP spans assembled.
    ``warn`` hears of the spans left out as invalid (file:line, how many, why)."""
    assembler = _OfflineAssembler(config, warn)
    for path in paths:
        for where, record in _records(path, progress):
            if "resourceSpans" in record or "resource_spans" in record:
                assembler.add(record, where)
            else:
                yield _tooltrace(record, where)
    yield from assembler.finish()


def _tooltrace(record: dict[str, Any], where: str) -> ToolTrace:
    try:
        return tooltrace_from_dict(record)
    except ValueError as exc:
        raise ReplayInputError(f"{where}: not a ToolTrace line: {exc}") from None


def _read_text(path: Path) -> str:
    """The file's text, gunzipped first when it is gzip; raises ``ReplayInputError`` naming
    the line of the first byte that is not UTF-8."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise ReplayInputError(f"{path}: not a readable gzip file: {exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ReplayInputError(
            f"{path}:{line}: not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None


def _records(path: Path, progress: _Progress | None) -> Iterator[tuple[str, dict[str, Any]]]:
    text = _read_text(path)
    whole = _whole_document(text)
    if whole is not None:
        yield str(path), whole
        return
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if progress is not None:
            progress.update(path, number, len(lines))
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReplayInputError(f"{path}:{number}: not JSON: {exc.msg}") from None
        if not isinstance(record, dict):
            raise ReplayInputError(f"{path}:{number}: expected a JSON object per line")
        yield f"{path}:{number}", record
    if progress is not None:
        progress.done()


def _whole_document(text: str) -> dict[str, Any] | None:
    """A file that is one (possibly pretty-printed) JSON object rather than JSON lines."""
    stripped = text.lstrip()
    if not stripped.startswith("{") or "\n" not in stripped.rstrip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class _OfflineAssembler:
    """Assembles recorded spans with the server's buffer; time is moved by hand."""

    def __init__(self, config: Config, warn: Callable[[str], None] | None = None) -> None:
        self._warn = warn
        self._clock = ManualClock()
        limits = config.assembly.limits()
        unbounded = AssemblyLimits(
            completion_wait_ns=limits.completion_wait_ns,
            max_trace_age_ns=limits.max_trace_age_ns,
            max_spans_per_trace=limits.max_spans_per_trace,
            max_traces=2**62,
            max_buffered_spans=2**62,
            max_buffered_bytes=2**62,
        )
        self._buffer = TraceBuffer(unbounded, self._clock, NoopMetrics())
        self._normalize = config.policy.normalizer()
        self._options = config.decode_options()
        self._wait_s = limits.completion_wait_ns / 1e9

    def add(self, record: dict[str, Any], where: str) -> None:
        try:
            request = parse_otlp_json(json.dumps(record))
        except DecodeError as exc:
            raise ReplayInputError(f"{where}: {exc}") from None
        batch = decode_request(request, self._options)
        if batch.rejected and self._warn is not None:
            count = sum(batch.rejected.values())
            self._warn(f"{where}: {count} span(s) left out as invalid: {batch.error_message}")
        self._buffer.add(batch.spans)

    def finish(self) -> Iterator[ToolTrace]:
        self._clock.advance(self._wait_s + 1)
        for completed in [*self._buffer.poll(), *self._buffer.drain()]:
            yield from build_tool_traces(completed, self._normalize)


@dataclass
class _Progress:
    """A one-line progress bar on a terminal; silent otherwise."""

    stream: IO[str]
    enabled: bool
    _last: int = -1

    def update(self, path: Path, line: int, total: int) -> None:
        percent = line * 100 // max(total, 1)
        if not self.enabled or total < 1000 or percent == self._last:
            return
        self._last = percent
        bar = "#" * (percent // 4)
        self.stream.write(f"\r{path.name}: [{bar:<25}] {percent:3d}%")
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self._last >= 0:
            self.stream.write("\n")
        self._last = -1
