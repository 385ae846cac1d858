"""jsontext.loads: json.loads's value or error for any text, whether msgspec reads it or
json.loads has to; but a non-finite number is kept as its text and a lone surrogate reads as
U+FFFD (``reference``)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolwatch import jsontext
from toolwatch.jsontext import compact_encoder, loads

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),  # NaN and the infinities included: json writes and reads them
    st.text(),  # lone surrogates included
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def reference(text: str) -> Any:
    """json.loads, its non-finite numbers as their text, its lone surrogates as U+FFFD."""
    value = json.loads(text, parse_constant=str, parse_float=_finite)
    return json.loads(
        json.dumps(value, ensure_ascii=False)
        .encode("utf-8", "surrogatepass")
        .decode("utf-8", "surrogatepass")
        .encode("utf-16", "surrogatepass")
        .decode("utf-16", "replace")
    )


def _finite(text: str) -> float | str:
    number = float(text)
    return number if math.isfinite(number) else text


def outcome(text: str, parse: Any) -> str:
    """repr of the value (tells 1 from 1.0, keeps NaN comparable) or the error's type."""
    try:
        return repr(parse(text))
    except (ValueError, RecursionError) as error:
        return type(error).__name__


@given(values, st.booleans())
def test_json_text_reads_as_json_loads_reads_it(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert outcome(text, loads) == outcome(text, reference)


@given(st.text(alphabet=st.sampled_from('{}[],:"0123456789.eE+-\\ untrfalsNIiy'), max_size=40))
def test_any_text_reads_or_fails_as_json_loads(text: str) -> None:
    assert outcome(text, loads) == outcome(text, reference)


@pytest.mark.parametrize(
    "text",
    [
        ' {"a": 1}',  # surrounding whitespace: the scanner does not start at a value
        '{"a": 1} ',
        '{"a": 1} {"b": 2}',  # trailing data
        "",
        "nul",
        '{"order_id": 123456789012345678901234567890}',
        "[NaN, Infinity, -Infinity]",
        "1e400",
        "1.7976931348623159e308",  # rounds beyond the largest float: inf for json
        "2.4703282292062328e-324",  # rounds up to the smallest subnormal
        "1.00000000000000011102230246251565404236316680908203125",  # a halfway case
        "9" * 4300,  # the most digits Python reads as an int
        "9" * 4301,  # one more: json refuses it
        '"tab\there"',  # a raw control character in a string
        '"\\ud800"',
        "[" * 5000 + "]" * 5000,
        '{"a": 1, "a": 2}',
    ],
)
def test_the_edges_of_both_parsers_read_as_json_loads_reads_them(text: str) -> None:
    assert outcome(text, loads) == outcome(text, reference)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("[NaN, Infinity, -Infinity]", ["NaN", "Infinity", "-Infinity"]),
        ('{"amount_usd": 1e999, "n": -1e400}', {"amount_usd": "1e999", "n": "-1e400"}),
        ('{"tool\\ud800": "a\\udc00b"}', {"tool\ufffd": "a\ufffdb"}),
        ('["\\ud83d\\ude00", "\\ud83d"]', ["\U0001f600", "\ufffd"]),  # a pair stays one
    ],
)
def test_what_no_json_reader_could_take_back_is_mended(text: str, value: Any) -> None:
    """Written out again, the value is JSON and UTF-8: the findings log, stream and dump."""
    read = loads(text)
    assert read == value
    compact_encoder(str)(read).encode("utf-8")
    json.dumps(read, allow_nan=False)


class _Circular(list[Any]):
    """A list that holds itself, once built."""


def _circular() -> list[Any]:
    value: list[Any] = _Circular()
    value.append(value)
    return value


def _default(value: Any) -> Any:
    """A ``default`` as the findings log has one: some types become JSON, others fail."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, frozenset):
        return sorted(value, key=repr)
    raise TypeError(f"not JSON: {type(value).__name__}")


encodable = st.recursive(
    scalars
    | st.binary(max_size=4)
    | st.frozensets(st.integers(), max_size=3)
    | st.complex_numbers(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(
            st.one_of(st.text(), st.integers(), st.floats(), st.booleans(), st.none()),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


def written(encode: Any, value: Any) -> str:
    """The text, or the error's type and message."""
    try:
        return "text " + encode(value)
    except (TypeError, ValueError) as error:
        return f"{type(error).__name__} {error}"


@given(st.one_of(encodable, st.builds(_circular)), st.booleans())
def test_compact_encoder_writes_what_json_dumps_writes(value: Any, ascii_only: bool) -> None:
    expected = written(
        lambda v: json.dumps(v, ensure_ascii=ascii_only, separators=(",", ":"), default=_default),
        value,
    )
    assert written(compact_encoder(_default, ascii_only=ascii_only), value) == expected


def test_a_failed_encoding_leaves_no_trace_in_the_next() -> None:
    encode = compact_encoder(_default)
    shared = ["x"]
    with pytest.raises(TypeError):
        encode([shared, complex(1, 2)])  # fails inside, after entering ``shared``
    assert encode([shared, shared]) == '[["x"],["x"]]'


def test_without_the_c_encoder_the_json_encoder_writes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsontext, "_C_MAKE_ENCODER", None)
    encode = compact_encoder(_default, ascii_only=True)
    assert type(encode).__name__ == "method"  # JSONEncoder.encode, bound
    assert encode({"é": [b"\x01", frozenset({2, 1})]}) == '{"\\u00e9":["01",[1,2]]}'


numbers = (
    st.integers(min_value=-(2**70), max_value=2**70)
    | st.integers(min_value=-(2**1100), max_value=2**1100)
    | st.sampled_from([10**21, 10**21 - 1, 2**80, 2**80 + 1])
    | st.floats(allow_nan=False)
)


@given(numbers, numbers)
def test_numbers_have_one_decimal_text_each(a: float, b: float) -> None:
    """Equal numbers (12 and 12.0, 2**64 and 2.0**64) have one text; unequal ones, not
    (2**64 + 1 is no 2.0**64); the infinities have none (no JSON number)."""
    text_a, text_b = jsontext.decimal_text(a), jsontext.decimal_text(b)

    def infinite(number: float) -> bool:
        return isinstance(number, float) and math.isinf(number)

    if infinite(a) or infinite(b):
        assert (text_a is None) == infinite(a)
        return
    assert (text_a == text_b) == (a == b)
    assert text_a is not None and json.loads(text_a) == a  # JSON that reads back as it


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (12, "12"),
        (12.0, "12"),
        (-0.0, "0"),
        (12.5, "12.5"),
        (1e20, "1" + "0" * 20),
        (10**21 - 1, "9" * 21),
        (10**21, "1e+21"),  # from 1e21 on, a number a float holds in its exponent form
        (1e21, "1e+21"),
        (-1e21, "-1e+21"),
        (1e308, "1e+308"),  # not its 309 digits
        (2**80, "1.2089258196146292e+24"),
        (2**80 + 1, str(2**80 + 1)),  # no float holds it: its digits, exact
        (10**400, str(10**400)),  # beyond every float
        (True, None),
        ("12", None),
        (None, None),
        (math.nan, None),
    ],
)
def test_decimal_text(value: Any, text: str | None) -> None:
    assert jsontext.decimal_text(value) == text
