"""The records whose constructors are written out (so that mypyc compiles them) behave as the
constructor ``dataclass`` would have generated: every field is a parameter, by position in
field order and by name; the defaults are the fields' defaults (a fresh mapping for a
``default_factory``); and the frozen ones still refuse assignment and deletion.

A field added to one of these classes without its line in ``__init__`` fails here.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import sys
from pathlib import Path
from typing import Any

import pytest

from toolwatch import model, model_evaluation, model_traces
from toolwatch.assembly import completed
from toolwatch.assembly.runs import _Run
from toolwatch.evaluation import base, pipeline

# Every record with a written-out constructor, and whether it is frozen.
_RECORDS: list[tuple[type[Any], bool]] = [
    (model.RequestedCall, False),
    (model.SpanRecord, False),
    (model_traces.ToolCall, False),
    (model_traces.ToolTrace, True),
    (model_evaluation.Finding, True),
    (model_evaluation.EvalResult, True),
    (base.Reference, True),
    (pipeline.PipelineResult, True),
    (completed.CompletedTrace, True),
    (_Run, True),
]
_FROZEN = [cls for cls, frozen in _RECORDS if frozen]

_ENUMS: dict[str, type[enum.Enum]] = {
    name: getattr(model, name)
    for name in ("SpanRole", "CallStatus", "Category", "Severity", "ReferenceKind")
}
_NESTED: dict[str, type[Any]] = {
    "SpanRecord": model.SpanRecord,
    "ToolTrace": model_traces.ToolTrace,
    "GoldenCase": model_evaluation.GoldenCase,
}


def _value(annotation: str, name: str, index: int) -> Any:
    """A value of the field's type, different for every field of a record (the compiled
    constructors check the types of their arguments). Compared by ``==``: compiled, an
    ``int`` field is stored unboxed, so it reads back equal but not identical."""
    kind = annotation.split(" | ", maxsplit=1)[0]
    if kind == "str":
        return f"{name}-{index}"
    if kind == "bytes":
        return f"{name}-{index}".encode()
    if kind == "int":
        return 1000 + index
    if kind == "float":
        return index + 0.5
    if kind == "bool":
        return index % 2 == 0
    if kind in _ENUMS:
        members = list(_ENUMS[kind])
        return members[index % len(members)]
    if kind in _NESTED:
        return _instance(_NESTED[kind])
    if kind.startswith("tuple["):
        return (object(),)
    if kind.startswith(("Mapping[", "dict[")):
        return {name: index}
    if kind == "Any":
        return object()
    raise AssertionError(f"no test value for a field of type {annotation!r}")


@functools.cache
def _annotations(cls: type[Any]) -> dict[str, str]:
    """The fields' annotations as written in the source. (Compiled, a dataclass field's
    ``type`` is whatever mypyc made of it, not always the annotation.)"""
    module = sys.modules[cls.__module__]
    source = Path(str(module.__file__)).parent / (cls.__module__.rsplit(".", 1)[1] + ".py")
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return {
                item.target.id: ast.unparse(item.annotation)
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            }
    raise AssertionError(f"no class {cls.__name__} in {source}")


def _field_value(cls: type[Any], f: dataclasses.Field[Any], index: int) -> Any:
    return _value(_annotations(cls)[f.name], f.name, index)


def _instance(cls: type[Any]) -> Any:
    fields = dataclasses.fields(cls)
    return cls(*(_field_value(cls, f, i) for i, f in enumerate(fields)))


def _ids(records: list[tuple[type[Any], bool]]) -> list[str]:
    return [cls.__name__ for cls, _frozen in records]


@pytest.mark.parametrize(("cls", "frozen"), _RECORDS, ids=_ids(_RECORDS))
def test_every_field_is_set_from_its_positional_parameter(cls: type[Any], frozen: bool) -> None:
    fields = dataclasses.fields(cls)
    values = [_field_value(cls, f, i) for i, f in enumerate(fields)]
    record = cls(*values)
    assert [getattr(record, f.name) for f in fields] == values  # values differ: no mix-up


@pytest.mark.parametrize(("cls", "frozen"), _RECORDS, ids=_ids(_RECORDS))
def test_every_field_is_set_from_its_keyword(cls: type[Any], frozen: bool) -> None:
    fields = dataclasses.fields(cls)
    values = {f.name: _field_value(cls, f, i) for i, f in enumerate(fields)}
    record = cls(**dict(reversed(values.items())))
    assert {name: getattr(record, name) for name in values} == values


@pytest.mark.parametrize(("cls", "frozen"), _RECORDS, ids=_ids(_RECORDS))
def test_the_defaults_are_the_fields_defaults(cls: type[Any], frozen: bool) -> None:
    fields = dataclasses.fields(cls)
    required = [f for f in fields if f.default is dataclasses.MISSING and not _factory(f)]
    values = [_field_value(cls, f, i) for i, f in enumerate(required)]
    first, second = cls(*values), cls(*values)
    for f in fields[len(required) :]:
        expected = f.default if f.default is not dataclasses.MISSING else _factory(f)()
        assert getattr(first, f.name) == expected, f.name
        if _factory(f):  # a fresh one for every record, as default_factory makes it
            assert getattr(first, f.name) is not getattr(second, f.name), f.name


@pytest.mark.parametrize("cls", _FROZEN, ids=[cls.__name__ for cls in _FROZEN])
def test_frozen_records_refuse_assignment_and_deletion(cls: type[Any]) -> None:
    record = _instance(cls)
    for f in dataclasses.fields(cls):
        before = getattr(record, f.name)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, f.name, before)
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(record, f.name)
        assert getattr(record, f.name) == before


@pytest.mark.parametrize(("cls", "frozen"), _RECORDS, ids=_ids(_RECORDS))
def test_equality_and_replace_are_the_dataclass_ones(cls: type[Any], frozen: bool) -> None:
    record = _instance(cls)
    fields = [f for f in dataclasses.fields(cls) if f.compare]  # what equality looks at
    assert dataclasses.replace(record) == record
    last = fields[-1]
    other = len(dataclasses.fields(cls))  # not the last field's index: a bool's parity flips
    changed = dataclasses.replace(record, **{last.name: _field_value(cls, last, other)})
    assert changed != record
    assert getattr(changed, last.name) != getattr(record, last.name)
    assert [getattr(changed, f.name) for f in fields[:-1]] == [
        getattr(record, f.name) for f in fields[:-1]
    ]


def _factory(f: dataclasses.Field[Any]) -> Any:
    return None if f.default_factory is dataclasses.MISSING else f.default_factory
