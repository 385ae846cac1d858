"""The full-buffer fallback's properties over the paths 3a1bfda added (late spans,
duplicates, capped traces and the chains that end them, dropped roots, rejected spans,
background runs with and without ``local_parent_wait``): stall_properties_body.py, run in
a subprocess with a timeout, as test_assembly_background_run_poll.py runs its ``poll``.

``bounds_conservation_and_deadlines``: bounds, conservation, no agent run emitted twice, an
``add`` never evicts its own traces, ``poll`` returns and leaves nothing due (these held).

``what_has_room_decides_add_does``: what ``has_room`` decides, ``add`` does. Was: failed
on the enclosing-chain defect (test_assembly_stall_room_in_order.py), which Hypothesis found
on its own.
"""

from __future__ import annotations

import pytest
from stall_support import run_apart


@pytest.mark.parametrize(
    "name", ["bounds_conservation_and_deadlines", "what_has_room_decides_add_does"]
)
def test_fallback_properties(name: str) -> None:
    script = f"import stall_properties_body as b; b.{name}(); print('held')"
    assert run_apart(script, timeout=240) == "held"
