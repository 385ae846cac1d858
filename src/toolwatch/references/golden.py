"""Golden cases: the *expected* reference (DESIGN §6).

A golden-case file is YAML (``examples/golden-cases.yaml`` is a commented one)::

    cases:
      - id: refund-verified                 # unique; live runs carry it in an attribute
        category: refunds                   # optional: category, mode (selection mode)
        expected_tools:                     # names, or {name, arguments?, match?}
          - lookup_order
          - {name: issue_refund, arguments: {amount_usd: 25.0}, match: numeric}
        expected_tool_count: 2              # optional, as is expected_min_steps
      - {id: small-talk, expected_no_tools: true}
      - {id: jailbreak, expected_no_tools: true, expected_refusal: true}
      - {id: kb-question, agent: support-bot, expected_tools: [search_kb]}
      - {id: hourly-canary, expected_tools: [search_kb], expected_every_seconds: 5400}

A case that names its ``agent`` is matched to that agent's run alone (``GoldenCaseSet.match``).
A case with ``expected_every_seconds`` expects a run matched to it at least that often
(``GoldenCaseSet.schedules``): a canary that stops arriving, or stops being matched, is
overdue (``toolwatch_golden_case_last_matched_timestamp_seconds``, the alert
``ToolwatchGoldenCaseOverdue``).

``load_golden_cases`` reads and validates the file once (its schema: ``golden_schema``), at
start-up, and returns an immutable ``GoldenCaseSet`` of ``model.GoldenCase`` records with
normalized tool names. Every problem raises ``ReferenceFileError`` naming the file, the field path
(``cases[3].expected_tools[1].name``) and the reason, with the YAML line and column.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from toolwatch.model import ExpectedCall, GoldenCase, ToolTrace
from toolwatch.names import NameNormalizer, fold
from toolwatch.references.golden_schema import ExpectedToolEntry, GoldenCaseEntry, GoldenFile
from toolwatch.references.settings import DEFAULT_CASE_ID_ATTRIBUTE
from toolwatch.sections import (
    YAML11_BOOLEANS,
    unknown_key,
    yaml11_booleans,
)
from toolwatch.yaml_tree import YamlLoader, line_and_column, node_at

__all__ = [
    "CaseTally",
    "GoldenCaseSet",
    "Lookup",
    "ReferenceFileError",
    "load_golden_cases",
]


class ReferenceFileError(ValueError):
    """A reference file that cannot be used.

    ``problems`` holds ``(where, reason)`` pairs; ``where`` is a field path such as
    ``cases[3].expected_tools[1].name``, a YAML position, or empty for the file as a whole.
    The message has one line per problem: ``<path>: <where>: <reason>``.
    """

    def __init__(self, path: Path, problems: Sequence[tuple[str, str]]) -> None:
        self.path = path
        self.problems = tuple(problems)
        super().__init__("\n".join(_line(path, where, why) for where, why in self.problems))


def _line(path: Path, where: str, reason: str) -> str:
    return f"{path}: {where}: {reason}" if where else f"{path}: {reason}"


class Lookup(NamedTuple):
    """What ``GoldenCaseSet.lookup`` found for one run."""

    case: GoldenCase | None
    case_id: str | None  # the id the run names, matched or not
    reason: str | None  # why a named id is matched to no case (see ``lookup``)


class CaseTally:
    """The golden case ids the runs of one trace named, and which of them no run of the
    trace was matched to, with why: a title agent's run under the canary's request is not
    the case's, and that is no problem when the canary's own run is. ``agents`` names the
    agents of the runs that named an id not matched, for the message."""

    __slots__ = ("_matched", "_missed")

    def __init__(self) -> None:
        self._matched: set[str] = set()
        self._missed: dict[str, tuple[str, list[str]]] = {}

    def add(self, found: Lookup, trace: ToolTrace) -> None:
        if found.case_id is None:
            return
        if found.case is not None:
            self._matched.add(found.case_id)
        elif found.reason is not None:
            _, agents = self._missed.setdefault(found.case_id, (found.reason, []))
            if trace.agent is not None and trace.agent not in agents:
                agents.append(trace.agent)

    def unmatched(self) -> list[tuple[str, str, list[str]]]:
        """Each id named and matched by no run: (id, reason, agents of the runs naming it)."""
        return [
            (case_id, reason, agents)
            for case_id, (reason, agents) in self._missed.items()
            if case_id not in self._matched
        ]


class GoldenCaseSet:
    """Golden cases by id, matched to live runs through one attribute.

    Immutable after construction, so any thread may read it. Iteration follows file order.
    """

    __slots__ = ("_attribute", "_by_id")

    def __init__(
        self,
        cases: Iterable[GoldenCase] = (),
        *,
        case_id_attribute: str = DEFAULT_CASE_ID_ATTRIBUTE,
    ) -> None:
        """Raises ``ValueError`` if two cases share an id."""
        by_id: dict[str, GoldenCase] = {}
        for case in cases:
            if case.case_id in by_id:
                raise ValueError(f"duplicate golden case id {case.case_id!r}")
            by_id[case.case_id] = case
        self._by_id = by_id
        self._attribute = case_id_attribute

    @property
    def case_id_attribute(self) -> str:
        """The ``ToolTrace.reference_keys`` key whose value is a case id."""
        return self._attribute

    def match(self, trace: ToolTrace) -> GoldenCase | None:
        """The case of the run, or ``None``: see ``lookup``."""
        return self.lookup(trace).case

    def lookup(self, trace: ToolTrace) -> Lookup:
        """The case of the run, or ``None``; the case id it names, and when it names one it
        is not matched to, why (one of ``metrics.UNMATCHED_CASE_REASONS``).

        The case whose id the run carries (exact match) in its own reference keys, else in
        its shared keys (on a span above several runs) when the case names its ``agent``.
        A case that names its agent is matched only to a run that agent took part in (its
        own agent or one it handed over to or used as a tool; names compared trimmed and
        case-folded): a title or moderation agent beside the canary's, given the id by the
        resource or the request's span, is no run of the case (``agent_not_run``).
        ``unknown_case``: no case has the id; ``several_runs``: the id is on a span above
        several runs and the case does not name the agent that says which is its run. A run
        not matched for a reason is not a problem when another run of its trace is matched
        to the case (``CaseTally``)."""
        attribute = self._attribute
        own = trace.reference_keys.get(attribute)
        shared = own is None
        case_id = trace.shared_keys.get(attribute) if own is None else own
        if case_id is None:
            return Lookup(None, None, None)
        case = self._by_id.get(case_id)
        if case is None:
            return Lookup(None, case_id, "unknown_case")
        if case.agent is None:
            return Lookup(None, case_id, "several_runs") if shared else Lookup(case, case_id, None)
        agents = trace.agents or ((trace.agent,) if trace.agent is not None else ())
        wanted = fold(case.agent)
        if any(fold(name) == wanted for name in agents):
            return Lookup(case, case_id, None)
        return Lookup(None, case_id, "agent_not_run")

    def schedules(self) -> dict[str, float]:
        """How often a run matched to each case is expected (``expected_every_seconds``),
        by case id: the cases that give it, in file order."""
        return {
            case.case_id: case.expected_every_seconds
            for case in self._by_id.values()
            if case.expected_every_seconds is not None
        }

    def get(self, case_id: str) -> GoldenCase | None:
        """The case with this id, or ``None``."""
        return self._by_id.get(case_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[GoldenCase]:
        return iter(self._by_id.values())


def load_golden_cases(
    path: Path,
    *,
    normalize: NameNormalizer | None = None,
    case_id_attribute: str = DEFAULT_CASE_ID_ATTRIBUTE,
) -> GoldenCaseSet:
    """Read, validate and convert a golden-case file; tool names go through ``normalize``
    (fold only when ``None``). Raises ``ReferenceFileError`` on any problem."""
    root, data = _read_yaml(path)
    if data is None:
        raise ReferenceFileError(path, [("", "the file is empty; expected a 'cases' list")])
    try:
        parsed = GoldenFile.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(error, root) for error in exc.errors(include_url=False)]
        raise ReferenceFileError(path, problems) from None
    problems = _duplicate_ids(parsed, root) + _arguments_not_json(parsed, root)
    problems += _ambiguous_booleans(parsed, root)
    if problems:
        raise ReferenceFileError(path, problems)
    names = normalize or NameNormalizer()
    cases = (_to_case(entry, names) for entry in parsed.cases)
    return GoldenCaseSet(cases, case_id_attribute=case_id_attribute)


def _to_case(entry: GoldenCaseEntry, normalize: NameNormalizer) -> GoldenCase:
    return GoldenCase(
        case_id=entry.id,
        expected_tools=tuple(_to_call(tool, normalize) for tool in entry.expected_tools),
        expected_no_tools=entry.expected_no_tools,
        expected_min_steps=entry.expected_min_steps,
        expected_tool_count=entry.expected_tool_count,
        category=entry.category,
        selection_mode=entry.mode,
        expected_refusal=entry.expected_refusal,
        agent=entry.agent,
        expected_every_seconds=entry.expected_every_seconds,
    )


def _to_call(tool: ExpectedToolEntry, normalize: NameNormalizer) -> ExpectedCall:
    arguments = dict(tool.arguments) if tool.arguments is not None else None
    if isinstance(tool.match, dict):
        return ExpectedCall(normalize(tool.name), arguments, None, dict(tool.match))
    return ExpectedCall(name=normalize(tool.name), arguments=arguments, match=tool.match)


def _duplicate_ids(parsed: GoldenFile, root: yaml.Node | None) -> list[tuple[str, str]]:
    first_at: dict[str, int] = {}
    problems: list[tuple[str, str]] = []
    for index, case in enumerate(parsed.cases):
        first = first_at.setdefault(case.id, index)
        if first != index:
            reason = f"duplicate case id {case.id!r} (first used by cases[{first}])"
            problems.append(_located(("cases", index, "id"), reason, root))
    return problems


def _arguments_not_json(parsed: GoldenFile, root: yaml.Node | None) -> list[tuple[str, str]]:
    """Expected argument values no call can have: a call's arguments are JSON, and YAML
    writes values JSON has not (``!!binary``, ``!!set``, ``!!timestamp``, ``.nan``, ``.inf``,
    a key that is no string), which would fail every run of the case."""
    problems: list[tuple[str, str]] = []
    for index, case in enumerate(parsed.cases):
        for number, tool in enumerate(case.expected_tools):
            loc = ("cases", index, "expected_tools", number, "arguments")
            for at, reason in _not_json(tool.arguments, loc):
                problems.append(_located(at, f"case {case.id!r}: {reason}", root))
    return problems


def _ambiguous_booleans(parsed: GoldenFile, root: yaml.Node | None) -> list[tuple[str, str]]:
    """Expected argument values written as a YAML 1.1 boolean other than true or false
    (``country: NO``): whether the writer meant the text or the boolean, one of them fails
    every run of the case, so the file says which."""
    problems: list[tuple[str, str]] = []
    for index, case in enumerate(parsed.cases):
        for number, tool in enumerate(case.expected_tools):
            loc: tuple[int | str, ...] = ("cases", index, "expected_tools", number, "arguments")
            node = node_at(root, loc) if tool.arguments is not None else None
            for at, scalar in yaml11_booleans(node, loc):
                reason = (
                    f"case {case.id!r}: {scalar.value} is read as "
                    f"{str(YAML11_BOOLEANS[scalar.value]).lower()} (YAML 1.1) or as"
                    f" the text {scalar.value!r} (YAML 1.2): write true or false, or quote the"
                    f" text {line_and_column(scalar)}"
                )
                problems.append((_field_path(at), reason))
    return problems


def _not_json(
    value: Any, loc: tuple[int | str, ...]
) -> Iterator[tuple[tuple[int | str, ...], str]]:
    """Where in ``value`` (at ``loc``) something is no JSON value, and why."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                yield from _not_json(item, (*loc, key))
            else:
                yield loc, f"the key {key!r} is no string, as a JSON object's keys are: quote it"
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _not_json(item, (*loc, index))
    elif (written := _yaml_only(value)) is not None:
        yield (
            loc,
            (
                f"{written} is no JSON value, so no call's arguments hold it: write a string,"
                " number, true/false, null, list or mapping"
            ),
        )


