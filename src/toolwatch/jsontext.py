"""The JSON text spans carry (arguments, results, message lists), parsed on the hot path.

``loads`` is ``json.loads``: the same value for every text, or the same error. It asks
msgspec's decoder first, which reads the documents spans carry in a third to two thirds of
the time of the standard library's C scanner (``make bench-instructions``), with integers of
any size kept exact. What msgspec refuses and ``json`` reads (``NaN``, ``Infinity``, a
number beyond the float range, a lone surrogate), and what neither reads, takes
``json.loads``, so those values and every error are its own. ``tests/unit/test_jsontext.py``
holds the two to agreeing on any JSON value and any text.

orjson is as fast, but reads an integer beyond 64 bits as a float (an order number would
change value), and guarding against that took back most of the gain, so it is not used.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec

__all__ = ["loads"]

_DECODE: Callable[[str], Any] = msgspec.json.Decoder().decode


def loads(text: str) -> Any:
    """``json.loads(text)``: the same value, or the same ``ValueError`` / ``RecursionError``."""
    try:
        return _DECODE(text)
    except (ValueError, RecursionError):  # msgspec's errors are ValueErrors
        return json.loads(text)
