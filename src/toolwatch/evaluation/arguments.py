"""``tool_arguments``: are the paired calls made with the right argument values?

Reference calls (golden ``expected_tools``, or the source run's calls) are paired with the
run's calls by ``matching.pair_by_name``: same tool only, as many pairs judged as can be (a
reference call that gives arguments with a run call recorded with them), then maximum total
argument similarity, then closest positions. So a run call recorded without arguments never
takes a scored reference call from one whose arguments are known and wrong, whichever comes
first. Scoring:

- a pair compares its arguments field by field (top-level fields; a field sent as ``null``
  is a field not sent: strict function calling sends ``null`` for every optional parameter
  left out); each field's strategy resolves as documented on ``ToolArgumentsSettings``. A
  reference field the run did not send scores 0.5 (``strict``: 0). A field only the run sent
  (an optional parameter filled in, often with its default) is ignored, and with ``strict``
  scores 0, unless the call-level strategy (the golden call's ``match``, else the tool's,
  else the default) is ``subset``, which always ignores it. A field the reference gives as
  ``null`` (the call must not set it) and the run sends with a value scores 0.5 (``strict``:
  0), unexpected, whatever the strategy, in the mean only; ``null`` on both sides, or
  against a field not sent, matches;
- the pair's score is the mean over its fields, or lower: the lowest score of a *value
  field* (``_is_value``: a reference value that is a number, a boolean, a text of at most 64
  characters without whitespace such as an id, a code, an e-mail address or an enum value,
  or an object or array of at most 32 such values), compared with any strategy but
  ``fuzzy`` (free text, whose rewording the mean absorbs). A wrong order id, amount or
  recipient is a wrong action however many fields are right: averaged, one wrong field of
  five scored 0.8, no finding. A value field decides when both sides give it and differ by
  more than type (``TYPE_ONLY``: the same value), or when a golden call gives it and the run
  does not (a dropped required value; a shadow source's field the run did not send, perhaps
  an optional one the source filled in, weighs in the mean only); a pair with no fields
  scores 1; arguments that are not objects (unparsable text, lists) are compared whole with
  the call-level strategy;
- a reference call that says nothing about arguments (``arguments: null``, or a source call
  recorded without them) still takes part in pairing but is not scored; nor is a pair whose
  run call was recorded without arguments (content capture is often off, CONVENTIONS §6.6):
  unknown arguments are not wrong ones;
- a scored reference call that was never made scores 0; a failed call made again
  (``loops.acted``), the run's or a source's, is not a call of its own: its retry stands for
  it (a source's lookup that failed and was retried is one lookup, not one the run missed);
- the run's score is the mean over scored reference calls. With none the evaluator does not
  apply (``None``); extra actual calls are ``tool_selection``'s business, not scored here.

A finding (ARGUMENT_VALUE_DRIFT) is raised per pair scoring below ``threshold``, on that call's
span, naming the value field that decided its score, else its worst field; values go to
``details`` only. Its explanation names the fields that decided the score, and those
that differ, differ in type only (``similarity.TYPE_ONLY``: a reference's text sent as the
number it spells), are missing or unexpected. A field name can be data itself
(``{"jane@example.com": true}``): one that only live calls gave (an unexpected field; any
field against a shadow source) is named only when it is an identifier (``_nameable``).
Another is counted in the explanation, left out of ``field``, and its ``details`` entry is
keyed ``[field N]``, which no ``output.show_fields`` entry matches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolwatch.evaluation.base import Baseline, RefCall, Reference, baseline, pct
from toolwatch.evaluation.loops import NO_BOUND, acted, acted_reference
from toolwatch.evaluation.matching import pair_by_name
from toolwatch.evaluation.settings import ToolArgumentsSettings
from toolwatch.evaluation.severity import make_finding, severity_for
from toolwatch.evaluation.similarity import TYPE_ONLY, exact, score_value
from toolwatch.evaluation.tool_fields import split_tool_field
from toolwatch.model import Category, ReferenceKind
from toolwatch.model_evaluation import DETAIL_FIELDS, EvalResult, Finding
from toolwatch.model_traces import ToolCall, ToolTrace
from toolwatch.names import NameNormalizer

__all__ = [
    "ArgumentReport",
    "ArgumentScorer",
    "CallComparison",
    "FieldScore",
    "ToolArguments",
    "compare_arguments",
]


#: A field name that live data alone gave is named when it is an identifier: what argument
#: schemas are made of, and what an e-mail address, a phone number or free text is not...
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
#: ... nor an identifier-shaped secret or number: five digits in a row (``ssn_078051120``),
#: a letter right after a digit inside a word (``sk_live_51HxYz``, ``AKIAIOSFODNN7EXAMPLE``;
#: ``address_2`` and ``line2`` are names) ...
_NOT_A_NAME: Final = re.compile(r"[0-9]{5}|[0-9][A-Za-z]")
#: ... or more runs of capitals than one per four letters, or a one-letter word between
#: capitals (a random mixed-case key: ``HqLyjWDarjtT``, ``ICGrcbxDuyBH``; ``pageURL``,
#: ``isOK`` and ``XMLHttpRequest`` are names).
_CAPITALS: Final = re.compile(r"[A-Z]+")
_ONE_LETTER_WORD: Final = re.compile(r"[A-Z][a-z][A-Z]")


#: A value field's text (``_is_value``): an id, a code, an address, an enum value.
_VALUE_TEXT: Final = re.compile(r"\S{1,64}")
#: The most values an object or array value field holds, in all (``_is_value``).
_VALUE_PARTS: Final = 32
#: A text that looks generated per run (``_is_value``), which a shadow pair's two runs each
#: make their own of (a shadow source's only: a golden case gives no value it does not
#: expect): a UUID (any case, braced or ``urn:uuid:``), an ISO 8601 date-time with a time
#: part, a text of 20 characters or more mixing letters and digits with no separator (a
#: random token: base64, a ULID), or anywhere in it a run of 16 hex characters or more
#: holding a letter and a digit (a digest, a token; a long number is a value: an order id).
_GENERATED: Final = re.compile(
    r"\A(?:"
    r"(?:urn:uuid:)?\{?[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}\}?"
    r"|\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:[Zz]|[+-]\d{2}(?::?\d{2})?)?"
    r"|(?=[^0-9]*[0-9])(?=[^A-Za-z]*[A-Za-z])[A-Za-z0-9+/]{20,}={0,2}"
    r")\Z"
    r"|(?=[0-9A-Fa-f]*[0-9])(?=[0-9A-Fa-f]*[A-Fa-f])[0-9A-Fa-f]{16,}"
)


def _is_value(value: Any, written: bool) -> bool:
    """Whether a reference value names what a call acts on rather than describes it: a
    number, a boolean, a text of 1 to 64 characters without whitespace that, in a shadow
    source's call (not ``written``), does not look generated per run (``_GENERATED``: an
    idempotency key or a timestamp differs on every shadow pair, and would page on each; a
    golden case names only what it expects, so a UUID it gives is the order's), or a
    non-empty object or array of at most
    ``_VALUE_PARTS`` values, all of them such (``{"sku": "A1", "qty": 2}``; one ``null`` or
    sentence in it makes it text to weigh in the mean)."""
    pending = [value]
    parts = 0
    while pending:
        item = pending.pop()
        if isinstance(item, Mapping | list | tuple):
            parts += len(item)  # counted before copied: a source's value may be huge
            if not item or parts > _VALUE_PARTS:
                return False
            pending.extend(item.values() if isinstance(item, Mapping) else item)
        elif isinstance(item, str):
            if not _VALUE_TEXT.fullmatch(item) or (not written and _GENERATED.search(item)):
                return False
        elif not isinstance(item, bool | int | float):
            return False
    return True


def _nameable(name: str) -> bool:
    """Whether a field name live data alone gave may be named (``_IDENTIFIER``)."""
    if not _IDENTIFIER.fullmatch(name) or _NOT_A_NAME.search(name) or _ONE_LETTER_WORD.search(name):
        return False
    letters = sum(c.isalpha() for c in name)
    if not any(c.islower() for c in name):
        return True  # CONSTANT_CASE
    return 4 * len(_CAPITALS.findall(name)) <= letters


@dataclass(frozen=True, slots=True)
class FieldScore:
    """One field of a pair. ``presence``: ``both``, ``missing`` (reference only) or
    ``unexpected`` (actual only). ``field`` is ``""`` for a whole non-object value."""

    field: str
    strategy: str
    score: float
    presence: str
    expected: Any
    actual: Any


@dataclass(frozen=True, slots=True)
class CallComparison:
    """A pair's ``score`` and ``fields``; ``decided_by``: the value fields whose score,
    below the fields' mean, is the pair's (see the module docstring)."""

    score: float
    fields: tuple[FieldScore, ...]
    decided_by: tuple[FieldScore, ...] = ()

    def imperfect(self) -> tuple[FieldScore, ...]:
        """Fields scoring below 1, worst first."""
        return tuple(sorted((f for f in self.fields if f.score < 1.0), key=lambda f: f.score))


#: The comparison of a reference call that says nothing about arguments: not scored.
_UNSCORED: Final = CallComparison(1.0, ())


@dataclass(frozen=True, slots=True)
class ArgumentReport:
    """A run's argument comparison: ``score`` is ``None`` when no reference call is scored."""

    score: float | None
    pairs: tuple[tuple[RefCall, ToolCall, CallComparison], ...]
    not_made: tuple[RefCall, ...]


