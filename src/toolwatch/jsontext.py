"""The JSON text spans carry (arguments, results, message lists), parsed on the hot path.

``loads`` is ``json.loads``: the same value for every text, or the same error, but for what
no JSON reader downstream could take back. It asks msgspec's decoder first, which reads the
documents spans carry in a third to two thirds of the time of the standard library's C
scanner (``make bench-instructions``), with integers of any size kept exact. What msgspec
refuses and ``json`` reads, and what neither reads, takes ``json.loads``, so every error is
its own. Of what only ``json`` reads, two kinds of value are mended, as they would otherwise
reach the findings log, the stream, the ToolTrace dump and metric labels: ``NaN``,
``Infinity`` and a number beyond the float range (no JSON: RFC 8259 has no such numbers)
are kept as their text (``"NaN"``, ``"1e999"``), and a lone surrogate escape (``"\\ud800"``:
valid JSON, no Unicode character) reads as U+FFFD; a string holding one could be written
nowhere as UTF-8 (a tool name holding one failed every ``/metrics`` scrape).
``tests/unit/test_jsontext.py`` holds the two to agreeing on any JSON value and any text.

orjson is as fast, but reads an integer beyond 64 bits as a float (an order number would
change value), and guarding against that took back most of the gain, so it is not used.

``compact_encoder`` is ``json.dumps`` with compact separators, for the findings log and the
ToolTrace dump: the same text for every value, or the same error. ``json.dumps`` with any
option builds a ``JSONEncoder`` and runs its Python ``encode`` and ``iterencode`` on every
call before the C encoder they set up starts; the encoder made here calls that C encoder
with the settings they would give it (with its timestamps remembered, the findings log went from
2,299 to 1,781 instructions per span of the benchmark, ``make bench-instructions``). Not msgspec's
encoder: it writes ``bytes`` as base64 and sets in their own order, never calling ``default``
for them, and refuses integers beyond 64 bits.

``held_size`` is what a parsed value holds in memory, on the safe side: parsed JSON can hold
far more than its text (``[{},{},...]``: about 70 bytes of objects per 3 characters), and the
memory bounds that hold parsed values count them with it (the buffer, the shadow joiner).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

__all__ = [
    "compact_encoder",
    "decimal_text",
    "held_size",
    "loads",
    "loads_mended",
    "text_size",
    "writable_text",
]

_DECODE: Final[Callable[[str], Any]] = msgspec.json.Decoder().decode
# The standard library's C encoder factory (``None`` without the ``_json`` accelerator);
# undocumented, so looked up with a fallback, and held to ``json.dumps`` by the tests.
_C_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)


def loads(text: str) -> Any:
    """``json.loads(text)``: the same value, or the same ``ValueError`` / ``RecursionError``;
    a non-finite number kept as its text, a lone surrogate read as U+FFFD."""
    try:
        return _DECODE(text)
    except (ValueError, RecursionError):  # msgspec's errors are ValueErrors
        value = json.loads(text, parse_constant=_number_text, parse_float=_finite_float)
        return _mended(value) if _SURROGATE_ESCAPE.search(text) is not None else value


def loads_mended(text: str, parse_int: Callable[[str], Any]) -> Any:
    """``json.loads(text, parse_int=parse_int)`` with the numbers ``loads`` mends mended (a
    non-finite number kept as its text), for a reader that parses integers its own way."""
    return json.loads(
        text, parse_int=parse_int, parse_constant=_number_text, parse_float=_finite_float
    )


def _number_text(text: str) -> str:
    return text  # NaN, Infinity, -Infinity


def _finite_float(text: str) -> float | str:
    number = float(text)
    return number if math.isfinite(number) else text  # beyond the float range: 1e999


#: A ``\uD800``-``\uDFFF`` escape: a lone surrogate when msgspec refused the text.
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")


def _mended(value: Any) -> Any:
    """``value`` with each lone surrogate in its strings (keys too) read as U+FFFD."""
    kind = type(value)
    if kind is str:
        return writable_text(value)
    if kind is list:
        items: list[Any] = value
        return [_mended(item) for item in items]
    if kind is dict:
        mapping: dict[str, Any] = value
        return {writable_text(key): _mended(item) for key, item in mapping.items()}
    return value


def writable_text(text: str) -> str:
    """``text`` with each lone surrogate (no Unicode character: nothing can write it as UTF-8)
    read as U+FFFD; ``text`` itself when it has none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 joins a high and a low surrogate into their character and has no place
        # for a lone one: one U+FFFD each.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def decimal_text(value: Any) -> str | None:
    """The one decimal text of a JSON number's value, so that numbers equal as JSON values
    have the same text: an integer's digits (exact); an integral float's as the integer it
    equals (``12.0``: ``"12"``); another finite float's shortest round-trip text (``12.5``:
    ``"12.5"``). From ``1e21`` on (where JavaScript's ``JSON.stringify`` does too), a number
    a float holds exactly is written in the float's exponent form, an integer equal to it
    too (``1e+21``): ``1e308`` is 6 characters, not its 309 digits (an argument of such
    numbers made keys fifty times its size). ``None`` for anything else: a boolean (no
    number in JSON), a non-finite float, text."""
    kind = type(value)
    if kind is int:
        integer: int = value
        if -_EXPONENT_FROM < integer < _EXPONENT_FROM:
            return str(integer)
        try:
            near = float(integer)
        except OverflowError:  # beyond every float: its digits, which no float equals
            return str(integer)
        return repr(near) if int(near) == integer else str(integer)
    if kind is float:
        number: float = value
        if not math.isfinite(number):
            return None
        if number.is_integer() and -_EXPONENT_FROM < number < _EXPONENT_FROM:
            return str(int(number))
        return repr(number)
    return None


