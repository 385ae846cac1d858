"""Was (found by review, fixed): ``poll`` never returns once a run left running in the
background has been quiet for ``completion_wait + lost_parent_wait``.

The trace: a request's server span (the root) ended and came first; a step of the run it left
running, same service, ended after the root and names its local parent (the run's agent span,
still running). ``_check`` emits nothing (``awaits_after_root``: wait for the agent, up to
``max_trace_age``), and reschedules the trace at ``_Trace.due_ns``, which for
``anchor_missing and root_seen`` is ``last_ns + completion_wait + lost_parent_wait``: already
past. ``poll`` pops that entry again at once, for ever: the event loop hangs, every request
times out, nothing is judged. Default settings (``local_parent_wait`` unset); any background
step slower than 7 s (one reasoning-model call) triggers it. Hangs compiled as well
(checked against /work/main's build).

Fix: in ``due_ns``, leave out the lost-parent time once it has passed while
``awaits_after_root()`` holds (the trace then waits for ``local_parent_wait`` or
``max_trace_age``), or have ``_check`` schedule no earlier than ``now + 1``.

Run in a subprocess with a timeout: the hang is in ``poll`` itself (compiled code is not
interrupted by pytest-timeout's signal).
"""

from __future__ import annotations

from stall_support import run_apart

_SCRIPT = """
from assembly_support import SECOND, span, tool
from toolwatch.assembly.buffer import TraceBuffer
from toolwatch.assembly.limits import LOST_PARENT_WAIT_NS, AssemblyLimits
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock, SpanRole

clock = ManualClock()
buffer = TraceBuffer(AssemblyLimits(completion_wait_ns=2 * SECOND), clock, NoopMetrics())
buffer.add([
    span(9, None, SpanRole.OTHER, 0, 100, name="POST /chat"),  # the request's span, ended
    tool(3, 1, "lookup_order", 150, 200, parent_local=True),  # the background run's step
])
clock.now_ns += 2 * SECOND
assert buffer.poll() == []
clock.now_ns += LOST_PARENT_WAIT_NS + SECOND
assert buffer.poll() == []  # held: its agent span is still to come
assert buffer.next_due_ns() > clock()
print("returned")
"""


def test_poll_returns_for_a_background_run_quiet_past_the_lost_parent_wait() -> None:
    assert run_apart(_SCRIPT, timeout=30) == "returned"
