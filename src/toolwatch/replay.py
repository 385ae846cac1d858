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
spooled to a temporary file (``replay_report.ReportBuilder``'s ``listing``). Every span of
OTLP input is held until the input ends (about three times the size of the OTLP/JSON), so
spans of one trace come together whatever the order of the files, and their runs are then
evaluated in the order they started, as ``serve`` judges them live (a conversation's turns
in turn); with ``--stream`` a trace is evaluated once the recording has moved on past it
(``_OfflineAssembler``), for a large capture in time order, and the files are read together,
in recorded time (``replay_files.in_time_order``). A file that is one pretty-printed JSON
document is read whole.

Every ToolTrace goes through the same evaluation pipeline as in ``serve`` (policy, golden
cases matched by attribute, shadow pairs joined by pair key and agent — offline, with no timeout).
Gates (``--min-score``, ``--max-findings``) make the command exit 1 when they fail.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from statistics import median_low
from typing import Any, Final

from toolwatch.assembly.buffer import REPORTED_DROPS, CompletedTrace, TraceBuffer
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.config import Config
from toolwatch.engine_setup import build_references, conversation_scope
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.evaluation.severity import incomplete_reason
from toolwatch.ingest.decode import DecodeError
from toolwatch.ingest.otlp_json import decode_otlp_json
from toolwatch.metrics import NoopMetrics
from toolwatch.model import GoldenCase, ManualClock, ReferenceKind, ToolTrace, Traffic
from toolwatch.references.conversations import ConversationMemory
from toolwatch.references.shadow import ShadowJoiner, ShadowPair
from toolwatch.replay_files import (
    CLOCK_RECORDS,
    STDIN,
    OtherSignals,
    Progress,
    ReplayInputError,
    file_records,
    in_time_order,
    is_otlp,
    tooltrace_line,
)
from toolwatch.replay_report import Gate, Listing, Report, ReportBuilder, parse_gate

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
    builder = ReportBuilder(settings, gates, golden, listing=listing)
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
        # (``_OfflineAssembler.finish``), ToolTrace lines in the order they are read.
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
        incomplete = incomplete_reason(pair.target)
        builder.add_pair(
            result, ReferenceKind.SOURCE, rescored=pipeline.rescored, incomplete=incomplete
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
    (held until the input ends, or with ``stream`` as ``_OfflineAssembler`` says). ``warn``
    hears of the spans left out (file:line, how many, why)."""
    assembler = _OfflineAssembler(config, warn, stream=stream)
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


#: With ``--stream``: how long replay holds a trace after its last span, in the recorded time
#: of the spans (their end times): a span can reach a capture well after it ended (an SDK's
#: batch, a Collector's retries, 300 s by default), so replay waits at least this long, or
#: the configured ``completion_wait`` if longer.
RECORDED_SETTLE_NS: Final = 300 * 10**9
#: With ``--stream``: how long replay waits for the root (or outermost agent) of a trace,
#: in recorded time since its first span, or the configured ``max_trace_age`` if longer;
#: then it is evaluated as ``timed_out``, as a server evaluates a trace whose root never came.
RECORDED_MAX_AGE_NS: Final = 24 * 3600 * 10**9


class _OfflineAssembler:
    """Assembles recorded spans with the server's buffer, on a clock of recorded time.

    Recorded spans carry no arrival time. By default the clock never moves: every span is
    held until the input ends (``finish``), then each trace is evaluated, complete if its
    root came, else ``timed_out``.

    With ``stream``, the clock follows the recording: the median of the latest end time of
    each of the last ``CLOCK_RECORDS`` records read, never going back. A record's spans
    arrive at its latest end time (or the clock, if later), and a trace is evaluated once
    the clock has moved ``RECORDED_SETTLE_NS`` past its last span's arrival (or
    ``RECORDED_MAX_AGE_NS`` past its first, waiting for a root that never came), so a
    capture in time order holds only the traces in flight. A span that comes after its
    trace was evaluated (input out of time order by more than that wait: a file's own
    records, since several files are merged in time order by ``replay_files.in_time_order``)
    is left out and named (``warn``), however late it comes in recorded time: replay
    remembers the ids of the last ``max_remembered_traces`` traces it evaluated without
    serve's ``late_span_window``, since a span that started a second, partial run would be a
    finding about nothing.

    The other limits are serve's (``assembly``): a trace whose agent waits for a local
    parent is anchored after ``local_parent_wait_seconds`` as there, once it has settled.
    """

    def __init__(
        self, config: Config, warn: Callable[[str], None] | None = None, *, stream: bool = False
    ) -> None:
        self._warn = warn
        self._stream = stream
        self._recent: deque[int] = deque(maxlen=CLOCK_RECORDS)
        self._clock = ManualClock(start_ns=0)
        self._now = 0  # the clock: what traces settle on
        self._furthest = 0  # the latest arrival: past it, every held trace is due
        # serve's limits, every one (local_parent_wait_ns, overflow, ...) but those replaced
        # here for recorded time: a field left out would fall back to its default.
        limits = config.assembly.limits()
        self.limits = replace(
            limits,
            completion_wait_ns=max(limits.completion_wait_ns, RECORDED_SETTLE_NS),
            max_trace_age_ns=max(limits.max_trace_age_ns, RECORDED_MAX_AGE_NS),
            # Remembered as long as there is room (see above), unless turned off (0).
            late_span_window_ns=2**62 if limits.late_span_window_ns else 0,
            max_traces=2**62,  # the operator's own file: held by the recorded time alone
            max_buffered_spans=2**62,
            max_buffered_bytes=2**62,
        )
        self._buffer = TraceBuffer(self.limits, self._clock, NoopMetrics())
        self._normalize = config.policy.normalizer()
        # ``ingest.decoder`` is what a server must run; replay decodes its file with what
        # this install has (``auto``), so a production configuration replays anywhere.
        self._options = replace(config.decode_options(), decoder="auto")
        self._skipped = 0  # traces of no agent run, left out
        self.peak_buffered_spans = 0

    def add(self, record: dict[str, Any], where: str) -> list[ToolTrace]:
        """Buffer one recorded request's spans; return the runs of the traces it settled."""
        try:
            # No bound on its objects: the file is the operator's own, read a line at a time.
            batch = decode_otlp_json(json.dumps(record), self._options, sys.maxsize)
        except DecodeError as exc:
            raise ReplayInputError(f"{where}: {exc}") from None
        if batch.rejected and self._warn is not None:
            count = sum(batch.rejected.values())
            self._warn(f"{where}: {count} span(s) left out as invalid: {batch.error_message}")
        latest = max((span.end_ns for span in batch.spans), default=0)  # 0: no end time set
        if self._stream and latest > 0:
            if not self._recent:
                self._now = latest  # where the recording starts
            self._recent.append(latest)
            if len(self._recent) == CLOCK_RECORDS:
                self._now = max(self._now, median_low(self._recent))
            # The spans arrive at their own recorded time, never before the clock: when the
            # clock jumps (a quiet hour in the recording), a run read just before the jump
            # still waits its full settle time for the rest of its spans.
            self._clock.now_ns = max(self._now, latest)
            self._furthest = max(self._furthest, self._clock.now_ns)
        refused: dict[str, int] = {}
        self._buffer.add(batch.spans, refused)
        self._buffer.flag_rejected(batch.rejected_traces)  # as the server does
        self._clock.now_ns = self._now  # traces settle on the clock
        self.peak_buffered_spans = max(self.peak_buffered_spans, self._buffer.buffered_spans)
        if refused and self._warn is not None:
            self._warn(f"{where}: {self._refusal(refused)}")
        return list(self._runs(self._buffer.poll()))

    def finish(self) -> Iterator[ToolTrace]:
        """The runs of every trace still held, in the order they started (``_by_start``):
        the input has ended."""
        self._clock.now_ns = self._furthest + self.limits.max_trace_age_ns
        yield from self._by_start([*self._buffer.poll(), *self._buffer.drain()])
        if self._skipped and self._warn is not None:
            self._warn(
                f"{self._skipped} trace(s) with no agent, model or tool span left out, as serve"
                " leaves them out (not_an_agent_run)"
            )

    def _by_start(self, completed: list[CompletedTrace]) -> Iterator[ToolTrace]:
        """The runs of ``completed`` in start order, as serve judges them when they come live,
        whatever the order of the files: with ``verification_scope: conversation`` what a
        conversation's earlier turn verified counts in its later ones. A trace's runs are
        built once those that started before its first span are out, so what is built and
        waiting at once is the runs that overlap in time; ``completed`` is emptied as it
        goes."""
        completed.sort(key=lambda t: (_first_start(t), t.trace_id), reverse=True)
        waiting: list[tuple[int, str, int, ToolTrace]] = []  # a heap, by start
        built = itertools.count()  # ties in the order built: no ToolTraces compared
        while completed:
            trace = completed.pop()  # the earliest left: freed once its runs are out
            first = _first_start(trace)
            while waiting and waiting[0][0] <= first:
                yield heapq.heappop(waiting)[-1]
            for run in self._runs([trace]):
                heapq.heappush(waiting, (run.start_ns, run.run_span_id or "", next(built), run))
        while waiting:
            yield heapq.heappop(waiting)[-1]

    def _runs(self, completed: Iterable[CompletedTrace]) -> Iterator[ToolTrace]:
        for trace in completed:
            if trace.agent_run:
                yield from build_tool_traces(trace, self._normalize)
            else:
                self._skipped += 1

    def _refusal(self, refused: Mapping[str, int]) -> str:
        parts = []
        for reason, count in sorted(refused.items()):
            if reason == "late":
                settle = self.limits.completion_wait_ns // 10**9
                why = (
                    "their trace was already evaluated: the input is not in time order, or"
                    f" they were recorded more than {settle} s after the rest of it (without"
                    " --stream, replay holds every span until the input ends)"
                )
            else:
                why = REPORTED_DROPS[reason]
            parts.append(f"{count} span(s) left out: {why}")
        return "; ".join(parts)


def _first_start(trace: CompletedTrace) -> int:
    """When the first span of ``trace`` started: no run of it starts earlier."""
    return min((span.start_ns for span in trace.spans), default=0)
