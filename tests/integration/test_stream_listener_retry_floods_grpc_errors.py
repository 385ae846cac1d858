"""Was (review of c3e548d): while the findings stream's address is taken, every retry of
``StreamListener`` has gRPC core print an ERROR line of its own on standard error.

What is wrong. ``StreamListener._bound`` (src/toolwatch/stream_listener.py) calls
``bind_grpc`` at each ``retry``, i.e. at every ``App.tick``. ``bind_grpc`` goes straight to
``server.add_secure_port``, and gRPC core, failing to bind, logs
``E... add_port.cc:83] Failed to add port to server: ... Address already in use`` to
descriptor 2 itself, at its default ``GRPC_VERBOSITY=ERROR`` (the CLI keeps that level).
toolwatch's own ERROR is said once per reason, as the commit and docs/security.md promise ("an ERROR
names listen.stream and why (once for each reason)", "a tick still failing tells nothing"),
but gRPC's line comes at every tick: once a second when idle, and under OTLP traffic at
every ``assembly.tick_seconds`` (0.01 s by default: ``tick_delay`` keeps ticks that far
apart under load, not a second as docs/security.md says), so up to 100 ERROR lines a second for as
long as the port is taken, into a journal or a standard error the findings outputs may share
(docs/commands.md: gRPC core's lines "may land inside a long line (rare at the default ERROR)").
``App.start`` avoids exactly this by checking each address with a plain socket first
(``address_taken``: "every one told at once, before gRPC logs its own line about one").

What it should do. Not have gRPC try a bind it can see fail: check the address as
``address_taken`` does before ``bind_grpc``, so a retry that still cannot bind prints
nothing; and try no more often than docs/security.md says.

How it is shown. ``stream_listener_down.stream_address_taken``: a real server with mutual
TLS, its stream listener restarted while a real socket holds its port. Ten ticks then run,
as ten ticks 10 ms apart under traffic would, and gRPC core's lines are counted on the
process's descriptor 2 (``capfd``). Fails with one line per bind attempt (11 in our runs: the
restart's and ten retries) where toolwatch's own ERROR, once, should be all.

Now: ``_bound`` asks a plain socket first (``listeners.address_taken``) and builds no gRPC
server while the address is taken.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.integration.conftest import StartServer
from tests.integration.stream_ca_helpers import listening_again
from tests.integration.stream_listener_down import stream_address_taken, ticks

LISTENER_LOG = "toolwatch.stream_listener"
GRPC_BIND_ERROR = "Failed to add port to server"
TICKS = 10


def test_ticks_while_the_stream_address_is_taken_print_no_grpc_error_each(
    start_server: StartServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.INFO, logger=LISTENER_LOG)
    with stream_address_taken(start_server, tmp_path) as server:
        listener = server.app.stream_listener
        assert listener is not None
        ticks(server, TICKS)
        down = listener.serving
        stderr = capfd.readouterr().err
    server.call(server.app.tick)  # the port free again
    listening_again(server)

    grpc_lines = [line for line in stderr.splitlines() if GRPC_BIND_ERROR in line]
    ours = [r.levelname for r in caplog.records if r.name == LISTENER_LOG]
    assert (down, ours, listener.serving) == (False, ["INFO", "ERROR", "INFO"], True)
    # toolwatch says it once; gRPC core must not say it again at every tick.
    assert len(grpc_lines) == 0, f"{len(grpc_lines)} gRPC core lines, first: {grpc_lines[:1]}"
