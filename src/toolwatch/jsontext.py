"""The JSON text spans carry (arguments, results, message lists), parsed on the hot path.

``loads`` is ``json.loads``, with a shorter path for the usual compact document: the
standard library's C scanner is called directly, which skips ``json.loads``'s argument
handling, its two whitespace matches and ``raw_decode``'s interpreted frame (a 22-character
document in a quarter of ``json.loads``'s time on the benchmark machine). Text the scanner
does not read whole (surrounding whitespace, trailing data, not JSON) takes ``json.loads``,
so every value and every error is its own.

orjson parses two to three times as fast, but reads an integer beyond 64 bits as a float
(an order number would change value). Guarding against that (a scan of the text for long
digit runs, or a walk of the value) took back most of the gain on the benchmark's short
argument documents, so it is not used.
"""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Callable
from typing import Any

__all__ = ["loads"]

# ``JSONDecoder.raw_decode`` without its frame: (value, end), or StopIteration at an error.
# The scanner reads its settings from a decoder (typeshed types the argument as a scanner).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]
)


def loads(text: str) -> Any:
    """``json.loads(text)``: the same value, or the same ``ValueError`` / ``RecursionError``."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)
