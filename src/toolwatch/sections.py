"""What configuration refuses wherever it is written.

``Section``, the base of every configuration section (``config``, ``evaluation.settings``,
``references.settings``), refuses whatever the section:

- an unknown key (a typo would otherwise be a setting silently left at its default);
- a change after loading (sections are frozen: a reload builds new ones);
- infinity and NaN for a number (``.inf`` passes every ``gt``/``le`` check a NaN fails, then
  overflows where seconds become nanoseconds);
- a boolean for a number: YAML reads ``yes``/``true`` as booleans, and pydantic's lax mode
  would take them as 1 (``max_request_bytes: true`` is a 1-byte limit). Strings still convert,
  as environment overrides need.

Durations that become nanoseconds are at most ``WEEK_SECONDS``, and ``Seconds`` refuses a
positive one below a nanosecond: it would become 0 ns, which their consumers refuse (a wait
of 0, a crash at start-up) or read as off. A file a setting names
(``FilePath``) is not an empty path: read as a path, that is the directory it is relative to.

``UniqueKeyLoader`` reads the YAML files (the configuration, golden cases) refusing a key given
twice in one mapping: PyYAML keeps the last silently, so a second ``security:`` block would
drop the first's settings.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Hashable
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

__all__ = [
    "WEEK_SECONDS",
    "FilePath",
    "Seconds",
    "Section",
    "UniqueKeyLoader",
    "keys_at",
    "seconds_to_ns",
    "takes_null",
    "unknown_key",
]

#: Bound on durations (assembly's waits and windows, a shadow half's wait, a conversation's
#: verifications): more than a week is a typo, and the nanoseconds of a huge one overflow
#: the clock's arithmetic.
WEEK_SECONDS = 7 * 86_400


def seconds_to_ns(seconds: float) -> int:
    """A duration in seconds as the clock's whole nanoseconds (what is below one is dropped)."""
    return int(seconds * 1_000_000_000)


def _not_below_a_nanosecond(seconds: float) -> float:
    if seconds > 0 and seconds_to_ns(seconds) == 0:
        raise ValueError(
            "below one nanosecond, the clock's unit, so it would be 0: give at least 1e-09"
        )
    return seconds


#: A duration in seconds that becomes nanoseconds (``seconds_to_ns``): a positive one below a
#: nanosecond is refused, naming the field, where the file is loaded; its bounds are the
#: field's (``gt=0``, or ``ge=0`` where 0 turns it off, and ``le=WEEK_SECONDS``).
Seconds = Annotated[float, AfterValidator(_not_below_a_nanosecond)]


def _not_empty_path(path: Any) -> Any:
    if isinstance(path, str) and not path.strip():
        raise ValueError("empty path: name a file")
    return path


#: A file a setting names.
FilePath = Annotated[Path, BeforeValidator(_not_empty_path)]

_BOOLEAN_NUMBER = PydanticCustomError("boolean_number", "Input should be a number, not a boolean")


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_numbers(cls, data: Any) -> Any:
        # Not a field validator on "*": pydantic refuses one on a union's discriminator.
        if not isinstance(data, dict):
            return data
        errors = [
            InitErrorDetails(type=_BOOLEAN_NUMBER, loc=(name,), input=value)
            for name, value in data.items()
            if type(value) is bool and name in cls.model_fields
            if _numeric(cls.model_fields[name].annotation)
        ]
        if errors:  # raised with each field's own location, as pydantic's own errors are
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return data


def _numeric(annotation: Any) -> bool:
    """Whether ``annotation`` takes numbers and not booleans (``int``, ``float | None``,
    ``Seconds | None``)."""
    if annotation in (int, float):
        return True
    if get_origin(annotation) is Annotated:
        return _numeric(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        options = get_args(annotation)
        return bool not in options and any(_numeric(a) for a in options)
    return False


def keys_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[str, ...]:
    """The keys the section at ``loc`` under ``model`` takes (its fields, by the names a file
    gives them, in the order it declares them), for telling a typo what was meant; empty
    when ``loc`` leads nowhere known.
    List indices, dictionary keys and union tags on the way are stepped over."""
    models = _models_in(model)
    for part in loc:
        fields = [
            m.model_fields[part] for m in models if isinstance(part, str) and part in m.model_fields
        ]
        if fields:
            models = [inner for f in fields for inner in _models_in(f.annotation)]
        elif tagged := [m for m in models if _tagged(m, part)]:  # a tagged union's option
            models = tagged
    return tuple(
        dict.fromkeys(f.alias or name for m in models for name, f in m.model_fields.items())
    )


def takes_null(model: type[BaseModel], loc: tuple[str, ...]) -> bool:
    """Whether the value at ``loc`` under ``model`` may be null (a section that is off, such
    as ``security.tls``); false when ``loc`` leads nowhere known."""
    models, annotation = [model], None
    for part in loc:
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if not fields:
            return False
        annotation = fields[0].annotation
        models = _models_in(annotation)
    return type(None) in get_args(annotation)


def unknown_key(model: type[BaseModel], loc: tuple[int | str, ...], noun: str) -> str:
    """Why the key at ``loc`` under ``model`` was refused: the key meant, if one is close,
    else those the section takes (``noun`` names them: "setting", "field")."""
    known = keys_at(model, loc[:-1])
    if not known:
        return f"unknown {noun}"
    meant = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    hint = f"did you mean {meant[0]!r}?" if meant else f"allowed: {', '.join(known)}"
    return f"unknown {noun} ({hint})"


def _tagged(model: type[BaseModel], tag: int | str) -> bool:
    """Whether ``model`` is the option of a tagged union that ``tag`` names."""
    return any(
        get_origin(f.annotation) is Literal and tag in get_args(f.annotation)
        for f in model.model_fields.values()
    )


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The sections an annotation holds: itself, or those of its options and items."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


class UniqueKeyLoader(yaml.SafeLoader):
    """``SafeLoader`` that rejects duplicate mapping keys (PyYAML silently keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key_node.value!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
