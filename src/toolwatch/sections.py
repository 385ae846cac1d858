"""What configuration refuses wherever it is written.

``Section``, the base of every configuration section (``config``, ``evaluation.settings``,
``references.settings``), refuses whatever the section:

- an unknown key (a typo would otherwise be a setting silently left at its default);
- a change after loading (sections are frozen: a reload builds new ones);
- infinity and NaN for a number (``.inf`` passes every ``gt``/``le`` check a NaN fails, then
  overflows where seconds become nanoseconds);
- a boolean for a number: YAML reads ``true`` as a boolean, and pydantic's lax mode
  would take it as 1 (``max_request_bytes: true`` is a 1-byte limit). Strings still convert,
  as environment overrides need.

Durations that become nanoseconds are at most ``WEEK_SECONDS``, and ``Seconds`` refuses a
positive one below a nanosecond: it would become 0 ns, which their consumers refuse (a wait
of 0, a crash at start-up) or read as off. A file a setting names
(``FilePath``) is not an empty path: read as a path, that is the directory it is relative to.

``yaml_tree.YamlLoader`` reads the YAML files as YAML 1.2 does. Where YAML 1.1's reading of a
plain value was a boolean and meant something (``enabled: yes``), a boolean field still reads
it so; where a value may be anything, the word is ambiguous and the loaders refuse it
(``yaml11_booleans`` finds them), as they refuse a number setting written as YAML 1.1 read
another number (``yaml11_numbers``: ``010``, octal 8).
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from toolwatch.yaml_tree import mapping_pairs

__all__ = [
    "WEEK_SECONDS",
    "YAML11_BOOLEANS",
    "FilePath",
    "Seconds",
    "Section",
    "changed_keys",
    "is_text",
    "keys_at",
    "numbers_as_written",
    "seconds_to_ns",
    "takes_null",
    "unknown_key",
    "value_types",
    "yaml11_booleans",
    "yaml11_numbers",
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


def changed_keys(key: str, new: Any, old: Any) -> list[str]:
    """The keys under ``key`` (dotted, by the names a file gives them) whose values differ
    between ``new`` and ``old``, a section's or a setting's: a section is compared field by
    field, down to its settings; a list or a mapping as a whole. Empty when they are equal."""
    if new == old:
        return []
    if isinstance(new, BaseModel) and type(new) is type(old):
        fields = type(new).model_fields.items()
        changed = [
            inner
            for name, field in fields
            for inner in changed_keys(
                f"{key}.{field.alias or name}", getattr(new, name), getattr(old, name)
            )
        ]
        if changed:
            return changed
    return [key]


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


def value_types(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[Any] | None:
    """The types a value at ``loc`` under ``model`` may take (a union's options, ``Annotated``
    unwrapped; ``Any`` in a free-form value, such as a JSON Schema); ``None`` where ``loc``
    leads nowhere known. List indices step into items, mapping keys into values."""
    options: list[Any] = [model]
    for part in loc:
        options = [inner for option in options for inner in _step(option, part)]
        if not options:
            return None
    return options


def _options(annotation: Any) -> list[Any]:
    if get_origin(annotation) is Annotated:
        return _options(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [option for arg in get_args(annotation) for option in _options(arg)]
    return [annotation]


def _step(option: Any, part: int | str) -> list[Any]:
    """The types of the value at ``part`` in a value of type ``option``."""
    if option is Any:
        return [Any]
    if isinstance(option, type) and issubclass(option, BaseModel):
        fields = option.model_fields.items()
        return [t for name, f in fields if part in (name, f.alias) for t in _options(f.annotation)]
    origin, args = get_origin(option), get_args(option)
    if origin in (tuple, list) and isinstance(part, int) and args:
        return _options(args[0])
    if origin is dict and len(args) == 2:
        return _options(args[1])
    return []


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


#: The words YAML 1.1 reads as booleans and YAML 1.2 as text (``true`` and ``false`` are
#: booleans in both), with the boolean YAML 1.1 reads.
YAML11_BOOLEANS: Final = {
    word: value
    for words, value in (("yes on", True), ("no off", False))
    for lower in words.split()
    for word in (lower, lower.capitalize(), lower.upper())
}


def yaml11_booleans(
    node: yaml.Node | None, loc: tuple[int | str, ...] = ()
) -> Iterator[tuple[tuple[int | str, ...], yaml.ScalarNode]]:
    """The plain (unquoted) values under ``node`` (at ``loc``) that YAML 1.1 reads as
    booleans and ``YamlLoader`` as text (``YAML11_BOOLEANS``), with where each is (mapping
    keys and list indices); keys are not looked at (a key is text either way)."""
    for at, scalar, is_key in _plain_scalars(node, loc):
        if not is_key and scalar.tag == _STR and scalar.value in YAML11_BOOLEANS:
            yield at, scalar


def yaml11_numbers(
    node: yaml.Node | None,
) -> Iterator[tuple[tuple[int | str, ...], yaml.ScalarNode, int | float]]:
    """The plain values under ``node`` that YAML 1.1 reads as numbers and ``YamlLoader`` as
    text: ``010`` (octal 8), ``0x1F``, ``0b11``, ``1:30`` (base 60: 90), ``1_000``; with where
    each is and the number YAML 1.1 read. Keys are not looked at."""
    for at, scalar, is_key in _plain_scalars(node, ()):
        if is_key or scalar.tag != _STR:
            continue
        tag = _YAML11.resolve(yaml.ScalarNode, scalar.value, (True, False))  # type: ignore[no-untyped-call]
        if tag in (_INT, _FLOAT):
            number = yaml.safe_load(scalar.value)
            if isinstance(number, int | float):
                yield at, scalar, number


def numbers_as_written(node: yaml.Node | None, model: type[BaseModel]) -> None:
    """Retag, before ``node`` (a file's tree, read by ``YamlLoader``) is constructed, the plain
    values that can only be text as the text written: a mapping key written as a number or
    ``true``/``false`` (a JSON object's keys are text, and so are the names sections are
    keyed by: an agent named ``true``), and a number where ``model`` takes text alone
    (``tools: [1.10]`` names the tool ``1.10``, not ``1.1``; ``agents: [2024]``)."""
    for at, scalar, is_key in _plain_scalars(node, ()):
        if is_key and scalar.tag in (_BOOL, _INT, _FLOAT):
            scalar.tag = _STR
        elif scalar.tag in (_INT, _FLOAT):
            types = value_types(model, at)
            if types and all(is_text(t) for t in types):
                scalar.tag = _STR


#: YAML 1.1's reading of a plain value (PyYAML's resolvers), for what it read as a number.
_YAML11: Final = yaml.resolver.Resolver()
_STR, _BOOL, _INT, _FLOAT = (
    f"tag:yaml.org,2002:{name}" for name in ("str", "bool", "int", "float")
)


def is_text(annotation: Any) -> bool:
    """Whether a value of type ``annotation`` is text (a name, a choice among words)."""
    if get_origin(annotation) is Literal:
        return all(isinstance(arg, str) for arg in get_args(annotation))
    return annotation is str


def _plain_scalars(
    node: yaml.Node | None, loc: tuple[int | str, ...]
) -> Iterator[tuple[tuple[int | str, ...], yaml.ScalarNode, bool]]:
    """The plain (unquoted) scalars under ``node`` (at ``loc``), with where each is and
    whether it is a mapping key (at the value it keys); a mapping's as it holds them,
    merges included (``mapping_pairs``); each node once, where first reached. An alias is
    not followed: what it names is reached where its anchor is written."""
    pending: list[tuple[yaml.Node, tuple[int | str, ...], bool]] = (
        [] if node is None else [(node, loc, False)]
    )
    seen: set[int] = set()
    while pending:
        item, at, is_key = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, yaml.MappingNode):
            for key, value in reversed(mapping_pairs(item)):
                pending.append((value, (*at, str(key.value)), False))
                pending.append((key, (*at, str(key.value)), True))
        elif isinstance(item, yaml.SequenceNode):
            pending.extend(
                (value, (*at, i), False) for i, value in reversed(list(enumerate(item.value)))
            )
        elif isinstance(item, yaml.ScalarNode) and item.style is None:
            yield at, item, is_key
