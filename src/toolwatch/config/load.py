"""``load_config``: the YAML file read (as YAML 1.2, refusing what YAML 1.1 read otherwise),
file paths resolved, overrides applied, the whole validated, and pydantic's errors told in
a configuration file's words, with the line and column the file wrote the value at.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from toolwatch.config.errors import ConfigError, _not_utf8, _origin, _source
from toolwatch.config.security import _SECURITY_FILES
from toolwatch.config.whole import Config
from toolwatch.sections import (
    YAML11_BOOLEANS,
    is_text,
    numbers_as_written,
    takes_null,
    unknown_key,
    value_types,
    yaml11_booleans,
    yaml11_numbers,
)
from toolwatch.yaml_tree import YamlLoader, line_and_column, node_at

__all__ = ["load_config"]


def load_config(
    path: Path | None,
    overrides: dict[str, Any] | None = None,
    origins: dict[str, str] | None = None,
    *,
    security_files: bool = True,
    path_origin: str | None = None,
) -> Config:
    """Read ``path`` (YAML), apply ``overrides`` (dotted keys, e.g. ``listen.grpc``), and
    validate. Raises ``ConfigError`` naming the file, the field path and the reason.
    ``origins`` says where an override was given (its flag or variable, by key), for the
    errors to blame it; one not named there is blamed on the command line/environment.

    ``security_files=False`` validates the ``security`` section without reading the files it
    names (TLS certificate, key and client CA, bearer-token file), which only the listeners
    use: ``replay`` binds none, so a production configuration replays where its Secrets are
    not mounted. ``serve`` (and a reload) and ``check-config`` read them.

    ``path_origin``: the environment variable that named ``path``, if one did; an error
    reading the file names it, as errors name the flag or variable of an override."""
    source = _source(path)
    try:
        data, root = _read_yaml(path) if path else ({}, None)
    except ConfigError as exc:
        if path_origin is None:
            raise
        raise ConfigError(f"{path_origin}: {exc}") from None
    ambiguous = _ambiguous_booleans(root, overrides or {})
    if ambiguous:
        lines = [f"{source}: {len(ambiguous)} configuration error(s)"]
        raise ConfigError("\n".join([*lines, *(f"  {source}: {line}" for line in ambiguous)]))
    if path is not None:
        _resolve_relative(data, path.parent)
    # After resolving: paths given as overrides (flags, env) are relative to the working
    # directory.
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    try:
        return Config.model_validate(data, context={_SECURITY_FILES: security_files})
    except ValidationError as exc:
        said = _format_errors(source, exc, root, overrides or {}, origins or {})
        raise ConfigError(said) from None


#: The file-path settings, as key paths.
_PATH_FIELDS = (
    ("golden", "cases_file"),
    ("security", "tls", "cert_file"),
    ("security", "tls", "key_file"),
    ("security", "tls", "client_ca_file"),
    ("security", "auth", "bearer_token_file"),
)


def _resolve_relative(data: dict[str, Any], base: Path) -> None:
    """Paths inside the file are relative to the file, not to the working directory."""
    for *parents, leaf in _PATH_FIELDS:
        node: Any = data
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(leaf), str) and node[leaf].strip():
            path = Path(node[leaf])
            node[leaf] = str(path if path.is_absolute() else base / path)


def _read_yaml(path: Path) -> tuple[dict[str, Any], yaml.Node | None]:
    """The file's settings, and its node tree (for where a value was written)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(_not_utf8(path, exc)) from None
    document = io.StringIO(text)
    document.name = str(path)  # so the error's mark names the file, not "<unicode string>"
    loader = YamlLoader(document)
    try:
        root = loader.get_single_node()
        numbers_as_written(root, Config)
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except RecursionError:  # the YAML library reads nesting by recursion
        raise ConfigError(f"{path}: not valid YAML: nested too deeply to read") from None
    finally:
        loader.dispose()
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data, root