#: Where ``decimal_text`` writes numbers in exponent form.
_EXPONENT_FROM: Final = 10**21


def compact_encoder(
    default: Callable[[Any], Any], *, ascii_only: bool = False
) -> Callable[[Any], str]:
    """``lambda value: json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"),
    default=default)``, without building an encoder per call."""
    if _C_MAKE_ENCODER is None:
        options = {"ensure_ascii": ascii_only, "separators": (",", ":"), "default": default}
        return json.JSONEncoder(**options).encode  # type: ignore[arg-type]
    return _CompactEncoder(default, ascii_only).encode


class _CompactEncoder:
    """What ``JSONEncoder.encode`` does for ``json.dumps``'s one-shot call, in one step."""

    __slots__ = ("_default", "_escape")

    def __init__(self, default: Callable[[Any], Any], ascii_only: bool) -> None:
        self._default = default
        self._escape: Callable[[str], str] = (
            json.encoder.encode_basestring_ascii if ascii_only else json.encoder.encode_basestring
        )

    def encode(self, value: Any) -> str:
        if isinstance(value, str):
            return self._escape(value)
        # A new markers dict per call, as json.dumps's check_circular gives: one left holding
        # ids by a failed call would report a later value as circular.
        encode = _C_MAKE_ENCODER(
            {}, self._default, self._escape, None, ":", ",", False, False, True
        )
        return "".join(encode(value, 0))


def text_size(text: str) -> int:
    """The bytes of a text's characters: one each for ASCII, up to four for other text (as
    CPython holds it: CJK text takes two a character, emoji four). Asked of every text: counting
    a short one at a byte a character without asking held parsed arguments in Chinese at 1.4
    times their count, in emoji at 2.4."""
    return len(text) if _IS_ASCII(text) else sys.getsizeof(text) - _STR_BYTES


#: ``str.isascii`` itself: called on a text, no method is looked up (compiled code has no
#: primitive for it, and looked ``isascii`` up on every text).
_IS_ASCII: Final[Callable[[str], bool]] = str.isascii


#: What CPython spends on a parsed JSON value besides its characters (``held_size``):
#: measured ``sys.getsizeof`` of CPython 3.11, rounded up (a list's slack as it grows).
_STR_BYTES: Final = 49
_DICT_BYTES: Final = 64
_ENTRY_BYTES: Final = 48
_LIST_BYTES: Final = 56
_SLOT_BYTES: Final = 9
_NUMBER_BYTES: Final = 32


def held_size(value: Any) -> int:
    """Rough bytes CPython holds for a parsed JSON (or AnyValue) value and what it holds.

    Exact types first: what parsers make. ``isinstance`` with an ABC is a method lookup in
    compiled code, about a thousand instructions, on every value of every span."""
    kind = type(value)
    if kind is str:
        text: str = value
        return _STR_BYTES + text_size(text)
    if kind is dict:
        mapping: dict[Any, Any] = value  # typed: iterated as a dict, not a generic object
        size = _DICT_BYTES
        for key, item in mapping.items():
            size += _ENTRY_BYTES + _STR_BYTES + text_size(key) + held_size(item)  # keys too
        return size
    if kind is list:
        items: list[Any] = value
        size = _LIST_BYTES
        for item in items:
            size += _SLOT_BYTES + held_size(item)
        return size
    if value is None or kind is bool:
        return 0
    if kind is int or kind is float:
        return _NUMBER_BYTES
    if isinstance(value, Mapping):
        return _DICT_BYTES + sum(
            _ENTRY_BYTES + held_size(k) + held_size(v) for k, v in value.items()
        )
    if isinstance(value, list | tuple):
        return _LIST_BYTES + sum(_SLOT_BYTES + held_size(item) for item in value)
    return _NUMBER_BYTES
