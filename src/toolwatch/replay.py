"""``toolwatch replay``: evaluate recorded traces offline, report, and gate.

Inputs, detected per line (or per file when the file is one JSON document):

- OTLP/JSON ``ExportTraceServiceRequest`` objects, as the Collector's file exporter writes
  them (one per line); their spans are assembled as the server assembles them, on a clock
  of their recorded end times;
- ToolTrace lines, as ``toolwatch serve --dump-tooltraces`` writes them.

Files may be gzip-compressed (a rotated Collector export). Spans the server would reject (an
all-zero id, say) are left out as there, each named on stderr with its file and line.

Memory: files are read a line at a time and each ToolTrace is evaluated as it is read, so
ToolTrace lines cost what one run holds, however many there are (and the id of each run, to
evaluate a run read twice once; runs that carry a shadow pair key and failed golden cases are
kept for the report). Findings are counted, not held: the JSON report's list of them is
spooled to a temporary file (``replay_builder.ReportBuilder``'s ``listing``). Every span of
OTLP input is held until the input ends (about three times the size of the OTLP/JSON), so
spans of one trace come together whatever the order of the files, and their runs are then
evaluated in the order they started, as ``serve`` judges them live (a conversation's turns
in turn); with ``--stream`` a trace is evaluated once the recording has moved on past it
(``replay_assembly``), for a large capture in time order, and the files are read together,
in recorded time (``replay_files.in_time_order``). A file that is one pretty-printed JSON
document is read whole.

Every ToolTrace goes through the same evaluation pipeline as in ``serve`` (policy, golden
cases matched by attribute, shadow pairs joined by pair key and agent — offline, with no timeout).
Gates (``--min-score``, ``--max-findings``) make the command exit 1 when they fail.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from toolwatch.config import Config
from toolwatch.engine_setup import build_references, conversation_scope, findings_redaction
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock, ReferenceKind, Traffic
from toolwatch.model_evaluation import GoldenCase
from toolwatch.model_traces import ToolTrace
from toolwatch.references.conversations import ConversationMemory
from toolwatch.references.shadow import ShadowJoiner, ShadowPair
from toolwatch.replay_assembly import OfflineAssembler
from toolwatch.replay_builder import ReportBuilder
from toolwatch.replay_files import (
    STDIN,
    OtherSignals,
    Progress,
    ReplayInputError,
    file_records,
    in_time_order,
    is_otlp,
    tooltrace_line,
)
from toolwatch.replay_report import Gate, Listing, Report, parse_gate

__all__ = [
    "add_arguments",
    "evaluate_offline",
    "load_tool_traces",
    "run_replay",
]

#: The exit codes of replay, and of every ``toolwatch`` command (``toolwatch.cli``).
EXIT_OK, EXIT_GATE, EXIT_USAGE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files",
        nargs="+",
        type=Path,
        help="OTLP/JSON or ToolTrace JSON lines, gzipped or not; - reads standard input",
    )
    parser.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="text: the report for a reader (the default); json: one JSON object, each finding"
        " listed, for a program",
    )
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
    parser.add_argument(
        "--stream",
        action="store_true",
        help="evaluate each OTLP trace once the recording is 5 minutes past it, not when the"
        " input ends: for a large capture in time order (several files are read together,"
        " in recorded time)",
    )


def run_replay(args: argparse.Namespace, config: Config) -> int:
    """The ``replay`` command. Returns the exit code."""
    try:
        gates = [parse_gate(text, "min") for text in args.min_score]
        gates += [parse_gate(text, "max") for text in args.max_findings]
    except ValueError as exc:
        print(f"toolwatch replay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.files.count(STDIN) > 1:
        print("toolwatch replay: - (standard input) can be read only once", file=sys.stderr)
        return EXIT_USAGE
    progress = Progress(sys.stderr, enabled=not args.no_progress and sys.stderr.isatty())
    # The text report counts findings; the JSON one lists them, spooled to a temporary file.
    listing: Listing = "spooled" if args.format == "json" else "counted"
    try:
        traces = load_tool_traces(args.files, config, progress, _warn, stream=args.stream)
        report = evaluate_offline(traces, config, gates, listing=listing)  # as they are read
    except (ReplayInputError, OSError) as exc:
        print(f"toolwatch replay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "json":  # a reader that leaves is the CLI's (BrokenPipeError)
        report.write_json(sys.stdout)
        print()
    else:
        print(report.to_text())
    return EXIT_OK if report.passed else EXIT_GATE


def _warn(message: str) -> None:
    print(f"toolwatch replay: {message}", file=sys.stderr)


def evaluate_offline(
    traces: Iterable[ToolTrace],
    config: Config,
    gates: Sequence[Gate],
    *,
    listing: Listing = "kept",
) -> Report:
    """Evaluate ``traces`` as ``serve`` would, each as it comes, and build the report;
    ``listing`` says what it keeps of the findings (``ReportBuilder``)."""
    settings = EvaluationSettings(policy=config.policy, evaluators=config.evaluators)
    pipeline = EvaluationPipeline(settings)
    golden = build_references(config)[0]
    redaction = findings_redaction(config)
    builder = ReportBuilder(settings, gates, golden, listing=listing, redaction=redaction)
    halves = _ShadowHalves(config)
    shadow = config.shadow
    seen: set[tuple[str, str | None]] = set()  # runs read twice (overlapping files) count once
    scope = conversation_scope(config)
    memory = ConversationMemory(scope, config.policy.normalizer()) if scope else None
    for trace in traces:
        run = (trace.trace_id, trace.run_span_id)
        if run in seen:
            builder.duplicate()
            continue
        seen.add(run)
        # As in serve: an incomplete run is judged against the policy only; with the
        # conversation scope, by what its conversation's runs evaluated before it verified
        # before it started (span times): held OTLP runs come in start order
        # (``OfflineAssembler.finish``), ToolTrace lines in the order they are read.
        case = golden.match(trace) if golden is not None and trace.complete else None
        earlier = memory.before(trace) if memory is not None else ()
        result = pipeline.evaluate(trace, case, None, earlier=earlier)
        keys = trace.reference_keys
        traffic = Traffic.SHADOW if shadow.is_target(keys) else Traffic.LIVE
        builder.add(trace, case, result, source=shadow.is_source(keys), traffic=traffic)
        halves.offer(trace, case)
    for pair in halves.pairs():
        # As in serve: the target was judged against its golden case, if it had one; its
        # evaluators that take the case (``auto``) do not read the source in the pair's pass.
        result = pipeline.evaluate(
            pair.target, pair.case, pair.source, policy=False, pair_key=pair.key
        )
        builder.add_pair(
            result, ReferenceKind.SOURCE, rescored=pipeline.rescored, target=pair.target
        )
    builder.unpaired(halves.unpaired)
    return builder.build()


class _ShadowHalves:
    """The complete runs that carry a shadow pair key, joined as the server joins them
    (``ShadowJoiner``: a half waits ``pair_timeout_seconds`` for the other, a key joined is
    taken for as long, a third half is a duplicate), on the runs' own clock and in the
    server's order whatever order the input gave them in: the runs of a trace arrive
    together when it completes (the last end of its keyed runs that end within
    ``max_trace_age`` after the half: a trace id used again hours later, a session's, is
    another completion), each in start order. What never pairs is counted by reason
    (``unpaired``); halves still waiting at the end had no other half in the input
    (``no_other_half``). Each half keeps the golden case it was matched to (``ShadowPair``'s
    ``case``)."""

    def __init__(self, config: Config) -> None:
        self._shadow = config.shadow
        self._age_ns = config.assembly.limits().max_trace_age_ns
        self._halves: list[tuple[ToolTrace, GoldenCase | None]] = []
        self._ends: dict[str, list[int]] = {}  # trace id -> the ends of its runs
        self.unpaired: dict[str, int] = {}

    def offer(self, trace: ToolTrace, case: GoldenCase | None = None) -> None:
        if not self._shadow.enabled or not trace.reference_keys.get(
            self._shadow.pair_key_attribute
        ):
            return  # what replay holds grows with the shadow runs alone
        self._ends.setdefault(trace.trace_id, []).append(trace.end_ns)
        if trace.complete:
            self._halves.append((trace, case))

    def _completed(self, trace: ToolTrace) -> int:
        """When ``trace``'s trace completed in serve: the last end of its runs that end
        within ``max_trace_age`` after it."""
        until = trace.end_ns + self._age_ns
        return max(end for end in self._ends[trace.trace_id] if trace.end_ns <= end <= until)

    def pairs(self) -> Iterator[ShadowPair]:
        clock = ManualClock(0)
        counted = _Unpaired(self.unpaired)
        joiner = ShadowJoiner(self._shadow, clock, counted)
        arrivals = [
            (self._completed(h), h.trace_id, h.start_ns, h.run_span_id or "", h, case)
            for h, case in self._halves
        ]
        arrivals.sort(key=lambda arrival: arrival[:4])
        for completed, *_, half, case in arrivals:
            clock.now_ns = completed
            pair = joiner.offer(half, case=case)
            if pair is not None:
                yield pair
        counted.at_end = True
        joiner.drain()


class _Unpaired(NoopMetrics):
    """Counts the halves ``ShadowJoiner`` drops, by reason; those it still holds when the
    input ends (``drain``'s ``shutdown``) had no other half in it."""

    def __init__(self, counts: dict[str, int]) -> None:
        self._counts = counts
        self.at_end = False

    def shadow_unpaired(self, reason: str) -> None:
        reason = "no_other_half" if self.at_end else reason
        self._counts[reason] = self._counts.get(reason, 0) + 1


def load_tool_traces(
    paths: Sequence[Path],
    config: Config,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
    *,
    stream: bool = False,
) -> Iterator[ToolTrace]:
    """Every ToolTrace in ``paths``: dumped ToolTraces as they are, OTLP spans assembled
    (held until the input ends, or with ``stream`` as ``OfflineAssembler`` says). ``warn``
    hears of the spans left out (file:line, how many, why)."""
    assembler = OfflineAssembler(config, warn, stream=stream)
    if stream and len(paths) > 1:
        records = in_time_order(paths, progress)
    else:
        records = (record for path in paths for record in file_records(path, progress))
    skipped = OtherSignals()
    for where, record in records:
        if is_otlp(record):
            yield from assembler.add(record, where)
        elif not skipped.add(record, where):
            yield tooltrace_line(record, where)
    yield from assembler.finish()
    if warn is not None and skipped.lines:
        warn(skipped.told())