def _ambiguous_booleans(root: yaml.Node | None, overrides: Mapping[str, Any]) -> list[str]:
    """Where the file wrote ``yes``, ``no``, ``on`` or ``off`` unquoted and the setting does
    not say which it means: YAML 1.1 read a boolean, ``YamlLoader`` (YAML 1.2) reads text.
    A boolean setting reads the boolean (``enabled: yes``, as before) and a text one the text
    (a tool named ``on``); a free-form value (a JSON Schema's ``enum: [NO]``) or a setting
    that null turns off (``findings: off``: a file named ``off``?) could mean either, so each
    is refused, naming where, the value and the fix. A value an override replaces is not
    looked at."""
    problems = []
    for loc, scalar in yaml11_booleans(root):
        where = ".".join(str(part) for part in loc)
        if any(where == key or where.startswith(key + ".") for key in overrides):
            continue
        types = value_types(Config, loc)
        if types is None or bool in types or all(is_text(t) for t in types):
            continue  # an unknown key, a boolean, or text (pydantic says what else is wrong)
        word, meant = scalar.value, str(YAML11_BOOLEANS[scalar.value]).lower()
        at = line_and_column(scalar)
        if Any in types:
            fix = f"write {meant} for the boolean, or quote the text: '{word}'"
        elif type(None) in types:
            fix = f"write null to leave it unset (off), or quote the text: '{word}'"
        else:
            continue  # a number, a severity: the text is refused as such
        problems.append(
            f"{where}: {word} is the text {word!r} (YAML 1.2), not {meant} as YAML 1.1 read"
            f" it: {fix} {at}"
        )
    return problems + _yaml11_numbers(root, overrides)


