"""Hand-written OTLP/JSON requests, posted to a real server through a real HTTP client."""

from __future__ import annotations

import json
from typing import Any

from tests.integration.conftest import RunningServer
from tests.integration.test_real_instrumentation import post_json

TRACE = "5b8efff798038103d269b633813fc60c"
T0 = 1_796_000_000_000_000_000
MS = 1_000_000


def value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    return {"stringValue": v if isinstance(v, str) else json.dumps(v)}


def span(
    n: int, parent: int | None, name: str, start_ms: float, end_ms: float, **attrs: Any
) -> dict[str, Any]:
    """Span ``n`` under span ``parent``; attribute keys with ``__`` written as ``.``."""
    out: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": f"{n:016x}",
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(T0 + int(start_ms * MS)),
        "endTimeUnixNano": str(T0 + int(end_ms * MS)),
        "attributes": [{"key": k.replace("__", "."), "value": value(v)} for k, v in attrs.items()],
    }
    if parent is not None:
        out["parentSpanId"] = f"{parent:016x}"
    return out


def send(server: RunningServer, spans: list[dict[str, Any]], scope: str = "test") -> None:
    request = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "app"}}]
                },
                "scopeSpans": [{"scope": {"name": scope}, "spans": spans}],
            }
        ]
    }
    status, answer = post_json(server, json.dumps(request).encode())
    assert status == 200, answer
    assert int(answer.get("partialSuccess", {}).get("rejectedSpans", 0)) == 0, answer
