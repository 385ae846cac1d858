"""Found by review (review-stall5, of 7097a45): what held, checked on random runs
(``flag_limited_probe_body``): no ``poll`` spins (a subprocess with a timeout), no check
overdue right after an add or a ``flag_rejected`` (``_schedule``'s ``not_before``), every held
trace has a live entry no later than its due time, none held past ``max_trace_age``, none
anchored and quiet for ``completion_wait`` left held after a poll (``_flag_limited``
reschedules where ``anchored`` changed: a root came, a held span named the span dropped), nor
any rooted with a span rejected and quiet for ``completion_wait + lost_parent_wait`` (the
"wait" rule: ``_Trace.parent_lost``)."""

from __future__ import annotations

from stall_support import run_apart


def test_random_runs_keep_the_schedule() -> None:
    script = "import flag_limited_probe_body as b; b.main(0, 100)"
    assert run_apart(script, timeout=120).splitlines()[-1] == "bad 0"
