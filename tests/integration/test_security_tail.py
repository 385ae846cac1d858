"""``toolwatch tail`` on a stream with TLS and a token: refused without them, ended when its
token is taken out of the file, riding out a rotation without losing a finding."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.conftest import RunningServer, StartServer
from tests.integration.pki_support import TOKEN, Pki
from tests.integration.security_support import (
    AUTH_FAILURES,
    POLICY,
    auth,
    grpc_credentials,
    missing_verification,
    tail_during,
    tail_refused,
    tls,
    until_unsubscribed,
    unverified_refund,
)
from tests.integration.stream_support import make_finding, make_trace
from toolwatch.tail_access import StreamAccess


def test_tail_follows_a_stream_with_tls_and_a_token(start_server: StartServer, pki: Pki) -> None:
    server = start_server(**tls(pki), **auth(pki.token_file), **POLICY)
    access = StreamAccess(ca_file=pki.ca, bearer_token_file=pki.token_file)
    act = unverified_refund(server, grpc_credentials(pki), TOKEN)

    run = tail_during(server, act, access, as_json=True)

    assert run.code == 0
    [finding] = missing_verification(run.out)
    assert (finding["agent"], finding["tool"], finding["field"]) == (
        "refund-bot",
        "issue_refund",
        "order_id",
    )
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 0


def test_tail_without_tls_or_with_a_wrong_token_is_refused(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    server = start_server(**tls(pki), **auth(pki.token_file))
    wrong = tmp_path / "wrong-token"
    wrong.write_text("wrong-token\n")
    target = server.address("stream")

    access = StreamAccess(ca_file=pki.ca, bearer_token_file=wrong)
    for reconnect in (False, True):  # never subscribed in this run: the token is wrong
        refused = tail_refused(server, access, reconnect=reconnect)
        assert refused.code == 2
        said = f"toolwatch tail: {target} refused the bearer token (UNAUTHENTICATED)\n"
        assert refused.err == said
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 2

    plaintext = tail_refused(server, StreamAccess(bearer_token_file=pki.token_file))
    assert plaintext.code == 1
    assert f"cannot reach the findings stream at {target}" in plaintext.err


@dataclass
class Revocable:
    """A server's token file accepting ``leaked-token`` and ``kept-token``, and a tail
    holding the leaked one; ``revoke`` takes it out and lets ``reload_seconds`` pass."""

    tokens: Path
    access: StreamAccess

    def settings(self) -> dict[str, Any]:
        return auth(self.tokens, security__auth__reload_seconds=30)

    def revoke(self, server: RunningServer) -> None:
        self.tokens.write_text("kept-token\n")
        server.clock.advance(30)


def revocable(tmp_path: Path, pki: Pki) -> Revocable:
    tokens, leaked = tmp_path / "tokens", tmp_path / "leaked"
    tokens.write_text("leaked-token\nkept-token\n")
    leaked.write_text("leaked-token\n")
    return Revocable(tokens, StreamAccess(ca_file=pki.ca, bearer_token_file=leaked))


def test_a_token_taken_out_of_the_file_ends_the_streams_it_opened(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    """Revoking a leaked token must stop the live feed it already holds, not only new calls:
    the stream is ended UNAUTHENTICATED before its next finding is written."""
    tokens = revocable(tmp_path, pki)
    server = start_server(**tls(pki), **tokens.settings(), **POLICY)
    send = unverified_refund(server, grpc_credentials(pki), "kept-token")

    def act() -> None:
        send()  # delivered: the token is still accepted
        tokens.revoke(server)
        send()  # not delivered: the stream ends before it

    run = tail_during(server, act, tokens.access, as_json=True)
    assert len(missing_verification(run.out)) == 1
    assert run.code == 1
    assert "no longer accepts the bearer token (UNAUTHENTICATED)" in run.err
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 1


def test_a_revoked_stream_that_no_finding_passes_is_ended_at_the_reload(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    """A stream whose filter matches nothing is never written to: it is ended when the
    server's tick reloads the token file, so a leaked token cannot keep the subscriber slots."""
    tokens = revocable(tmp_path, pki)
    server = start_server(**tls(pki), **tokens.settings())

    def act() -> None:
        tokens.revoke(server)
        server.call(server.app.tick)  # no call checks a token: the tick reloads the file
        until_unsubscribed(server)

    run = tail_during(server, act, tokens.access, agents=["nobody"])
    assert run.code == 1
    assert "no longer accepts the bearer token (UNAUTHENTICATED)" in run.err
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 1