class ArgumentScorer:
    """Compares one reference call with one actual call under the configured strategies."""

    __slots__ = ("_default", "_fields", "_strict", "_tolerance", "_tool_fields", "_tools")

    def __init__(self, settings: ToolArgumentsSettings, normalize: NameNormalizer) -> None:
        self._default: str = settings.default_strategy
        self._tolerance = settings.numeric_tolerance
        self._strict = settings.strict
        self._tool_fields: dict[tuple[str, str], str] = {}
        self._fields: dict[str, str] = {}
        self._tools: dict[str, str] = {}
        dotted: dict[str, str | None] = {}  # whole-name readings; None: two strategies
        for key, strategy in settings.strategies.items():
            if "." not in key:
                self._tools[normalize(key)] = strategy
                continue
            tool, field = split_tool_field(key)
            if tool == "*":
                self._fields[field] = strategy
                continue
            # ``mcp.search``: a tool mcp's field search, or every field of a tool whose name
            # holds the dot; the reference call's tool says which (the settings refuse keys
            # with more dots).
            self._tool_fields[(normalize(tool), field)] = strategy
            whole = normalize(key)
            dotted[whole] = strategy if dotted.get(whole, strategy) == strategy else None
        for whole, chosen in dotted.items():
            # A key without a dot names its tool for certain; two dotted keys a prefix
            # folds into one name, with different strategies, leave it to neither.
            if chosen is not None:
                self._tools.setdefault(whole, chosen)

    def call_strategy(self, ref: RefCall) -> str:
        """The call-level strategy: the golden call's ``match``, the tool's, the default."""
        return ref.match or self._tools.get(ref.name) or self._default

    def field_strategy(self, ref: RefCall, field: str) -> str:
        """The golden call's own strategy for the field, the configured one for the tool's
        field or any tool's, then the call-level strategy."""
        own = ref.field_match.get(field) if ref.field_match else None
        found = own or self._tool_fields.get((ref.name, field)) or self._fields.get(field)
        return found or self.call_strategy(ref)

    def compare(self, ref: RefCall, call: ToolCall) -> CallComparison:
        if not ref.compare_arguments:
            return _UNSCORED
        expected, actual = ref.arguments, call.arguments
        if isinstance(expected, Mapping) and isinstance(actual, Mapping):
            return self._compare_fields(ref, expected, actual)
        strategy = self.call_strategy(ref)
        score = score_value(strategy, expected, actual, self._tolerance, ref.written)
        return CallComparison(score, (FieldScore("", strategy, score, "both", expected, actual),))

    def _compare_fields(
        self, ref: RefCall, expected: Mapping[str, Any], actual: Mapping[str, Any]
    ) -> CallComparison:
        # null sent is absent: strict function calling sends null for each optional
        # parameter. A reference's null against a value sent says the call must not set it.
        keys = [k for k, v in expected.items() if v is not None or actual.get(k) is not None]
        if self._strict and self.call_strategy(ref) != "subset":
            keys += [k for k, v in actual.items() if v is not None and k not in expected]
        fields = tuple(self._field(ref, k, expected, actual) for k in keys)
        if not fields:
            return CallComparison(1.0, fields)
        mean = sum(f.score for f in fields) / len(fields)
        deciding = [f for f in fields if f.score < mean and self._decides(ref, f)]
        score = min([mean] + [f.score for f in deciding])
        return CallComparison(score, fields, tuple(f for f in deciding if f.score == score))

    def _decides(self, ref: RefCall, f: FieldScore) -> bool:
        """Whether ``f``, scoring below the mean, is a value field that may decide the
        pair's score (see the module docstring)."""
        if f.strategy == "fuzzy" or not _is_value(f.expected, ref.written):
            return False
        if f.presence == "missing":
            return ref.written
        return f.presence == "both" and not _type_only(f)

    def _field(
        self, ref: RefCall, key: str, expected: Mapping[str, Any], actual: Mapping[str, Any]
    ) -> FieldScore:
        strategy = self.field_strategy(ref, key)
        one_sided = 0.0 if self._strict else 0.5
        sent = actual.get(key)
        if sent is None:
            return FieldScore(key, strategy, one_sided, "missing", expected[key], None)
        if expected.get(key) is None:
            return FieldScore(key, strategy, one_sided, "unexpected", None, sent)
        score = score_value(strategy, expected[key], sent, self._tolerance, ref.written)
        return FieldScore(key, strategy, score, "both", expected[key], sent)


