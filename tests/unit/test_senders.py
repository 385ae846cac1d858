"""The sender log: who sends what toolwatch refuses, a line per reason at most so often."""

from __future__ import annotations

import logging

import pytest

from toolwatch.model import ManualClock
from toolwatch.senders import Sender, SenderLog, Unread

PEER = Sender("http", "10.0.0.7:51234")


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "toolwatch.senders"]


def test_one_line_per_reason_per_interval_the_next_counts_what_was_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    log = SenderLog(clock, interval_seconds=60)
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        log.refused("invalid_trace_id", PEER, "2 spans rejected; spans[0]: bad", spans=2)
        log.refused("invalid_trace_id", PEER, "3 spans rejected; spans[0]: bad", spans=3)
        log.refused("overloaded", PEER, "toolwatch is at capacity")  # its own reason: logged
        clock.advance(59.9)
        log.refused("invalid_trace_id", PEER, "1 span rejected; spans[0]: bad", spans=1)
        assert len(lines(caplog)) == 2  # within the interval: counted, not logged
        clock.advance(0.1)
        log.refused("invalid_trace_id", Sender("http", "10.0.0.8:4000", "collector"), "x")
    assert lines(caplog) == [
        "2 spans rejected (invalid_trace_id) on http from 10.0.0.7:51234:"
        " '2 spans rejected; spans[0]: bad'",
        "request refused (overloaded) on http from 10.0.0.7:51234: 'toolwatch is at capacity'",
        "request refused (invalid_trace_id) on http from 10.0.0.8:4000 (client certificate"
        " collector): 'x'; 2 more since the last line of this reason (4 spans), not logged",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_an_example_is_one_line_and_bounded(caplog: pytest.LogCaptureFixture) -> None:
    """The example comes from what a client sent (its ids, its attribute keys): a line break
    in it must not forge a log line, nor its length flood one."""
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        SenderLog(ManualClock()).refused("invalid_request", PEER, "a\nforged line" + "y" * 999)
    [line] = lines(caplog)
    assert "\n" not in line
    assert line.startswith("request refused (invalid_request) on http from 10.0.0.7:51234: 'a\\n")
    assert line.endswith(": 'a\\nforged line" + "y" * 286 + "'...")  # 300 escaped characters


def test_an_example_is_cut_at_300_characters_after_escaping(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Was: cut at 300 characters before escaping, so that an example of control or
    non-ASCII characters took up to 1,200 (``\\u2026`` the cut's own mark among them). Now:
    its escaped text is cut at 300 characters, never inside an escape."""
    log = SenderLog(ManualClock())
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        log.refused("invalid_request", PEER, "\x00" * 400)
        log.refused("overloaded", PEER, "é" * 75)  # exactly 300 escaped: not cut
        log.refused("malformed_span", PEER, "ab'" * 5)
        log.refused("malformed_attributes", PEER, "ab'\"" * 5)
    cut, whole, quoted, both = (line.split(": ", 1)[1] for line in lines(caplog))
    assert cut == "'" + "\\x00" * 75 + "'..."
    assert whole == "'" + "\\xe9" * 75 + "'"
    assert quoted == ascii("ab'" * 5) == '"' + "ab'" * 5 + '"'
    assert both == ascii("ab'\"" * 5) == "'" + "ab\\'\"" * 5 + "'"


def test_a_client_certificates_names_are_escaped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        SenderLog(ManualClock()).refused(
            "permission_denied", Sender("grpc", "ipv4:10.0.0.8:4000", "evil\nERROR x,ü"), "no"
        )
    assert lines(caplog) == [
        "request refused (permission_denied) on grpc from ipv4:10.0.0.8:4000 (client"
        " certificate evil\\nERROR x,\\xfc): 'no'"
    ]


def test_each_listener_has_its_own_line_per_reason(caplog: pytest.LogCaptureFixture) -> None:
    """Was: one line per reason for every listener, so a misconfigured probe refused on the
    metrics listener hid, for a minute, the exporters refused for the same reason on the OTLP
    ones. Now: the rate limit is per reason and listener (a few listeners: still bounded)."""
    clock = ManualClock()
    log = SenderLog(clock, interval_seconds=60)
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        log.refused("unauthenticated", Sender("metrics", "10.0.0.9:1"), "no bearer token")
        log.refused("unauthenticated", Sender("http", "10.0.0.7:2"), "no bearer token")
        log.refused("unauthenticated", Sender("metrics", "10.0.0.9:3"), "no bearer token")
        clock.advance(60)
        log.refused("unauthenticated", Sender("metrics", "10.0.0.9:4"), "no bearer token")
    assert lines(caplog) == [
        "request refused (unauthenticated) on metrics from 10.0.0.9:1: 'no bearer token'",
        "request refused (unauthenticated) on http from 10.0.0.7:2: 'no bearer token'",
        "request refused (unauthenticated) on metrics from 10.0.0.9:4: 'no bearer token'; 1 more"
        " since the last line of this reason, not logged",
    ]


def test_a_slow_sender_is_not_hidden_by_a_burst_of_overloads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Both are answered 503 for a request slot, but a slow sender is one client holding the
    slots, an overload every client turned away: each reason has its own line."""
    clock = ManualClock()
    log = SenderLog(clock, interval_seconds=60)
    slow = "the request body was not received within 30 s; retry"
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        log.refused("overloaded", Sender("http", "10.0.0.8:1"), "toolwatch is at capacity")
        log.refused("slow_request", PEER, slow)
        log.refused("overloaded", Sender("http", "10.0.0.8:2"), "toolwatch is at capacity")
        log.refused("slow_request", PEER, slow)
        clock.advance(60)
        log.refused("slow_request", PEER, slow)
    assert lines(caplog) == [
        "request refused (overloaded) on http from 10.0.0.8:1: 'toolwatch is at capacity'",
        f"request refused (slow_request) on http from 10.0.0.7:51234: '{slow}'",
        f"request refused (slow_request) on http from 10.0.0.7:51234: '{slow}'; 1 more since"
        " the last line of this reason, not logged",
    ]


def test_the_sender_is_read_only_for_a_line_logged() -> None:
    asked: list[str] = []

    def read() -> Sender:
        asked.append("asked")
        return PEER

    log = SenderLog(ManualClock())
    log.refused("overloaded", Unread("http", read), "x")
    log.refused("overloaded", Unread("http", read), "x")
    assert asked == ["asked"]


def test_an_interval_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="interval_seconds must be positive, got 0"):
        SenderLog(ManualClock(), interval_seconds=0)


def test_a_refused_connection_is_told_as_a_connection_not_a_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Was: ``request refused (connection_limit)`` for a connection that made no request.
    Now: the gate's reasons say what was refused or closed: a connection."""
    log = SenderLog(ManualClock(), interval_seconds=60)
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        log.refused("connection_limit", PEER, "1 connection is handling requests")
        log.refused("connection_limit_idle", PEER, "1 connection is open")
        log.refused("tls_handshake", PEER, "the TLS handshake failed: TLSV1_ALERT_UNKNOWN_CA")
    assert lines(caplog) == [
        "connection refused (connection_limit) on http from 10.0.0.7:51234:"
        " '1 connection is handling requests'",
        "idle connection closed (connection_limit_idle) on http from 10.0.0.7:51234:"
        " '1 connection is open'",
        "connection refused (tls_handshake) on http from 10.0.0.7:51234:"
        " 'the TLS handshake failed: TLSV1_ALERT_UNKNOWN_CA'",
    ]