def test_findings_withheld_from_a_revoked_stream_are_not_counted_lost(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    """They are not a slow subscriber's losses (ToolwatchFindingsStreamDropping), even when
    none is held for a resume."""
    tokens = revocable(tmp_path, pki)
    server = start_server(**tls(pki), **tokens.settings(), output__stream_replay_size=0)
    broker = server.app.broker

    def act() -> None:
        tokens.revoke(server)
        # Published before any call reloads the tokens: the stream's own check before the
        # write does, and the finding it took is withheld.
        server.call(lambda: broker.publish(make_trace(), [make_finding()]))
        until_unsubscribed(server)

    run = tail_during(server, act, tokens.access)
    assert (run.code, run.out) == (1, "")
    assert server.sample("toolwatch_stream_dropped_findings_total") == 0
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 1


def test_tail_reconnecting_through_a_token_rotation_loses_no_finding(
    start_server: StartServer, pki: Pki, tmp_path: Path
) -> None:
    """Both sides rotate: the stream ends at the old token's removal, and tail --reconnect
    subscribes again with its file's new token, resuming where it left off."""
    token_file = tmp_path / "tokens"
    token_file.write_text("old-token\nnew-token\n")
    server = start_server(
        **tls(pki), **auth(token_file, security__auth__reload_seconds=30), **POLICY
    )
    tail_token = tmp_path / "tail-token"
    tail_token.write_text("old-token\n")
    send = unverified_refund(server, grpc_credentials(pki), "new-token")
    rotated = threading.Event()

    def wait(_seconds: float) -> None:  # tail's wait before it subscribes again
        if rotated.is_set():
            raise KeyboardInterrupt  # the server closed the stream at the end: stop
        tail_token.write_text("new-token\n")
        rotated.set()

    def act() -> None:
        send()
        token_file.write_text("new-token\n")
        server.clock.advance(30)
        send()
        assert rotated.wait(timeout=10)
        resubscribed = server.app.broker.wait_for_subscribers(1)
        asyncio.run_coroutine_threadsafe(resubscribed, server.loop).result(timeout=10)

    access = StreamAccess(ca_file=pki.ca, bearer_token_file=tail_token)
    run = tail_during(server, act, access, as_json=True, reconnect=True, sleep=wait)
    assert len(missing_verification(run.out)) == 2
    assert "no longer accepts the bearer token (UNAUTHENTICATED)" in run.err
    assert "resuming where it left off" in run.err


def test_tail_reconnecting_rides_out_a_rotation_whose_client_side_comes_later(
    start_server: StartServer, tmp_path: Path
) -> None:
    """The server's and tail's token files are separate mounts (a Secret in each pod), each
    updated on its own sync, often a minute apart: until tail's catches up, its attempts are
    refused, or find the file half written. tail exited 2 at the first refusal; having
    subscribed in this run, it reads its file again at each attempt, with the usual
    back-off, and resumes."""
    token_file = tmp_path / "tokens"
    token_file.write_text("old-token\n")
    server = start_server(**auth(token_file, security__auth__reload_seconds=30), **POLICY)
    tail_token = tmp_path / "tail-token"
    tail_token.write_text("old-token\n")
    target = server.address("stream")
    waits: list[float] = []
    client_side = {1: "", 2: "old-token\n", 3: "new-token\n"}  # empty: half written

    def wait(seconds: float) -> None:  # tail's wait before it subscribes again
        waits.append(seconds)
        if len(waits) in client_side:
            tail_token.write_text(client_side[len(waits)])
        if len(waits) > 20:
            raise KeyboardInterrupt  # the server closed the stream at the end: stop

    def subscribers(count: int) -> None:
        waiting = server.app.broker.wait_for_subscribers(count)
        asyncio.run_coroutine_threadsafe(waiting, server.loop).result(timeout=10)

    def act() -> None:
        unverified_refund(server, token="old-token")()
        token_file.write_text("new-token\n")  # the server side of the rotation
        server.clock.advance(30)
        server.call(server.app.tick)  # the reload ends the stream opened with old-token
        subscribers(0)
        unverified_refund(server, token="new-token")()
        subscribers(1)

    access = StreamAccess(bearer_token_file=tail_token)
    run = tail_during(server, act, access, as_json=True, reconnect=True, sleep=wait)
    assert len(missing_verification(run.out)) == 2  # the second one after the resume
    assert waits[:3] == [0.5, 1.0, 2.0]
    assert run.err.splitlines()[:2] == [
        f"toolwatch tail: {target} no longer accepts the bearer token (UNAUTHENTICATED): it"
        f" was taken out of the server's token file; reconnecting, reading {tail_token} again"
        " at each attempt",
        f"toolwatch tail: reconnected to {target}, resuming where it left off",
    ]
    assert server.sample(AUTH_FAILURES, {"listener": "stream"}) == 2  # the end, one refusal
