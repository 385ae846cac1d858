"""review2. Was (dd985a3): ``lacks_spans(run.spans, spans)`` built ``_first_known`` over the
whole trace once per run the count found lacking: work that grew with runs x spans, where it
grew with the spans before (``_known_ids`` read the run's own spans). Now: the trace's ids
are read once, at the first run's question (``assembly.missing.TraceIds``)."""

from __future__ import annotations

import time

from tests.unit.assembly.assembly_support import NORMALIZE, TRACE, agent, ask, llm, span
from toolwatch.assembly.completed import CompletedTrace
from toolwatch.assembly.timeline import build_tool_traces
from toolwatch.model import SpanRecord, SpanRole

RUNS = 15_000
#: As ``test_assembly_hostile``'s: generous for linear work on a loaded machine; work that
#: grows with the square of the spans takes far longer at this size.
QUADRATIC_BOUND_SECONDS = 10.0


def _runs_each_naming_one_known_id(runs: int) -> list[SpanRecord]:
    """A workflow span over ``runs`` agents, each with one model span whose history shows one
    turn (its run holds none before it: the count finds every run lacking) naming ``c0``,
    asked for by a model span at the trace's start (known: each run is whole)."""
    spans = [
        span(1, None, SpanRole.OTHER, 0, 10**6, name="workflow"),
        llm(2, 1, 0, 1, ask("lookup_order", "c0", {"order_id": "A-1"}), prior_turns=0),
    ]
    for r in range(runs):
        a = 3 + 2 * r
        spans.append(agent(a, 1, f"agent{r}", 10 * r + 2, 10 * r + 9))
        spans.append(
            llm(a + 1, a, 10 * r + 3, 10 * r + 8, ask("lookup_order", f"x{r}", {"order_id": "A"}),
                prior_turns=1, prior_call_ids=("c0",))
        )  # fmt: skip
    return spans


def test_many_runs_naming_known_ids_are_judged_in_linear_time() -> None:
    """30,000 spans, 15,000 runs: the gateway's setting on (``from_history``) against off.
    Measured (this machine, 2 cores shared): 10,002 spans took 2.3 s on compiled code with
    it on, 0.08 s off; pure Python, 4,002 spans 1.0 s on, 0.08 s off, quadrupling as the
    runs double. Expected: within the hostile tests' bound (10 s), as off."""
    spans = _runs_each_naming_one_known_id(RUNS)
    trace = CompletedTrace(TRACE, tuple(spans), True, None, 0, 0)
    started = time.perf_counter()
    runs = build_tool_traces(trace, NORMALIZE, from_history=True)
    took = time.perf_counter() - started
    assert sum(1 for run in runs if run.incomplete_reason == "missing_spans") == 0
    assert took < QUADRATIC_BOUND_SECONDS, f"{took:.1f} s for {len(spans)} spans"
