"""Field-value strategies: how similar an actual argument value is to a reference value, in
[0, 1]. Values are decoded JSON (dict, list, str, int, float, bool, None). Values ``exact``
matches (equal as JSON values, ``5`` and ``5.0``; a reference number sent as its text,
``5`` and ``"5"``) score 1 under every strategy.

- ``exact``: 1 if the values are equal as JSON values (``1 == 1.0``, ``true != 1``, NaN equals
  NaN, dict key order ignored, list order kept), or if where the reference has a number the
  actual value has its decimal text (``jsontext.decimal_text``: ``123`` and ``"123"``,
  ``12.0`` and ``"12"``; not ``"0123"``, ``" 123"`` or ``"123.0"``), at any depth: tools
  take a number sent as text, and models often send one so. Where the reference has text and
  the actual value the number it spells (``"1042"`` and ``1042``), only the type differs:
  ``TYPE_ONLY`` (0.5), a schema that wants text may refuse the number, but it is the same
  value, and a one-field call so scored is a ``high`` finding, never ``critical``. Else 0.
  Strings are not trimmed or folded.
- ``subset``: every part of the reference is in the actual value. Objects: the mean over the
  reference's keys (a missing key scores 0, extra actual keys are ignored), recursively. Lists:
  the share of reference items found among distinct actual items (order ignored; an item
  found but for ``TYPE_ONLY`` differences counts half). Anything else: ``exact``. An empty
  reference object or list is contained in any object or list.
- ``numeric``: ``1 - relative_error / tolerance``, floored at 0, with ``relative_error =
  |actual - reference| / |reference|``; numeric strings (``"12.50"``) count as numbers, a
  reference of 0 needs an exact 0. Values that are not numbers fall back to ``exact``, and
  so does a ``written`` reference (a golden case's, typed by a person) that is text:
  ``"1042"`` is an id, and one off it scored 0.999.
- ``contains``: 1 if the reference string is a substring of the actual string, both
  ``folded`` (full-width forms as ASCII, NFC, case-folded: ``café`` typed composed is found
  in text sent decomposed), else 0; non-strings fall back to ``exact``.
- ``fuzzy``: 1 for values ``exact`` matches, else the similarity of the ``folded`` texts
  (non-strings as canonical JSON, where ``5`` and ``5.0`` differ), each cut to
  ``FUZZY_MAX_CHARS``, or ``exact``'s score if higher (``TYPE_ONLY``). Similarity is
  ``2 * LCS / (len(a) + len(b))``, ``LCS`` the length of the longest common subsequence:
  of the characters below ``FUZZY_LONG_CHARS`` on both sides, else of the words and
  punctuation marks (``_TOKEN``: each character of a script written without spaces is a
  token of its own; the first ``FUZZY_MAX_TOKENS`` of each text), so one word reworded in
  a paragraph scores about ``1 - 1/words``. (difflib's ratio, used before, junks every
  common character of a 200-character text, so a paragraph differing by one word scored as
  low as 0.17; without its ``autojunk`` it is cubic on repetitive input, 45 ms at 199
  characters and seconds at 4,096. The subsequence is bit-parallel: under 2 ms at 1,024
  tokens a side, whatever the text.)
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Final

from toolwatch.evaluation.matching import max_weight_assignment
from toolwatch.jsontext import decimal_text

__all__ = [
    "FUZZY_LONG_CHARS",
    "FUZZY_MAX_CHARS",
    "FUZZY_MAX_TOKENS",
    "STRATEGIES",
    "TYPE_ONLY",
    "as_number",
    "exact",
    "folded",
    "same_value",
    "score_value",
]

STRATEGIES: Final = frozenset({"exact", "subset", "numeric", "contains", "fuzzy"})
FUZZY_MAX_CHARS: Final = 4096
#: ``fuzzy`` compares texts this long or longer (either side) by words, shorter by characters.
FUZZY_LONG_CHARS: Final = 200
#: ``fuzzy`` compares at most this many words and punctuation marks of each long text: the
#: bound on its cost (4,096 characters of prose are about 800).
FUZZY_MAX_TOKENS: Final = 1024
#: A long text's tokens: each character of a script written without spaces (CJK ideographs,
#: kana, Thai, Lao, Khmer, Myanmar), where a paragraph is one "word"; words elsewhere (Korean
#: is written with spaces); each punctuation mark.
_TOKEN: Final = re.compile(
    "[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
    "\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f"
    "\u0e00-\u0eff\u1780-\u17ff\u1000-\u109f]"
    r"|\w+|[^\w\s]"
)
#: Full-width ASCII forms (U+FF01 to U+FF5E) and the ideographic space, as ASCII.
_FULL_WIDTH: Final = {0xFF01 + i: 0x21 + i for i in range(0x5E)} | {0x3000: 0x20}
#: More than 30 non-ASCII characters in a row that are neither word characters nor
#: whitespace: where a run of combining marks (none of them is either) can be, to look in
#: (``_mark_run``). 30 is the Unicode stream-safe text format's bound (UAX #15), which prose
#: stays within.
_NOT_WORDS: Final = re.compile(r"[^\w\s\x00-\x7f]{31,}")
_MARKS_SAFE: Final = 30
_PAIRED_ITEMS: Final = 32  # lists paired optimally up to this many items a side
#: ``exact``'s score for a reference's text sent as the number it spells: the type alone
#: differs (as a field on one side only scores 0.5: half right).
TYPE_ONLY: Final = 0.5


def score_value(
    strategy: str, reference: Any, actual: Any, tolerance: float, written: bool = False
) -> float:
    """How well ``actual`` matches ``reference`` under ``strategy``, in [0, 1]; ``written``:
    the reference is a golden case's (see ``numeric``). Raises ``ValueError`` for an unknown
    strategy name (a golden case's ``match`` is not validated by the settings)."""
    if strategy == "exact":
        return exact(reference, actual)
    if strategy == "subset":
        return _subset(reference, actual)
    if strategy == "numeric":
        return _numeric(reference, actual, tolerance, written)
    if strategy == "contains":
        return _contains(reference, actual)
    if strategy == "fuzzy":
        return _fuzzy(reference, actual)
    raise ValueError(f"unknown argument strategy {strategy!r}; use one of {sorted(STRATEGIES)}")


def exact(reference: Any, actual: Any) -> float:
    """The ``exact`` score: 1, ``TYPE_ONLY`` or 0 (see the module docstring). Objects and
    arrays score their worst member: equal but for types is ``TYPE_ONLY``, a member that
    differs is 0. Exact types first: what parsers make, without the ABC checks of
    ``same_value``."""
    kind = type(reference)
    if kind is str:
        if type(actual) is str:
            return 1.0 if reference == actual else 0.0
        spelled = decimal_text(actual)
        return TYPE_ONLY if spelled is not None and spelled == reference else 0.0
    if type(actual) is str:
        spelled = decimal_text(reference)
        return 1.0 if spelled is not None and spelled == actual else 0.0
    if kind is int and type(actual) is int:
        return 1.0 if reference == actual else 0.0
    if (kind is int or kind is float) and (type(actual) is int or type(actual) is float):
        if reference == actual:
            return 1.0
        # NaN is NaN; isnan only on floats: an int past the float range overflows it.
        both_nan = kind is float and type(actual) is float and math.isnan(reference)
        return 1.0 if both_nan and math.isnan(actual) else 0.0
    if isinstance(reference, Mapping) and isinstance(actual, Mapping):
        if reference.keys() != actual.keys():
            return 0.0
        return _worst([exact(reference[key], actual[key]) for key in reference])
    if _is_list(reference) and _is_list(actual):
        if len(reference) != len(actual):
            return 0.0
        return _worst([exact(reference[i], actual[i]) for i in range(len(reference))])
    return 1.0 if same_value(reference, actual) else 0.0


def _worst(scores: list[float]) -> float:
    return min(scores) if scores else 1.0


def same_value(a: Any, b: Any) -> bool:
    """JSON-value equality: booleans are not numbers, NaN equals NaN, lists keep order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        # isnan only on floats: an int past the float range (JSON keeps it exact) overflows.
        both_float = isinstance(a, float) and isinstance(b, float)
        return a == b or (both_float and math.isnan(a) and math.isnan(b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if _is_list(a) and _is_list(b):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def as_number(value: Any) -> float | None:
    """``value`` as a float: ints and floats (not booleans) and strings that parse as a finite
    number. ``None`` otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an int past the float range: not comparable as a number
            return None
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _numeric(reference: Any, actual: Any, tolerance: float, written: bool) -> float:
    """Closeness of two numbers, numeric text read as a number (a model that sent
    ``"49.99"``, on either side of a shadow pair), but for a ``written`` reference's text:
    ``"1042"`` in a golden case is an order id, and ``"1043"`` one off it scored 0.999.
    (Configured on an id field, ``numeric`` scores ids one apart as near-equal: name the
    numeric fields, ``Config.warnings`` says so of a numeric default.)"""
    if written and isinstance(reference, str):
        return exact(reference, actual)
    expected, got = as_number(reference), as_number(actual)
    if expected is None or got is None:
        return exact(reference, actual)
    if expected == got or (math.isnan(expected) and math.isnan(got)):
        return 1.0
    if expected == 0.0 or not (math.isfinite(expected) and math.isfinite(got)):
        return 0.0
    error = abs(got - expected) / abs(expected)
    return max(0.0, 1.0 - error / tolerance)


def folded(text: str) -> str:
    """``text`` as ``contains`` and ``fuzzy`` compare it: full-width ASCII forms as ASCII
    (``U+FF21`` as ``A``, as ``as_number`` already reads full-width digits), NFC-composed
    (an accent typed composed or sent decomposed alike) and case-folded. Linear, whatever the
    text: a run of more than 30 combining marks in a row (``_mark_run``, past what the
    Unicode stream-safe format allows, on which CPython's normalization is quadratic: seconds
    for 20,000) leaves the text uncomposed; symbols, emoji and box drawing do not. Not NFKC:
    its expansions (U+FDFA is 18 characters) cost 50 ms on 4,096 characters."""
    if text.isascii():
        return text.casefold()
    text = text.translate(_FULL_WIDTH)
    if not _mark_run(text):
        text = unicodedata.normalize("NFC", text)
    return text.casefold()


def _mark_run(text: str) -> bool:
    """Whether ``text`` holds more than ``_MARKS_SAFE`` characters in a row of nonzero
    canonical combining class: those NFC reorders, by insertion sort. Linear: only runs
    ``_NOT_WORDS`` finds are looked at, each window of 31 read from its end, so a character
    that is no mark skips every window holding it."""
    for run in _NOT_WORDS.finditer(text):
        start, end = run.span()
        while start + _MARKS_SAFE < end:
            last = start + _MARKS_SAFE
            while last >= start and unicodedata.combining(text[last]):
                last -= 1
            if last < start:
                return True
            start = last + 1
    return False


def _contains(reference: Any, actual: Any) -> float:
    if isinstance(reference, str) and isinstance(actual, str):
        return 1.0 if folded(reference) in folded(actual) else 0.0
    return exact(reference, actual)


def _fuzzy(reference: Any, actual: Any) -> float:
    agreement = exact(reference, actual)
    if agreement == 1.0:  # 5 and 5.0: equal values, though not equal text
        return 1.0
    # Cut again once folded: case folding writes some characters as several.
    left = folded(_text(reference)[:FUZZY_MAX_CHARS])[:FUZZY_MAX_CHARS]
    right = folded(_text(actual)[:FUZZY_MAX_CHARS])[:FUZZY_MAX_CHARS]
    if left == right:
        return 1.0
    if len(left) < FUZZY_LONG_CHARS and len(right) < FUZZY_LONG_CHARS:
        similarity = 2.0 * _common_length(left, right) / (len(left) + len(right))
    else:
        a = _TOKEN.findall(left)[:FUZZY_MAX_TOKENS]
        b = _TOKEN.findall(right)[:FUZZY_MAX_TOKENS]
        similarity = 2.0 * _common_length(a, b) / (len(a) + len(b)) if a or b else 1.0
    # Never below exact: the text of 1e+53 is not much like its 54 digits.
    return max(agreement, similarity)


def _common_length(a: Sequence[str], b: Sequence[str]) -> int:
    """The length of the longest common subsequence of ``a`` and ``b``, bit-parallel
    (Hyyrö, "Bit-parallel LCS-length computation revisited", 2004): bit ``i`` of ``row``
    stands for ``b[i]``; each item of ``a`` costs a few operations on ``len(b)``-bit ints,
    whatever the items are."""
    masks: dict[str, int] = {}
    bit = 1
    for item in b:
        masks[item] = masks.get(item, 0) | bit
        bit <<= 1
    full = bit - 1
    row = full
    for item in a:
        match = masks.get(item, 0) & row
        if match:
            row = ((row + match) | (row - match)) & full
    return len(b) - row.bit_count()


def _subset(reference: Any, actual: Any, lenient: bool = False) -> float:
    """``subset``'s score; ``lenient``: a ``TYPE_ONLY`` difference counts as none (to tell
    a list item found but for types from one half found)."""
    if isinstance(reference, Mapping) and isinstance(actual, Mapping):
        if not reference:
            return 1.0
        total = 0.0
        for key, value in reference.items():
            total += _subset(value, actual[key], lenient) if key in actual else 0.0
        return total / len(reference)
    if _is_list(reference) and _is_list(actual):
        return _list_subset(reference, actual, lenient)
    score = exact(reference, actual)
    return 1.0 if lenient and score > 0.0 else score


def _list_subset(reference: Sequence[Any], actual: Sequence[Any], lenient: bool) -> float:
    """The share of reference items fully found among distinct actual items, one found but
    for ``TYPE_ONLY`` differences counting half: the most that can be paired (an optimal
    pairing up to ``_PAIRED_ITEMS`` items a side; greedy, in order, beyond, where a hostile
    list of thousands would make the pairing itself the cost)."""
    if not reference:
        return 1.0
    if not actual:
        return 0.0
    if len(reference) <= _PAIRED_ITEMS and len(actual) <= _PAIRED_ITEMS:
        fits = [[_fit(item, a, lenient) for a in actual] for item in reference]
        found = sum(fits[r][c] for r, c in max_weight_assignment(fits))
        return found / (2 * len(reference))
    unused = list(actual)
    found = 0
    for item in reference:
        best, index = 0, -1
        for i, a in enumerate(unused):
            fit = _fit(item, a, lenient)
            if fit > best:
                best, index = fit, i
                if fit == 2:
                    break
        if best:
            found += best
            del unused[index]
    return found / (2 * len(reference))


def _fit(item: Any, actual: Any, lenient: bool) -> int:
    """How a reference list item is found in an actual item: 2 fully, 1 but for
    ``TYPE_ONLY`` differences, else 0 (a partial match is no match)."""
    score = _subset(item, actual, lenient)
    if score == 1.0:
        return 2
    # An item found but for types scores at least TYPE_ONLY: no second look below it.
    if not lenient and score >= TYPE_ONLY and _subset(item, actual, True) == 1.0:
        return 1
    return 0


def _is_list(value: Any) -> bool:
    return isinstance(value, list | tuple)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)
