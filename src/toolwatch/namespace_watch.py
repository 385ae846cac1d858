"""The server's watch for guarded tools called under a namespace, which the policy misses
(``NamespaceWatch``): logged once each and counted, until a reload.
"""

from __future__ import annotations

import logging

from toolwatch.names import namespaced
from toolwatch.sinks.prometheus import PrometheusMetrics

__all__ = ["NamespaceWatch"]

log = logging.getLogger("toolwatch")

#: Namespaced names reported at most, so that a producer inventing names cannot grow the set.
_MAX_NAMESPACED = 256


class NamespaceWatch:
    """Told each tool name the engine's normalizer works out (``NameNormalizer``): a name
    that is a guarded tool's in a namespace (``billing__issue_refund``, an MCP server's tool,
    while the policy names ``issue_refund``) escapes the policy without a sign, so each such
    name is logged once and counted (``toolwatch_namespaced_tool_names``, at most
    ``_MAX_NAMESPACED`` names) until a reload, whose normalizer works the names out again."""

    __slots__ = ("_metrics", "_names", "_tools")

    def __init__(self, tools: frozenset[str], metrics: PrometheusMetrics) -> None:
        self._tools = tools  # PolicySettings.guarded_tools()
        self._metrics = metrics
        self._names: dict[str, str] = {}  # name -> the guarded tool it is in a namespace

    def __call__(self, name: str) -> None:
        if name in self._names or len(self._names) >= _MAX_NAMESPACED:
            return
        tool = namespaced(name, self._tools)
        if tool is None:
            return
        self._names[name] = tool
        self._metrics.namespaced_tool_names(tool, sum(t == tool for t in self._names.values()))
        log.warning(
            "tool %r looks like the policy's %r in a namespace, and the policy does not apply"
            " to it: set policy.tool_prefix to a pattern that removes the namespace (or add"
            " an alias)",
            name[:128],
            tool,
        )

    def reload(self, tools: frozenset[str]) -> None:
        """A new configuration's guarded tools: what was seen is forgotten, and told again
        if it still escapes them."""
        for tool in set(self._names.values()):
            self._metrics.namespaced_tool_names(tool, 0)
        self._tools, self._names = tools, {}
