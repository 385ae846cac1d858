"""The engine: ingest batches in, findings out. Transport-free and synchronous.

The receivers hand it decoded batches (``offer``); a ticker calls ``tick`` to assemble the
traces that are due, rebuild their ToolTraces, attach references and evaluate them; ``drain``
does the same for everything at shutdown. All of it runs on one thread (the server's event
loop), so nothing here locks. Time comes from the injected clock.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.limits import AssemblyLimits
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.ingest.decode_types import DecodedBatch
from toolwatch.metrics import PipelineMetrics
from toolwatch.model import Clock, ReferenceKind, Traffic
from toolwatch.model_evaluation import Finding, GoldenCase
from toolwatch.model_traces import ToolTrace, Verified
from toolwatch.names import NameNormalizer, Spellings
from toolwatch.references.conversations import ConversationMemory, ConversationScope
from toolwatch.references.golden import CaseTally, GoldenCaseSet
from toolwatch.references.shadow import ShadowJoiner
from toolwatch.sinks.findings import FindingSink

__all__ = ["Admission", "DiscardToolTraces", "Engine", "EngineParts", "Receipt", "ToolTraceSink"]

log = logging.getLogger(__name__)


class Admission(enum.Enum):
    """What the engine says to a receiver about one request."""

    ACCEPTED = "accepted"
    OVERLOADED = "overloaded"  # retryable: answer UNAVAILABLE + RetryInfo / 503 + Retry-After


@dataclass(frozen=True, slots=True)
class Receipt:
    """The engine's answer to a receiver about one request: whether it was admitted, and
    how many spans of an admitted one were not taken, by reason (``assembly.buffer``'s
    ``REPORTED_DROPS``): OTLP asks a server to report what it accepted only in part."""

    admission: Admission
    refused: Mapping[str, int] = field(default_factory=dict)


_OVERLOADED: Final = Receipt(Admission.OVERLOADED)
#: Unmatched golden case ids the engine logs per reason, at most (each once): runs carry
#: input's ids. And how much of an id (or an agent's name) it keeps and shows, and how many of
#: a trace's agent names.
_MAX_TOLD: Final = 256
_MAX_ID_SHOWN: Final = 80
_MAX_AGENTS_SHOWN: Final = 5


class ToolTraceSink(Protocol):
    """Receives every rebuilt ToolTrace (e.g. ``--dump-tooltraces``)."""

    def write(self, trace: ToolTrace) -> None: ...
    def close(self) -> None: ...


class DiscardToolTraces:
    """A ``ToolTraceSink`` that keeps nothing."""

    def write(self, trace: ToolTrace) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class EngineParts:
    """What the engine is built from; the app assembles these from the configuration."""

    limits: AssemblyLimits
    evaluation: EvaluationPipeline
    normalize: NameNormalizer
    findings: FindingSink
    tooltraces: ToolTraceSink
    golden: GoldenCaseSet | None = None
    shadow: ShadowJoiner | None = None
    conversations: ConversationScope | None = None  # policy.verification_scope: conversation
    #: The agents the configuration names (``Config.named_agents``): a finding names its
    #: run's agent as they spell it, as the ``agent`` label does (``Spellings``).
    agents: frozenset[str] = frozenset()
    #: Called once the findings and ToolTraces of the traces taken out of the buffer at once
    #: (a tick, an admission that evicted runs, the drain) were published: the app has the
    #: files' threads write them now, so they reach the files as the metrics count them.
    published: Callable[[], None] | None = None


class Engine:
    """Owns the trace buffer and drives completed traces through evaluation to the sinks."""

    def __init__(self, parts: EngineParts, clock: Clock, metrics: PipelineMetrics) -> None:
        self._parts = parts
        self._clock = clock
        self._metrics = metrics
        self.buffer = TraceBuffer(parts.limits, clock, metrics)
        self._memory: ConversationMemory | None = None
        self._remember_conversations(parts)
        self._processed = 0  # traces taken out of the buffer and evaluated (or failed)
        self._told: dict[str, set[str]] = {}  # unmatched case ids logged, by reason
        self._agents = Spellings(parts.agents)
        self._watch(parts.golden)

    @property
    def activity(self) -> int:
        """A count that grows whenever the engine counts something after a request was
        admitted: a trace completed (evaluated, or evicted), a shadow half dropped. Equal
        readings mean no counter moved in between (the app's last-scrape check)."""
        shadow = self._parts.shadow
        return self._processed + (shadow.dropped if shadow is not None else 0)

    def offer(self, batch: DecodedBatch, transport: str) -> Admission:
        """Admit one decoded request, or refuse all of it when the buffer has no room
        (backpressure: the client keeps the spans and retries)."""
        return self.admit(batch, transport).admission

    def admit(self, batch: DecodedBatch, transport: str) -> Receipt:
        """``offer``, also saying which spans of an admitted request a limit refused."""
        size = sum(span.size_bytes for span in batch.spans)
        refused: dict[str, int] = {}
        # The rejected spans' runs miss a span: judged incomplete (TraceBuffer.admit).
        evicted = self.buffer.admit(batch.spans, size, refused, batch.rejected_traces)
        if evicted is None:
            self._metrics.spans_refused(batch.received, transport)
            return _OVERLOADED
        self._metrics.spans_received(batch.received, transport)
        for reason, count in batch.rejected.items():
            self._metrics.spans_rejected(count, reason)
        self._process(evicted)
        return Receipt(Admission.ACCEPTED, refused)

    def reconfigure(
        self,
        evaluation: EvaluationPipeline,
        normalize: NameNormalizer,
        golden: GoldenCaseSet | None,
        conversations: ConversationScope | None = None,
        agents: Iterable[str] = (),
    ) -> None:
        """A reloaded configuration's evaluation, tool names, golden cases and conversation
        scope: the traces completed from now on, those already buffered included, are judged
        by them. What conversations verified so far is kept while the scope stays on.
        ``agents``: the agents it names, as findings spell them from now on (a name spelled
        so before keeps its spelling, as the ``agent`` label does)."""
        parts = self._parts
        self._agents.know(agents)
        self._parts = EngineParts(
            limits=parts.limits,
            evaluation=evaluation,
            normalize=normalize,
            findings=parts.findings,
            tooltraces=parts.tooltraces,
            golden=golden,
            shadow=parts.shadow,
            conversations=conversations,
            agents=parts.agents | frozenset(agents),
            published=parts.published,
        )
        self._remember_conversations(self._parts)
        self._told.clear()  # the cases may have changed: tell again what still fails
        self._watch(golden)

    def _watch(self, golden: GoldenCaseSet | None) -> None:
        self._metrics.golden_cases_watched(golden.schedules() if golden is not None else {})

    def _remember_conversations(self, parts: EngineParts) -> None:
        scope = parts.conversations
        if scope is None:
            self._memory = None
        elif self._memory is None:
            self._memory = ConversationMemory(scope, parts.normalize, metrics=self._metrics)
        else:
            self._memory.rescope(scope, parts.normalize)

    def tick(self) -> int:
        """Evaluate every trace that is due now. Returns how many traces were completed."""
        completed = self.buffer.poll()
        self._process(completed)
        if self._parts.shadow is not None:
            self._parts.shadow.expire()
        return len(completed)

    def drain(self) -> int:
        """Shutdown: evaluate everything still buffered (a run whose anchor arrived as
        complete, the others flagged incomplete, ``shutdown``), flush sinks."""
        completed = self.buffer.drain()
        self._process(completed)
        if self._parts.shadow is not None:
            self._parts.shadow.drain()
        for sink in (self._parts.tooltraces, self._parts.findings):
            try:
                sink.close()
            except Exception:  # a full disk at shutdown must not stop the rest of it
                log.exception("could not flush %s at shutdown", type(sink).__name__)
        return len(completed)

    def _process(self, completed: Iterable[CompletedTrace]) -> None:
        processed = self._processed
        for trace in completed:
            self._processed += 1
            try:
                self._process_one(trace)
            except Exception:
                # Isolate: one trace the timeline or a sink chokes on must not cost the rest
                # of the batch. Counted as a failure of the "engine" stage, logged with the id.
                self._metrics.evaluator_failed("engine")
                log.exception("could not evaluate trace %s", trace.trace_id.hex())
        published = self._parts.published
        if published is not None and self._processed != processed:
            try:
                published()
            except Exception:  # the receiver's answer, the drain's close go on without it
                log.exception("telling the outputs what was published failed")

    def _process_one(self, trace: CompletedTrace) -> None:
        if not trace.agent_run:  # its spans were counted dropped, not built
            return
        golden = self._parts.golden
        history = self._parts.limits.missing_spans_from_history
        runs = build_tool_traces(trace, self._parts.normalize, from_history=history)
        # An incomplete run is judged against the policy only: the calls it is missing would
        # read as drift against a golden case or a shadow twin (and the policy's rules on
        # calls not made leave it out: invariants' required and minimums, safety's unrun).
        if golden is None:
            for run in runs:
                self._evaluate(run, None, trace.last_arrival_ns)
            return
        expected: list[GoldenCase | None] = [None] * len(runs)
        tally = CaseTally()
        for i, run in enumerate(runs):
            if run.complete:
                found = golden.lookup(run)
                tally.add(found, run)
                case = expected[i] = found.case
                # A candidate's copy of the canary keeps no schedule: its findings page no one.
                if (
                    case is not None
                    and case.expected_every_seconds is not None
                    and self._traffic(run) is Traffic.LIVE
                ):
                    self._metrics.golden_case_judged(case.case_id)
        try:
            for run, case in zip(runs, expected, strict=True):
                self._evaluate(run, case, trace.last_arrival_ns)
        finally:  # a run a sink failed on does not lose what the trace's ids said
            for case_id, reason, agents in tally.unmatched():
                self._unmatched(trace.trace_id.hex(), case_id, reason, agents)

    def _evaluate(
        self, trace: ToolTrace, expected: GoldenCase | None, last_arrival_ns: int
    ) -> None:
        joiner = self._parts.shadow if trace.complete else None
        # A shadow target is counted once its outcome is known (see references.shadow):
        # as compared when it pairs, else when the joiner drops it. Asked and offered at one
        # clock reading, so a pair key cannot expire in between.
        now = self._clock() if joiner is not None else 0
        deferred = expected is None and joiner is not None and joiner.compares(trace, now)
        traffic = self._traffic(trace)
        if not deferred:
            reference = "expected" if expected is not None else "none"
            self._metrics.tool_trace(trace, reference, traffic)
        self._parts.tooltraces.write(trace)
        memory = self._memory
        earlier = memory.before(trace) if memory is not None else ()
        findings = self._run(trace, expected, None, earlier=earlier)
        self._emit(trace, findings, last_arrival_ns, traffic)
        pair = None
        if joiner is not None:
            pair = joiner.offer(trace, deferred=deferred, now=now, case=expected)
        if pair is not None:
            if pair.deferred:
                self._metrics.tool_trace(pair.target, "source", Traffic.SHADOW)
            # Each half was judged against the policy, and the target against its golden case,
            # as it arrived; the pair adds only what is judged against the source, by the
            # evaluators that take it: with the case passed again, `auto` still reads the case.
            paired = self._run(pair.target, pair.case, pair.source, policy=False, key=pair.key)
            drift = [f for f in paired if f.reference is ReferenceKind.SOURCE]
            self._emit(pair.target, drift, last_arrival_ns, Traffic.SHADOW)

    def _traffic(self, trace: ToolTrace) -> Traffic:
        """``shadow`` for a shadow target's run (a candidate's: its regressions page no one),
        with shadow pairs configured; else ``live``, incomplete runs included."""
        shadow = self._parts.shadow
        return Traffic.SHADOW if shadow is not None and shadow.is_target(trace) else Traffic.LIVE

    def _unmatched(self, trace_id: str, case_id: str, reason: str, agents: list[str]) -> None:
        """Counts a trace whose complete runs name a case id none of them was matched to, and
        logs it once per (reason, id), up to ``_MAX_TOLD`` ids per reason (ids come from
        input: a harness that sends a request id there must not flood the log)."""
        self._metrics.golden_unmatched(reason)
        told = self._told.setdefault(reason, set())
        shown = case_id[:_MAX_ID_SHOWN]
        if shown in told or len(told) > _MAX_TOLD:
            return
        told.add(shown)
        runs = _agents_shown(agents)
        if len(told) > _MAX_TOLD:
            log.warning(
                "%d golden case ids were logged as unmatched (%s); further ones are only"
                " counted (toolwatch_golden_unmatched_traces_total) until a reload",
                _MAX_TOLD,
                reason,
            )
            return
        if reason == "unknown_case":
            log.warning(
                "golden case id %r, named by runs of %s (trace %s), is no golden case's: they"
                " are judged by the policy alone; check the ids the canary sends against the"
                " golden-case file",
                shown,
                runs,
                trace_id,
            )
        elif reason == "several_runs":
            log.warning(
                "golden case %r: its id is on a span above several runs (trace %s, of %s) and"
                " the case names no agent, so none of them is matched to it: name the agent"
                " whose run it is in the case (agent: <name>)",
                shown,
                trace_id,
                runs,
            )
        else:
            log.warning(
                "golden case %r names an agent none of the runs carrying its id is (trace %s,"
                " runs of %s), so none of them is matched to it: check the case's agent"
                " against the agent names the spans give",
                shown,
                trace_id,
                runs,
            )

    def _run(
        self,
        trace: ToolTrace,
        expected: GoldenCase | None,
        source: ToolTrace | None,
        *,
        policy: bool = True,
        earlier: tuple[Verified, ...] = (),
        key: str | None = None,
    ) -> Sequence[Finding]:
        evaluation = self._parts.evaluation
        result = evaluation.evaluate(
            trace, expected, source, policy=policy, earlier=earlier, pair_key=key
        )
        for evaluator, _message in result.failures:
            self._metrics.evaluator_failed(evaluator)
        # The pair's pass (policy=False) runs only the evaluators that compare the run with
        # its source, and safety again for its drift against it, whose score was observed
        # when the run arrived.
        rescored = frozenset() if policy else evaluation.rescored
        for evaluated in result.results:
            if evaluated.evaluator in rescored:
                continue
            score = evaluated.scores.get("score")
            seconds = result.durations.get(evaluated.evaluator, 0.0)
            self._metrics.evaluated(evaluated.evaluator, score, seconds)
        return result.findings

    def _emit(
        self,
        trace: ToolTrace,
        findings: Sequence[Finding],
        last_arrival_ns: int,
        traffic: Traffic,
    ) -> None:
        if not findings:
            return
        findings = self._spelled(trace, findings)
        detection = max(0, self._clock() - last_arrival_ns) / 1e9
        for finding in findings:
            self._metrics.finding(finding, detection, traffic)
        self._metrics.run_findings(findings, traffic)
        self._parts.findings.publish(trace, findings, traffic)

    def _spelled(self, trace: ToolTrace, findings: Sequence[Finding]) -> Sequence[Finding]:
        """``findings``, each naming its agent (the run's, when it names none) as the
        configuration spells it: what the ``agent`` label of the metrics says, so that the
        findings behind a page are found by the page's agent. The name as sent stays in the
        run (``ToolTrace.agent``, in the dump)."""
        spelled: list[Finding] = []
        for finding in findings:
            agent = finding.agent or trace.agent
            if agent is not None:
                agent = self._agents(agent)
            same = agent == finding.agent
            spelled.append(finding if same else dataclasses.replace(finding, agent=agent))
        return spelled


def _agents_shown(agents: list[str]) -> str:
    """The agent names of a log line, each escaped and cut as a case id is (a sender chose
    them: a line break must not forge a record, an ANSI escape recolour a terminal), the
    first ``_MAX_AGENTS_SHOWN`` of them."""
    shown = ", ".join(repr(agent[:_MAX_ID_SHOWN]) for agent in agents[:_MAX_AGENTS_SHOWN])
    more = f" and {len(agents) - _MAX_AGENTS_SHOWN} more" if len(agents) > _MAX_AGENTS_SHOWN else ""
    return shown + more or "no agent"