def _yaml_only(value: Any) -> str | None:
    """How the file wrote ``value`` if JSON has no such value, else ``None``."""
    if isinstance(value, bytes):
        return "binary data (!!binary)"
    if isinstance(value, set):
        return "a set (!!set)"
    if isinstance(value, datetime.date):  # a datetime is one too
        return "a timestamp (!!timestamp)"
    if isinstance(value, tuple):
        return "an ordered pair (!!omap, !!pairs)"
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else f"{'-' if value < 0 else ''}.inf"
    return None


def _read_yaml(path: Path) -> tuple[yaml.Node | None, Any]:
    """The document's node tree (for error positions) and its value."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReferenceFileError(path, [("", f"cannot read: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise ReferenceFileError(path, [("", f"not UTF-8 text: {exc.reason}")]) from None
    loader = YamlLoader(text)
    try:
        root = loader.get_single_node()
        return root, (loader.construct_document(root) if root is not None else None)
    except yaml.MarkedYAMLError as exc:
        raise ReferenceFileError(path, [_yaml_problem(exc)]) from None
    except yaml.YAMLError as exc:
        raise ReferenceFileError(path, [("", f"invalid YAML: {exc}")]) from None
    except RecursionError:  # the YAML library reads nesting by recursion
        raise ReferenceFileError(path, [("", "nested too deeply to read")]) from None
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.MarkedYAMLError) -> tuple[str, str]:
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    reason = exc.problem or exc.context or "unreadable"
    context = f" ({exc.context})" if exc.context and exc.problem else ""
    return where, f"invalid YAML: {reason}{context}"


_REASONS: Mapping[str, str] = {
    "missing": "required field is missing",
    "bool_type": "must be true or false",
    "int_type": "must be a whole number",
    "float_type": "must be a number of seconds",
    "float_parsing": "must be a number of seconds",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
}


def _problem(error: ErrorDetails, root: yaml.Node | None) -> tuple[str, str]:
    at_key = error["type"] == "extra_forbidden" or error["loc"][-1:] == ("[key]",)
    return _located(error["loc"], _reason(error), root, at_key=at_key)


def _located(
    loc: Sequence[int | str], reason: str, root: yaml.Node | None, *, at_key: bool = False
) -> tuple[str, str]:
    node = node_at(root, [part for part in loc if part != "[key]"], key=at_key)
    if node is not None:
        reason = f"{reason} {line_and_column(node)}"
    return _field_path(loc), reason


def _field_path(loc: Sequence[int | str]) -> str:
    path = ""
    for index, part in enumerate(loc):
        is_key = loc[index + 1 : index + 2] == ("[key]",)
        if part == "[key]":
            path += " (key)"
        elif isinstance(part, int) and not is_key:
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "(top level)"


def _reason(error: ErrorDetails) -> str:
    kind, loc = error["type"], error["loc"]
    if kind == "extra_forbidden":
        return _unknown_field(loc)
    if kind in ("value_error", "missing"):
        return _REASONS.get(kind) or error["msg"].removeprefix("Value error, ")
    if kind == "model_type" and len(loc) in (0, 4):
        wanted = "a mapping with a 'cases' list" if not loc else "a tool name or a mapping"
        return f"must be {wanted}, got {_shown(error.get('input'))}"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "one of the allowed values")
        return f"must be {expected}, got {_shown(error.get('input'))}"
    reason = _REASONS.get(kind) or error["msg"].replace("Input should be", "must be")
    value = error.get("input")
    # YAML reads an unquoted 0042 as the integer 34: a string that looks like a number needs
    # quotes.
    hint = "; quote it" if kind == "string_type" and isinstance(value, int | float) else ""
    return f"{reason}, got {_shown(value)}{hint}"


def _unknown_field(loc: Sequence[int | str]) -> str:
    return unknown_key(GoldenFile, tuple(loc), "field")


def _shown(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
