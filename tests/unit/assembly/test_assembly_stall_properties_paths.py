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

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _run(name: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    script = f"import stall_properties_body as b; b.{name}(); print('held')"
    try:
        return subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{name}: did not return within 240 s (poll hanging?)") from None


@pytest.mark.parametrize(
    "name", ["bounds_conservation_and_deadlines", "what_has_room_decides_add_does"]
)
def test_fallback_properties(name: str) -> None:
    done = _run(name)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == "held"
