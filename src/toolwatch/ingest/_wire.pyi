# Types of the compiled OTLP scanner (src/toolwatch/ingest/_wire.c); see toolwatch.ingest.scan.
from collections.abc import Callable, Iterable
from typing import Any, overload

#: ``{message full name: {field number: (field name, wire kind)}}``: what the scanner knows.
SCHEMA: dict[str, dict[int, tuple[str, str]]]

def census(body: bytes) -> int: ...

_Sifted = tuple[str, tuple[int, int, int], bytes, int, tuple[int, ...], tuple[bytes, ...]]

@overload
def sift(body: bytes, consume: None = None) -> list[_Sifted] | str: ...
@overload
def sift(body: bytes, consume: Callable[[list[_Sifted]], object]) -> str | None: ...

class Plan:
    def __init__(
        self,
        span_keys: Iterable[str],
        prefixes: Iterable[str],
        resource_keys: Iterable[str],
        event_names: Iterable[str],
        event_keys: Iterable[str],
        max_value_bytes: int,
    ) -> None: ...
    def scan(self, body: bytes) -> tuple[list[dict[str, Any]], list[Any]] | None: ...