def _yaml11_numbers(root: yaml.Node | None, overrides: Mapping[str, Any]) -> list[str]:
    """Where the file wrote a number in a form of YAML 1.1's (``010``: octal 8, ``0x400``,
    ``1:30``: 90) that ``YamlLoader`` (YAML 1.2) reads as text, in a number setting, and the
    text does not read as the same number (``1_000`` does): each is
    refused, naming where, the value and both readings, not silently read as another number
    (``010`` as 10) or refused as no number without saying why. A value an override
    replaces is not looked at."""
    problems = []
    for loc, scalar, number in yaml11_numbers(root):
        where = ".".join(str(part) for part in loc)
        if any(where == key or where.startswith(key + ".") for key in overrides):
            continue
        types = value_types(Config, loc)
        if types is None or not ({int, float} & set(types)) or str in types or Any in types:
            continue  # unknown, text (a name 007), or free-form (a JSON Schema's const: 14:30)
        word = scalar.value
        try:
            if float(word) == number:
                continue  # 1_000: the same number either way
        except ValueError:
            pass
        problems.append(
            f"{where}: {word} is the text {word!r} (YAML 1.2), not the number {number} YAML"
            f" 1.1 read: write the number in decimal {line_and_column(scalar)}"
        )
    return problems


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``dotted`` in ``data``, adding the sections on the way that are not there (or are
    null where a section may be: off, which the override turns on). A section the file gives
    as anything else stays as the file has it, so validation refuses it: an override cannot
    say what the file meant by it."""
    *parents, leaf = dotted.split(".")
    node = data
    for depth, key in enumerate(parents, start=1):
        if key not in node or (node[key] is None and takes_null(Config, tuple(parents[:depth]))):
            node[key] = {}
        child = node[key]
        if not isinstance(child, dict):
            return
        node = child
    node[leaf] = value


def _format_errors(
    source: str,
    exc: ValidationError,
    root: yaml.Node | None,
    overrides: dict[str, Any],
    origins: dict[str, str],
) -> str:
    """One line per error: where the value came from, the field path, the reason, and, for
    a value the file ``source`` gave (``root``, its node tree), where the file wrote it."""
    lines = [f"{source}: {exc.error_count()} configuration error(s)"]
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        # pydantic locates a refused key as (..., mapping, key, "[key]").
        key = loc[-2:-1] if loc[-1:] == ("[key]",) else ()
        where = ".".join(str(part) for part in loc[: -2 if key else None]) or "(top level)"
        origin = _origin(where, source, overrides, origins, missing=error["type"] == "missing")
        value = error.get("input")
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        # A section's own checks get the whole section: the reason names what is wrong.
        got = (
            ""
            if key or (isinstance(value, dict) and error["type"] != "extra_forbidden")
            else f" (got {shown})"
        )
        named = f" (key {key[0]!r})" if key else ""
        in_file = origin == source or origin.startswith(f"{source} and ")
        at = _written_at(root, loc, error["type"] == "extra_forbidden") if in_file else ""
        lines.append(f"  {origin}: {where}{named}: {_reason(error)}{got}{at}")
    return "\n".join(lines)


def _written_at(root: yaml.Node | None, loc: tuple[int | str, ...], at_key: bool) -> str:
    """`` (line L, column C)``: the place the file wrote nearest to what the error at ``loc`` is
    about (``yaml_tree.node_at``): the value refused, or the alias that gave it or a section
    around it; the key of a key refused (``[key]`` in ``loc``) or unknown (``at_key``), or
    of a section or list refused as a whole (``policy:``, where its own checks failed); for
    a field the file did not write (a missing one: ``tls:``, without its ``key_file``), the
    key of the nearest section along ``loc`` it did write. Nothing for the top level (a
    check across sections), nor when the file wrote nothing along ``loc``. The caller asks
    only of a value the file gave, not one a flag or variable replaced."""
    parts = [part for part in loc if part != "[key]"]
    node = node_at(root, parts)
    if not parts or node is None or node is root:
        return ""
    if at_key or loc[-1:] == ("[key]",) or isinstance(node, yaml.CollectionNode):
        node = node_at(root, parts, key=True) or node
    return f" {line_and_column(node)}"


#: pydantic's wording of a wrong type, in the words of a YAML file.
_TYPE_REASONS = {
    "tuple_type": "expected a list",
    "list_type": "expected a list",
    "set_type": "expected a list",
    "frozen_set_type": "expected a list",
    "dict_type": "expected a mapping (key: value lines)",
    "model_type": "expected a mapping (key: value lines)",
    "model_attributes_type": "expected a mapping (key: value lines)",
    "path_type": "expected a file path",
}


#: What a number setting takes, by the unit its name ends in: the name says the unit.
_UNIT_NOUNS = {"_seconds": "a number of seconds", "_bytes": "a whole number of bytes"}
#: A number followed by letters, in one or more parts: ``2s``, ``10 ms``, ``64MiB``,
#: ``1h30m``; not ``0x10`` or ``1e6``, which end in digits.
_WITH_UNIT = re.compile(r"(?:\s*[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*[^\W\d_]+)+\s*")
#: A number written with thousands separators: ``268,435,456``, ``1,000``.
_GROUPED = re.compile(r"\s*[-+]?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]*)?\s*")


def _written_number(kind: str, loc: tuple[int | str, ...], text: str) -> str | None:
    """Why ``text`` is not the number a setting takes (``kind``: pydantic's error), where
    it is one as people write it: with thousands separators (``268,435,456``), or, for a
    setting whose name says the unit, with a unit (``2s``, ``64MiB``). Else ``None``."""
    unit = next((u for u in _UNIT_NOUNS if loc and str(loc[-1]).endswith(u)), None)
    whole = "a whole number" if kind == "int_parsing" else "a number"
    noun = _UNIT_NOUNS[unit] if unit is not None else whole
    if _GROUPED.fullmatch(text):
        return f"expected {noun}, written without separators: {text.replace(',', '').strip()}"
    if unit is not None and _WITH_UNIT.fullmatch(text):
        return f"expected {noun}, without a unit"
    return None


def _reason(error: ErrorDetails) -> str:
    """Why a value was refused, in a configuration file's words."""
    kind, loc = error["type"], error["loc"]
    if kind == "extra_forbidden":
        if loc == ("cases",):  # a golden-case file given as the configuration
            return (
                "unknown setting: this looks like a golden-case file; name it in the"
                " configuration's golden.cases_file instead"
            )
        return unknown_key(Config, loc, "setting")
    if kind in _TYPE_REASONS:
        return _TYPE_REASONS[kind]
    if kind in ("float_parsing", "int_parsing"):
        written = _written_number(kind, loc, str(error["input"]))
        if written is not None:
            return written
    if kind == "string_too_short" and error.get("ctx", {}).get("min_length") == 1:
        return "empty"  # a name, trimmed
    message = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message