def compare_arguments(
    refs: Sequence[RefCall],
    calls: Sequence[ToolCall],
    scorer: ArgumentScorer,
    normalize: NameNormalizer,
) -> ArgumentReport:
    """Pair ``refs`` with ``calls`` optimally and score the scored reference calls. A pair
    is judged when its reference call is scored and its run call's arguments were recorded
    (unknown arguments are not wrong ones); the pairing judges as many as it can."""
    memo: dict[tuple[int, int], CallComparison] = {}

    def similarity(i: int, j: int) -> float:
        memo[(i, j)] = scorer.compare(refs[i], calls[j])
        return memo[(i, j)].score

    names = [normalize(c.tool_name) for c in calls]
    unscored = frozenset(i for i, r in enumerate(refs) if not r.compare_arguments)
    unrecorded = frozenset(j for j, c in enumerate(calls) if c.arguments is None)
    matched = pair_by_name([r.name for r in refs], names, similarity, unscored, unrecorded)
    paired = {i for i, _ in matched}
    pairs = [(i, j) for i, j in matched if j not in unrecorded]  # else: unknown
    not_made = tuple(r for i, r in enumerate(refs) if r.compare_arguments and i not in paired)
    judged = [p for p in pairs if p[0] not in unscored]
    total = sum(memo[p].score for p in judged)
    count = len(judged) + len(not_made)
    return ArgumentReport(
        score=total / count if count else None,
        pairs=tuple((refs[i], calls[j], memo.get((i, j), _UNSCORED)) for i, j in pairs),
        not_made=not_made,
    )


