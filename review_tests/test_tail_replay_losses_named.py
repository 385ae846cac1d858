"""Review of ``toolwatch tail``: findings a resumed subscription loses because its replay fell
behind what the server holds are told as lost to a full queue, naming the setting that does
not bound them.

A resumed subscription reads the held findings after its cursor, and every finding
published while it replays joins the replay (``Subscription.offer``), not its queue: what it
can fall behind by is ``output.stream_replay_size``, whatever ``output.stream_queue_size``
is. What the server let go before the replay read it is told in ``missed_before``
(``Subscription._replayed``), and tail prints every ``missed_before`` as "the server's queue
for this subscriber was full (output.stream_queue_size)". An SRE told that during an
incident (a burst right after tail resumed, the moment a reconnect or a restart of tail
lands in) raises ``stream_queue_size``, which changes nothing; the setting to raise is
``stream_replay_size``. Here the queue holds 5,000 findings and never held one.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

from tests.integration.test_stream import DROPPED, make_finding, make_trace, serve
from toolwatch.tail import run_tail


def test_findings_let_go_before_a_replay_read_them_are_told_as_the_replay_s(
    tmp_path: Path,
) -> None:
    """tail starts with a cursor file at the start of the stream (200 held, ``replay_size``
    200, ``queue_size`` 5,000) and, as it begins its replay, a burst of 2,000 findings is
    published: the server lets go of most of them before the replay reads them."""
    cursor_file = tmp_path / "tail.cursor"
    out, err = io.StringIO(), io.StringIO()

    async def scenario() -> tuple[int, int]:
        async with serve(replay_size=200, queue_size=5_000) as h:
            burst = [make_finding(explanation=f"f{i}") for i in range(1, 2_201)]
            h.broker.publish(make_trace(), burst[:200])
            cursor_file.write_text(json.dumps({"streams": {h.broker.stream_id: 0}}))
            tail = asyncio.create_task(
                asyncio.to_thread(run_tail, h.target, out=out, err=err, cursor_file=cursor_file)
            )
            await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=10)
            h.broker.publish(make_trace(), burst[200:])  # one step: the replay reads none
            h.broker.close()
            code = await asyncio.wait_for(tail, timeout=30)
            return code, int(h.registry.get_sample_value(DROPPED) or 0)

    code, dropped = asyncio.run(scenario())
    assert code == 0
    assert dropped >= 1_800  # f201..f2000 at least: let go before the replay read them
    assert out.getvalue().count("\n") == 2_200 - dropped
    (told,) = [line for line in err.getvalue().splitlines() if "missed" in line]
    assert told.startswith(f"toolwatch tail: {dropped} findings missed before the next: ")
    assert "output.stream_replay_size" in told, told
    assert "output.stream_queue_size" not in told, told
