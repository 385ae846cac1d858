"""The scripts' refund tools served over MCP (stdio), for agents that take their tools from an
MCP server: ``python -m tools.capture.mcp_server``.

With ``CAPTURE_MCP_SPANS`` set, the server is traced as OpenLLMetry traces one: the standalone
``fastmcp`` package (2.x, which its server instrumentation wraps) under ``McpInstrumentor``,
in ``.venv-capture-mcp-server`` (``requirements-mcp-server.txt``). The instrumentation joins
each request's trace from the ``traceparent`` the client's writes in the request's ``_meta``;
the spans finished so far are rewritten to that file after each one as one OTLP/JSON line
(the process may be ended at any point once the client is done), and ``Capture.write``
merges them into the run's fixture, a resource of their own (service ``capture-mcp-server``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools.capture import scripts

#: The environment variable naming the file the traced server writes its spans to.
SPANS_FILE = "CAPTURE_MCP_SPANS"


def _traced_server(spans_file: Path) -> Any:
    from opentelemetry.instrumentation.mcp import McpInstrumentor  # noqa: PLC0415
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from tools.capture.otlp import to_json_line  # noqa: PLC0415

    class Rewrite(SpanExporter):
        def __init__(self) -> None:
            self.spans: list[ReadableSpan] = []

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            self.spans.extend(spans)
            written = spans_file.with_suffix(".tmp")  # then renamed: never read half written
            written.write_text(to_json_line(self.spans) + "\n", encoding="utf-8")
            written.replace(spans_file)
            return SpanExportResult.SUCCESS

    provider = TracerProvider(resource=Resource.create({"service.name": "capture-mcp-server"}))
    provider.add_span_processor(SimpleSpanProcessor(Rewrite()))
    McpInstrumentor().instrument(tracer_provider=provider)
    # Imported once instrumented: fastmcp binds the stdio transport the instrumentation wraps.
    from fastmcp import FastMCP  # noqa: PLC0415

    return FastMCP("orders")


def _server() -> Any:
    spans_file = os.environ.get(SPANS_FILE)
    if spans_file:
        return _traced_server(Path(spans_file))
    try:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP  # noqa: PLC0415

        return FastMCP("orders")
    except ModuleNotFoundError:  # mcp 2.x renamed it (the Logfire capture environment has 2.x)
        from mcp.server.mcpserver import MCPServer  # noqa: PLC0415

        return MCPServer("orders")


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id."""
    return scripts.lookup_order(order_id)


def issue_refund(order_id: str, amount_usd: float) -> dict[str, Any]:
    """Refund an amount in USD for an order."""
    return scripts.issue_refund(order_id, amount_usd)


def charge_card(order_id: str, amount_usd: float) -> dict[str, Any]:
    """Charge the customer's card for an order."""
    return scripts.charge_card(order_id, amount_usd)  # raises: the server answers isError


if __name__ == "__main__":
    server = _server()
    for tool in (lookup_order, issue_refund, charge_card):
        server.tool()(tool)
    server.run("stdio")
