"""Was (review of da5ae9d): a resume with the token of a subscription still open supersedes
it, and the superseded stream ended OK, as at a shutdown. When its client still reads (two
tails sharing one ``--cursor-file``, so one token), that client could not tell the supersede
from a shutdown, and ``toolwatch tail`` said what was false: "<target> ended the stream
(server shutting down)", exit 0, which docs/commands.md defines as "the server shut down" (a
supervisor restarting tail on failure left it stopped). With ``--reconnect`` it said the
same, "; reconnecting", and resumed with the token, superseding the other, at every turn of
a ping-pong that never ended, never telling the operator the one thing that would end it.

Now: a superseded stream ends ABORTED with details of its own (``SUPERSEDED``), which tail
prints, exiting ``EXIT_SUPERSEDED`` (4) without subscribing again, even with
``--reconnect``: the other one has the stream. The legitimate supersede (tail's own resume
come before its old connection was seen gone) sends that status to the dead connection.

Shown with a real server (plaintext, port 0) and two ``run_tail`` on threads: tail A follows
it with ``--cursor-file F``, which holds A's cursor and token as soon as it subscribes; tail
B starts with the same F, resumes with A's token and supersedes A. The server is not shutting
down: B is still subscribed, and is sent the next finding.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
from pathlib import Path

import pytest

from tests.integration.conftest import RunningServer, StartServer, until
from tests.integration.stream_support import make_finding, make_trace
from toolwatch.sinks.stream.protocol import SUPERSEDED
from toolwatch.tail import run_tail
from toolwatch.tail_exits import EXIT_OK, EXIT_SUPERSEDED


def _subscribers(server: RunningServer, count: int) -> None:
    waiting = server.app.broker.wait_for_subscribers(count)
    asyncio.run_coroutine_threadsafe(waiting, server.loop).result(timeout=10)


def _kept(path: Path) -> dict[str, object]:
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


@pytest.mark.parametrize("reconnect", [False, True])
def test_a_tail_superseded_by_another_on_its_cursor_file_is_told_so_and_exits(
    start_server: StartServer, tmp_path: Path, reconnect: bool
) -> None:
    server = start_server()
    target = server.address("stream")
    cursor_file = tmp_path / "cursor.json"
    runs = {name: (io.StringIO(), io.StringIO()) for name in "AB"}
    codes: dict[str, int] = {}
    waits: list[float] = []

    def tail(name: str) -> None:
        out, err = runs[name]
        codes[name] = run_tail(
            target,
            out=out,
            err=err,
            as_json=True,
            cursor_file=cursor_file,
            reconnect=reconnect and name == "A",
            sleep=waits.append,  # A would wait before subscribing again: it must not
        )

    first = threading.Thread(target=tail, args=("A",), daemon=True)
    second = threading.Thread(target=tail, args=("B",), daemon=True)
    try:
        first.start()
        _subscribers(server, 1)
        assert until(lambda: "tokens" in _kept(cursor_file))  # A keeps its token at once
        token = json.loads(cursor_file.read_text())["tokens"][server.app.broker.stream_id]
        second.start()  # resumes with A's token, from the same file
        first.join(timeout=10)
        assert not first.is_alive()
        _subscribers(server, 1)  # B follows the stream: the server is up
        finding = make_finding(explanation="after A ended")
        server.call(lambda: server.app.broker.publish(make_trace(), [finding]))
        still_serving = not server.app.broker.closed
    finally:
        server.call(server.app.broker.close)
        if second.is_alive():
            second.join(timeout=10)

    b_out = [json.loads(line)["explanation"] for line in runs["B"][0].getvalue().splitlines()]
    assert (still_serving, b_out, codes["B"]) == (True, ["after A ended"], EXIT_OK)
    assert token == json.loads(cursor_file.read_text())["tokens"][server.app.broker.stream_id]
    # Was: A exited 0, told "<target> ended the stream (server shutting down)" (with
    # --reconnect: "; reconnecting", and it took the stream back from B).
    told = f"toolwatch tail: {target} ended the stream: {SUPERSEDED}"
    told += "; not reconnecting\n" if reconnect else "\n"
    assert (runs["A"][1].getvalue(), codes["A"], waits) == (told, EXIT_SUPERSEDED, [])
