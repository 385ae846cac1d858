"""What every evaluator shares: the ``Reference`` a run is compared with, the ``Evaluator``
callable type, the ``Baseline`` view of a reference, what a run evaluated unfinished, or
missing its first spans, leaves out (``unfinished``, ``lost_earlier``, ``never_ran``), and
small formatting helpers. Which calls could inform which is ``concurrency``'s.

Evaluators are pure: given the same ToolTrace and Reference they return the same result, and
they never read a clock, log, count metrics or do I/O. They are built once from settings and
are safe to call from any thread (they hold only immutable state, and name normalizers whose
remembered names never change).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from toolwatch.evaluation.concurrency import effective_groups, uses_parallelism
from toolwatch.evaluation.lcs import lcs_length
from toolwatch.evaluation.lineup import Lineup, line_up
from toolwatch.evaluation.settings import Against
from toolwatch.model import MISSING_SPANS, ReferenceKind
from toolwatch.model_evaluation import EvalResult, GoldenCase
from toolwatch.model_traces import ToolCall, ToolTrace, Verified
from toolwatch.names import NameNormalizer

__all__ = [
    "UNFINISHED_REASONS",
    "Baseline",
    "Evaluator",
    "RefCall",
    "Reference",
    "Sequences",
    "baseline",
    "call_names",
    "first_only",
    "from_case",
    "from_source",
    "lost_earlier",
    "name_list",
    "names_none",
    "never_ran",
    "pct",
    "resolve",
    "sequences",
    "spanned_tools",
    "unfinished",
]


#: Two sides to line up: the run's names and groups, the reference's names and groups.
_Sides: TypeAlias = tuple[
    tuple[str, ...], tuple[int | None, ...], tuple[str, ...], tuple[int | None, ...]
]


@dataclass(frozen=True, slots=True, init=False)
class Reference:
    """What a run is compared with: a golden case, a shadow source run, both or neither. The
    policy is not part of it: evaluators that need only policy hold it from their settings.
    ``earlier``: what successful verification calls of earlier runs of the run's conversation
    verified (``policy.verification_scope: conversation``; ``references.conversations``),
    made before every call of the run. Frozen, with a written-out constructor, for the reason
    ``ToolTrace`` gives (one is built per run)."""

    expected: GoldenCase | None = None
    source: ToolTrace | None = None
    earlier: tuple[Verified, ...] = ()
    #: The line-ups ``sequences`` made against this reference, by the sides they lined up:
    #: ``order``, ``tool_selection`` and ``composite`` read one run against it the same way,
    #: and a long run's line-up is the costly part of their work. Not part of its value; a
    #: line-up depends on its sides alone, so references may share them (``replace`` does).
    lineups: dict[_Sides, Lineup | None] = field(default_factory=dict, compare=False, repr=False)

    def __init__(
        self,
        expected: GoldenCase | None = None,
        source: ToolTrace | None = None,
        earlier: tuple[Verified, ...] = (),
        lineups: dict[_Sides, Lineup | None] | None = None,
    ) -> None:
        object.__setattr__(self, "expected", expected)
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "earlier", earlier)
        object.__setattr__(self, "lineups", {} if lineups is None else lineups)


#: An evaluator: a pure callable scoring one ToolTrace against a Reference. It returns ``None``
#: when it does not apply (e.g. a comparing evaluator given no reference). Scores are in
#: [0, 1] and every result carries a ``"score"`` key, the one the score histogram records.
Evaluator: TypeAlias = Callable[[ToolTrace, Reference], EvalResult | None]


@dataclass(frozen=True, slots=True)
class RefCall:
    """One call of a reference: an expected call of a golden case or a call of the source run.

    ``compare_arguments`` is false when the reference says nothing about arguments (a golden
    call without ``arguments``, or a source call whose producer recorded none). ``group`` is
    a source call's group (``effective_groups``; golden calls have none). ``field_match``: a
    golden call's strategies for single fields. ``written``: a golden call, whose values a
    person typed (``similarity``'s ``numeric`` reads its text as text).
    """

    name: str
    arguments: Any
    compare_arguments: bool
    match: str | None
    position: int
    group: int | None = None
    field_match: Mapping[str, str] | None = None
    written: bool = False


@dataclass(frozen=True, slots=True)
class Baseline:
    """A reference seen the same way whatever its kind. ``noun`` names it in explanations
    ("expected", "source"). ``call_count`` is the count the structure check compares with
    (``None``: nothing to compare); ``refusal``/``parallel`` are ``None`` when unknown."""

    kind: ReferenceKind
    calls: tuple[RefCall, ...]
    no_tools: bool
    call_count: int | None
    refusal: bool | None
    parallel: bool | None
    case: GoldenCase | None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.calls)

    @property
    def noun(self) -> str:
        return "source" if self.kind is ReferenceKind.SOURCE else "expected"


#: Selection modes that leave the order out: a golden case with one of these as its own
#: ``mode`` is judged for which tools, not in which order (``order``, ``composite``).
UNORDERED_MODES: Final = frozenset({"expected_set", "set", "first"})


def unordered(base: Baseline) -> bool:
    """Whether ``base`` is a golden case whose own mode says the order does not matter."""
    return base.case is not None and base.case.selection_mode in UNORDERED_MODES


def first_only(case: GoldenCase) -> bool:
    """Whether ``case`` judges its run's first call alone (its own mode is ``first``): the
    tools it lists after the first, if any, say nothing of what the run does next, so no
    call count is read from its list (``from_case``, ``safety``'s dangerous calls) and
    ``composite`` scores the first call alone, as ``tool_selection`` and its failure type
    do. A count the case gives (``expected_tool_count``, or no calls at all) still holds."""
    return case.selection_mode == "first"


def names_none(base: Baseline) -> bool:
    """Whether ``base`` is a golden case that names no tools and does not expect none (only
    a step count, a call count or a refusal): it says nothing about which tools, or their
    order, so there is nothing to miss (``composite``) and nothing to select (``selection``).
    """
    return not base.calls and not base.no_tools and base.kind is ReferenceKind.EXPECTED


def resolve(reference: Reference, against: Against) -> ReferenceKind | None:
    """The reference kind ``against`` selects for this run, or ``None`` if it has none."""
    if against != "source" and reference.expected is not None:
        return ReferenceKind.EXPECTED
    if against != "expected" and reference.source is not None:
        return ReferenceKind.SOURCE
    return None


def baseline(reference: Reference, against: Against, normalize: NameNormalizer) -> Baseline | None:
    """The Baseline ``against`` selects, names normalized, or ``None`` when there is none."""
    kind = resolve(reference, against)
    if kind is ReferenceKind.EXPECTED and reference.expected is not None:
        return from_case(reference.expected, normalize)
    if kind is ReferenceKind.SOURCE and reference.source is not None:
        return from_source(reference.source, normalize)
    return None


def from_case(case: GoldenCase, normalize: NameNormalizer) -> Baseline:
    """The Baseline of a golden case. Its call count is ``expected_tool_count``, else the
    length of ``expected_tools``, except for a case that judges the first call alone
    (``first_only``): its list is no count of what the run does."""
    calls = tuple(
        RefCall(
            normalize(c.name),
            c.arguments,
            c.arguments is not None,
            c.match,
            i,
            field_match=c.field_match,
            written=True,
        )
        for i, c in enumerate(case.expected_tools)
    )
    count = case.expected_tool_count
    if count is None and calls and not first_only(case):
        count = len(calls)
    # A case that does not say whether the run must refuse still rules refusal out when it
    # expects work to be done; only expected_refusal lets a missing refusal be judged.
    refusal = case.expected_refusal
    if refusal is None and calls:
        refusal = False
    return Baseline(
        ReferenceKind.EXPECTED, calls, case.expects_no_calls, count, refusal, None, case
    )


def from_source(source: ToolTrace, normalize: NameNormalizer) -> Baseline:
    """The Baseline of a shadow source run."""
    groups = effective_groups(source.calls)
    calls = tuple(
        RefCall(normalize(c.tool_name), c.arguments, c.arguments is not None, None, i, groups[i])
        for i, c in enumerate(source.calls)
    )
    return Baseline(
        kind=ReferenceKind.SOURCE,
        calls=calls,
        no_tools=False,
        call_count=len(calls),
        refusal=source.refusal,
        parallel=uses_parallelism(source),
        case=None,
    )


def call_names(trace: ToolTrace, normalize: NameNormalizer) -> tuple[str, ...]:
    """The run's tool names in call order, normalized again (idempotent when the timeline used
    the same aliases, and right when a caller built the trace by hand)."""
    return tuple(normalize(c.tool_name) for c in trace.calls)


@dataclass(frozen=True, slots=True)
class Sequences:
    """A run's calls and a reference's names, lined up for the evaluators that read order.

    Calls issued together (one ``parallel_group``) have no order among themselves: the model
    asked for them at once, and their start times say only which one the framework happened
    to start first. So each side's groups are read in the orders that keep the most of the
    two sequences in common (``lineup``), and two parallel calls in either order are the same
    sequence. The calls nested in a parallel call (an agent used as a tool) belong to its
    group here (``effective_groups``): they run beside its siblings. ``calls`` and ``names``
    are the run's, ``reference`` the reference's names; ``lined`` the longest common
    subsequence ``line_up`` found, ``None`` when neither side has a group (``common``).
    """

    calls: Sequence[ToolCall]
    names: tuple[str, ...]
    reference: tuple[str, ...]
    lined: int | None = None

    def common(self) -> int:
        """The length of the longest common subsequence of ``names`` and ``reference`` over
        every order of each side's groups: what ``order`` scores (an upper bound where
        ``lineup`` says so, never below it)."""
        lined = self.lined
        return lcs_length(self.names, self.reference) if lined is None else lined


def sequences(
    trace: ToolTrace, base: Baseline, normalize: NameNormalizer, against: Reference | None = None
) -> Sequences:
    """The run and ``base`` lined up (see ``Sequences``). ``against``: the ``Reference``
    ``base`` was read from, which keeps the line-up for the next evaluator to ask."""
    names = call_names(trace, normalize)
    reference = base.names
    groups = tuple(effective_groups(trace.calls))
    reference_groups = tuple(c.group for c in base.calls)
    sides = (names, groups, reference, reference_groups)
    known = against.lineups if against is not None else {}
    if sides in known:
        lined = known[sides]
    else:
        lined = known[sides] = line_up(names, groups, reference, reference_groups)
    if lined is None:
        return Sequences(trace.calls, names, reference)
    calls = trace.calls
    return Sequences(
        tuple(calls[i] for i in lined.actual),
        tuple(names[i] for i in lined.actual),
        tuple(reference[i] for i in lined.reference),
        lined.common,
    )


#: Why a run is evaluated before it ended (``ToolTrace.incomplete_reason``): its root or
#: outermost agent never came (``timed_out``; ``shutdown``, drained before it came), or it
#: was evicted for room; or why what it did is only partly here: ``missing_spans``, its
#: model spans' input shows earlier model calls whose spans never came (sent to another
#: replica by a rollout or scale step), so the verification may be among them. ``span_limit``
#: is not one: that run ended, and lost spans to a limit or to ingest (a span rejected as
#: malformed), which says nothing of what they were.
UNFINISHED_REASONS: Final = frozenset({"shutdown", "timed_out", "evicted", MISSING_SPANS})


def unfinished(trace: ToolTrace) -> bool:
    """Whether ``trace`` was evaluated before it ended, so that the calls it has not made may
    be still to come: the rules that read what a run did not do (``invariants``' ``required``
    and minimums, ``safety``'s verification requested but never run) leave it out. A run
    that lost a span to a limit or to ingest has ended: what it did not do, it did not do,
    and one malformed span must not silence its pages (``safety``'s explanation says when the
    verification's span may be among those lost)."""
    return not trace.complete and trace.incomplete_reason in UNFINISHED_REASONS


def lost_earlier(trace: ToolTrace) -> bool:
    """Whether what ``trace``'s run did *before* the calls it holds may be missing: its
    model spans' input shows earlier model calls whose spans never came (``missing_spans``).
    An unfinished run's gap is after its calls (those it had yet to make), so a call it holds
    without an earlier verification had none; this one's gap is before them, so the rules
    that need an earlier call (``safety``'s verification, an ``invariants`` ``order`` rule's
    ``before``) cannot say it never came, and leave such a call out, saying so: even one
    issued alongside its verification, as an earlier verification may be among the lost."""
    return not trace.complete and trace.incomplete_reason == MISSING_SPANS


def spanned_tools(calls: Sequence[ToolCall], tools: Sequence[str]) -> frozenset[str]:
    """The tools (``tools[i]``: ``calls[i]``'s normalized name) some call of which has a tool
    span: the producer records that tool's calls (``never_ran``)."""
    return frozenset(tools[i] for i in range(len(calls)) if calls[i].span_id is not None)


def never_ran(call: ToolCall, tool_spanned: bool, *, complete: bool) -> bool:
    """Whether ``call`` was requested by the model and never run: it has no tool span, its
    output does not mark it hosted (the provider ran it), the run ended (``complete``: in
    one evaluated before it ended, ``unfinished``, the span may be still to come) and
    another call of its tool has a span (``tool_spanned``, ``spanned_tools``: the producer
    records that tool's calls; other tools' spans prove nothing, a run can mix
    instrumentations). Such a call returned nothing: no verification (``safety``'s
    ledger), no successful result to repeat (``loops``)."""
    return call.span_id is None and not call.hosted and complete and tool_spanned


def pct(score: float) -> str:
    """A score as a whole percentage: ``0.8`` -> ``"80%"``. Never rounds up to 100% (or down
    to 0%) a score that is not exactly 1 (or 0)."""
    if score == 1.0:
        return "100%"  # most runs: no rounding, no formatting
    value = round(score * 100)
    if value == 100 and score < 1.0:
        value = 99
    if value == 0 and score > 0.0:
        value = 1
    return f"{value}%"


#: Names an explanation lists; a run of thousands of calls is summed up, not spelled out.
_MAX_NAMES: Final = 20


def name_list(names: Iterable[str]) -> str:
    """Tool names for an explanation: ``[a, b]``; past ``_MAX_NAMES``, ``[a, b, … 3 more]``."""
    listed = list(names)
    shown = ", ".join(listed[:_MAX_NAMES])
    if len(listed) > _MAX_NAMES:
        shown += f", … {len(listed) - _MAX_NAMES} more"
    return "[" + shown + "]"
