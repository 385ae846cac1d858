"""jsontext.loads: json.loads's value or error for any text, whether msgspec reads it or
json.loads has to."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolwatch.jsontext import loads

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


def outcome(text: str, parse: Any) -> str:
    """repr of the value (tells 1 from 1.0, keeps NaN comparable) or the error's type."""
    try:
        return repr(parse(text))
    except (ValueError, RecursionError) as error:
        return type(error).__name__


@given(values, st.booleans())
def test_json_text_reads_as_json_loads_reads_it(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert outcome(text, loads) == outcome(text, json.loads)


@given(st.text(alphabet=st.sampled_from('{}[],:"0123456789.eE+-\\ untrfalsNIiy'), max_size=40))
def test_any_text_reads_or_fails_as_json_loads(text: str) -> None:
    assert outcome(text, loads) == outcome(text, json.loads)


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
    assert outcome(text, loads) == outcome(text, json.loads)
