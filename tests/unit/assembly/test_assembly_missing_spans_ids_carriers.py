"""review3 of 393c7a4. Was: ``assembly.missing._NEVER`` (``1 << 63``) stood for "no second
carrier" in ``TraceIds``, compared with the history's span's ``end_ns``. OTLP times are
``fixed64`` and ingest keeps any end at or after the start (``decode``: only an end before
the start is clamped), so an end past 2**63 ns (a producer's broken clock) reaches the
comparison and the span's own record counts as another span's. Negligible in practice (a
model span that carries, as its own ``call_id``, an id its history names); shown for the
sentinel's contract: "a start no span reaches". Now: no second carrier is ``None``."""

from __future__ import annotations

from tests.unit.assembly.assembly_support import MS, llm
from toolwatch.assembly.missing import TraceIds

FAR_MS = (1 << 63) // MS + 1  # an end (ms) past the sentinel, within fixed64


def test_a_span_that_alone_carries_an_id_does_not_know_it_whatever_its_end() -> None:
    """Control: ended at 20 ms, the span alone carries ``x``: unknown. Expected the same
    with its end past 2**63 ns (was: ``_NEVER < end_ns``, read as known)."""
    near = llm(10, 1, 10, 20, call_id="x", prior_turns=1, prior_call_ids=("x",))
    assert not TraceIds([near]).knows("x", near)
    far = llm(11, 1, 10, FAR_MS, call_id="x", prior_turns=1, prior_call_ids=("x",))
    assert 1 << 63 < far.end_ns < 1 << 64
    assert not TraceIds([far]).knows("x", far)
