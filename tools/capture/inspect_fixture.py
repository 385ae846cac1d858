"""Print a fixture as an indented span tree, for checking what an instrumentation emitted.

``python -m tools.capture.inspect_fixture FILE [--values] [--events]``: one line per span
(kind, status, name, attribute keys); ``--values`` also prints attribute values (truncated),
``--events`` the span events with their attributes.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

from tools.capture.otlp import read_fixture

__all__ = ["render"]

_KINDS = {0: "UNSPEC", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_STATUS = {0: "", 1: " OK", 2: " ERROR"}


def _value(any_value: Any) -> str:
    field = any_value.WhichOneof("value")
    if field == "array_value":
        return "[" + ", ".join(_value(v) for v in any_value.array_value.values) + "]"
    return repr(getattr(any_value, field)) if field else "<empty>"


def render(path: Path, values: bool, events: bool, width: int = 160) -> list[str]:
    """The tree of ``path`` as lines (spans ordered by start time under their parent)."""
    spans = [
        (scope.scope.name, span)
        for request in read_fixture(path)
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    children: dict[bytes, list[tuple[str, Any]]] = defaultdict(list)
    for scope, span in spans:
        children[span.parent_span_id].append((scope, span))
    lines: list[str] = []

    def walk(parent: bytes, depth: int) -> None:
        for scope, span in sorted(children[parent], key=lambda item: item[1].start_time_unix_nano):
            pad = "  " * depth
            status = _STATUS[span.status.code] + (
                f"({span.status.message})" if span.status.message else ""
            )
            lines.append(f"{pad}- {span.name} [{_KINDS[span.kind]}{status}] scope={scope}")
            for attribute in span.attributes:
                text = f"{pad}    {attribute.key}"
                if values:
                    text += " = " + _value(attribute.value)
                lines.append(text[:width])
            for event in span.events if events else ():
                lines.append(f"{pad}    ! event {event.name}")
                for attribute in event.attributes:
                    lines.append(
                        f"{pad}        {attribute.key} = {_value(attribute.value)}"[:width]
                    )
            walk(span.span_id, depth + 1)

    walk(b"", 0)
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", type=Path)
    parser.add_argument("--values", action="store_true")
    parser.add_argument("--events", action="store_true")
    parser.add_argument("--width", type=int, default=160)
    args = parser.parse_args()
    print("\n".join(render(args.path, args.values, args.events, args.width)))