class ToolArguments:
    """The ``tool_arguments`` evaluator (see the module docstring)."""

    name: Final = "tool_arguments"

    def __init__(
        self,
        settings: ToolArgumentsSettings,
        normalize: NameNormalizer,
        bound: Mapping[str, tuple[str, ...]] = NO_BOUND,
    ) -> None:
        self.settings = settings
        self._normalize = normalize
        self._bound = bound  # a dangerous tool's bound fields: its retries (loops.retried)
        self._scorer = ArgumentScorer(settings, normalize)

    def __call__(self, trace: ToolTrace, reference: Reference) -> EvalResult | None:
        reference = acted_reference(reference, self._normalize, self._bound)
        base = baseline(reference, self.settings.against, self._normalize)
        if base is None:
            return None
        calls = acted(trace, self._normalize, self._bound).calls
        report = compare_arguments(base.calls, calls, self._scorer, self._normalize)
        if report.score is None:
            return None
        findings = tuple(
            self._finding(trace, base, ref, call, comparison)
            for ref, call, comparison in report.pairs
            if ref.compare_arguments and comparison.score < self.settings.threshold
        )
        return EvalResult(self.name, {"score": report.score}, findings, _explain(report, base.noun))

    def _finding(
        self, trace: ToolTrace, base: Baseline, ref: RefCall, call: ToolCall, c: CallComparison
    ) -> Finding:
        configured = base.kind is ReferenceKind.EXPECTED
        imperfect = c.imperfect()
        names = _names(imperfect, configured)
        deciders = _names(c.decided_by, configured)
        first = deciders[0] if deciders else names[0] if names else None
        return make_finding(
            trace,
            category=Category.ARGUMENT_VALUE_DRIFT,
            evaluator=self.name,
            reference=base.kind,
            severity=severity_for(c.score, self.settings.severity_floor),
            score=c.score,
            explanation=f"Arguments of {ref.name}: {pct(c.score)} against the {base.noun} "
            f"call{_decided(deciders)} ({_field_summary(imperfect, names)}).",
            call=call,
            tool=ref.name,
            field=first or None,
            details={
                DETAIL_FIELDS: {
                    name or f"[field {i}]": _field_details(f)
                    for i, (f, name) in enumerate(zip(imperfect, names, strict=True), start=1)
                }
            },
        )


