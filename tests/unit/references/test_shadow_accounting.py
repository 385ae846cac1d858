"""Property: every shadow half offered is paired, counted unpaired once, or still waiting."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests import factories
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock
from toolwatch.model_traces import ToolTrace
from toolwatch.references.settings import ShadowSettings
from toolwatch.references.shadow import ShadowJoiner


class _Tally(NoopMetrics):
    def __init__(self) -> None:
        self.unpaired = 0

    def shadow_unpaired(self, reason: str) -> None:
        self.unpaired += 1


def _run(key: str, role: str | None) -> ToolTrace:
    keys = {"toolwatch.shadow.pair_id": key}
    if role is not None:
        keys["toolwatch.shadow.role"] = role
    return factories.tool_trace(trace_id=f"{key}-{role}", span_count=1, reference_keys=keys)


_offer = st.tuples(
    st.sampled_from(["p1", "p2", "p3", "p4", "p5"]),
    st.sampled_from(["source", "target", "other", None]),
    st.floats(min_value=0, max_value=4),
)


@given(st.lists(_offer, max_size=60), st.integers(min_value=1, max_value=4))
def test_halves_are_conserved(offers: list[tuple[str, str | None, float]], bound: int) -> None:
    clock = ManualClock()
    tally = _Tally()
    settings = ShadowSettings(enabled=True, max_waiting=bound, pair_timeout_seconds=5)
    joiner = ShadowJoiner(settings, clock, tally)
    paired = 0

    for key, role, pause in offers:
        clock.advance(pause)
        paired += joiner.offer(_run(key, role)) is not None
        assert joiner.waiting <= bound

    assert 2 * paired + tally.unpaired + joiner.waiting == len(offers)
    joiner.drain()
    assert 2 * paired + tally.unpaired == len(offers)
