"""The scripts' refund tools served over MCP (stdio), for agents that take their tools from an
MCP server: ``python -m tools.capture.mcp_server``."""

from __future__ import annotations

from typing import Any

from tools.capture import scripts

try:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server
except ModuleNotFoundError:  # mcp 2.x renamed it (the Logfire capture environment has 2.x)
    from mcp.server.mcpserver import MCPServer as Server

server = Server("orders")


@server.tool()
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id."""
    return scripts.lookup_order(order_id)


@server.tool()
def issue_refund(order_id: str, amount_usd: float) -> dict[str, Any]:
    """Refund an amount in USD for an order."""
    return scripts.issue_refund(order_id, amount_usd)


@server.tool()
def charge_card(order_id: str, amount_usd: float) -> dict[str, Any]:
    """Charge the customer's card for an order."""
    return scripts.charge_card(order_id, amount_usd)  # raises: the server answers isError


if __name__ == "__main__":
    server.run("stdio")