def _names(fields: Sequence[FieldScore], configured: bool) -> list[str | None]:
    """Each field's name as a finding may show it; ``None`` where the name may be data: it
    came from live calls only (``configured``: the reference's names are a golden case's)
    and is not an identifier. ``""`` (a whole value) is no name and shows."""
    return [
        f.field
        if not f.field or (configured and f.presence != "unexpected") or _nameable(f.field)
        else None
        for f in fields
    ]


def _decided(names: Sequence[str | None]) -> str:
    """The value fields that decided a pair's score, for its explanation (those ``_names``
    hides counted)."""
    if not names:
        return ""
    shown = [n for n in names if n is not None]
    hidden = len(names) - len(shown)
    if hidden:
        shown.append(f"{hidden} field{'s' if hidden > 1 else ''} not named")
    return f", decided by the value of {', '.join(shown)}"


def _field_details(f: FieldScore) -> dict[str, Any]:
    return {
        "expected": f.expected,
        "actual": f.actual,
        "strategy": f.strategy,
        "score": f.score,
        "presence": f.presence,
    }


def _field_summary(fields: Sequence[FieldScore], names: Sequence[str | None]) -> str:
    """Which fields differ (in type only: a reference's text sent as the number it spells),
    are missing or unexpected: names only (those ``_names`` shows; the others counted),
    never values."""
    kinds = [_TYPE if _type_only(f) else f.presence for f in fields]
    parts = []
    for kind, label in _LABELS:
        picked = [n for k, n in zip(kinds, names, strict=True) if k == kind]
        shown = [n or "(whole value)" for n in picked if n is not None]
        hidden = len(picked) - len(shown)
        if hidden:
            shown.append(f"{hidden} field{'s' if hidden > 1 else ''} not named")
        if shown:
            parts.append(f"{label}: " + ", ".join(shown))
    return "; ".join(parts) or "no field differs"


_TYPE: Final = "type"
#: What ``_field_summary`` calls each kind of imperfect field, in the order it lists them.
_LABELS: Final = (
    ("both", "differs"),
    (_TYPE, "type differs"),
    ("missing", "missing"),
    ("unexpected", "unexpected"),
)


def _type_only(f: FieldScore) -> bool:
    """Whether the field's values are the same but for their type (``similarity.exact``)."""
    return f.presence == "both" and exact(f.expected, f.actual) == TYPE_ONLY


def _explain(report: ArgumentReport, noun: str) -> str:
    scored = [(r, c) for r, _, c in report.pairs if r.compare_arguments]
    total = len(scored) + len(report.not_made)
    text = f"Arguments: {pct(report.score or 0.0)} over {total} {noun} calls"
    worst = [f"{r.name} {pct(c.score)}" for r, c in scored if c.score < 1.0]
    if worst:
        text += f" (imperfect: {', '.join(worst)})"
    if report.not_made:
        text += f"; {len(report.not_made)} {noun} calls not made"
    return text + "."
