"""Reading a golden-case file (``references.golden``'s format; its schema is
``references.golden_schema``): ``load_golden_cases`` reads and validates it and returns an
immutable ``GoldenCaseSet`` of ``model_evaluation.GoldenCase`` records with normalized tool
names. Every problem raises ``ReferenceFileError`` naming the file, the field path
(``cases[3].expected_tools[1].name``) and the reason, with the YAML line and column.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from toolwatch.model_evaluation import ExpectedCall, GoldenCase
from toolwatch.names import NameNormalizer
from toolwatch.references.golden import GoldenCaseSet
from toolwatch.references.golden_schema import ExpectedToolEntry, GoldenCaseEntry, GoldenFile
from toolwatch.references.settings import DEFAULT_CASE_ID_ATTRIBUTE
from toolwatch.sections import (
    YAML11_BOOLEANS,
    unknown_key,
    yaml11_booleans,
)
from toolwatch.yaml_tree import YamlLoader, line_and_column, node_at

__all__ = ["ReferenceFileError", "load_golden_cases"]


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
