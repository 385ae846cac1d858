"""``python -m bench.shapes``: how the cost per span grows with a trace's size, shape by shape.

A trace is rebuilt and evaluated in one go on the server's event loop, so a shape whose cost
grows faster than its span count stalls every other trace and request while it is
evaluated: before ``Successes`` (``evaluation.base``), a chain of 5,000 identical calls each
nested in the one before held the loop for 157 s. This builds each shape at ``N`` and ``4N``
spans (``N``: ``--spans``), times the timeline and the evaluators (the example policy: its
dangerous and verification tools), and reports microseconds per span at both sizes and their
ratio: about 1 when the cost grows with the spans, 4 when it grows with their square. In
process, no server; the best of a few rounds.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable, Sequence

from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.model import SpanRecord, SpanRole

__all__ = ["SHAPES", "main", "microseconds_per_span"]

_TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
_MS = 1_000_000
_END = 10**12
_ROUNDS = 3
_POLICY = {"dangerous_tools": ["issue_refund"], "verification_tools": ["lookup_order"]}


def _span(
    number: int, parent: int | None, role: SpanRole, start: int, end: int, **fields: object
) -> SpanRecord:
    return SpanRecord(
        trace_id=_TRACE,
        span_id=(number + 1).to_bytes(8, "big"),
        parent_span_id=None if parent is None else (parent + 1).to_bytes(8, "big"),
        name=role.name.lower(),
        kind=1,
        start_ns=start,
        end_ns=end,
        status_code=0,
        service="bench",
        role=role,
        **fields,  # type: ignore[arg-type]
    )


def _run(size: int, tool: Callable[[int], tuple[int | None, str, int, int]]) -> list[SpanRecord]:
    """An agent span and ``size - 1`` tool spans: ``tool(i)`` gives each one's parent (an
    index), name, start and end."""
    spans = [_span(0, None, SpanRole.AGENT, 0, _END, agent_name="bot")]
    for i in range(1, size):
        parent, name, start, end = tool(i)
        arguments = '{"order_id": "A-1"}' if name != "search" else '{"q": "x"}'
        spans.append(
            _span(i, parent, SpanRole.TOOL, start, end, tool_name=name, arguments=arguments)
        )
    return spans


def _alternating(i: int) -> str:
    return "lookup_order" if i % 2 else "issue_refund"


#: Name, and the tool span ``i`` of it: (parent, tool, start, end).
SHAPES: dict[str, Callable[[int], tuple[int | None, str, int, int]]] = {
    "identical calls one after another": lambda i: (0, "search", i * _MS, i * _MS + _MS // 2),
    "identical calls issued at once": lambda i: (0, "search", _MS + i, 5_000 * _MS),
    "identical calls each nested in the last": lambda i: (
        i - 1,
        "search",
        i * 1000,
        _END - i * 1000,
    ),
    "verification and refund issued at once": lambda i: (0, _alternating(i), _MS + i, 10 * _MS),
    "verification and refund each nested in the last": lambda i: (
        i - 1,
        _alternating(i),
        i * 1000,
        _END - i * 1000,
    ),
}


def microseconds_per_span(spans: Sequence[SpanRecord], settings: EvaluationSettings) -> float:
    """The best of ``_ROUNDS`` timings of rebuilding and evaluating ``spans``, per span."""
    pipeline = EvaluationPipeline(settings)
    normalize = settings.policy.normalizer()
    best = float("inf")
    for _ in range(_ROUNDS):
        completed = CompletedTrace(_TRACE, tuple(spans), True, None, 0, 0)
        gc.collect()
        started = time.perf_counter()
        for trace in build_tool_traces(completed, normalize):
            pipeline.evaluate(trace)
        best = min(best, time.perf_counter() - started)
    return best / len(spans) * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--spans", type=int, default=1_250, help="the smaller size (N)")
    size = parser.parse_args(argv).spans
    settings = EvaluationSettings.model_validate({"policy": _POLICY})
    print(f"{'shape':<50} {'µs/span at ' + str(size):>16} {'at ' + str(4 * size):>10} {'ratio':>6}")
    for name, tool in SHAPES.items():
        small = microseconds_per_span(_run(size, tool), settings)
        large = microseconds_per_span(_run(4 * size, tool), settings)
        print(f"{name:<50} {small:16.1f} {large:10.1f} {large / small:6.2f}")


if __name__ == "__main__":
    main()
