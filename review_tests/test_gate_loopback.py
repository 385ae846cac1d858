"""The gate's health-check exemption (plain HTTP from loopback to a TLS listener is not a
refusal to tell) on a dual-stack listener."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from tests.integration.conftest import RunningServer
from tests.integration.test_security import Pki, make_pki, tls
from toolwatch import healthcheck

Start = Callable[..., RunningServer]
REFUSED = "toolwatch_connections_refused_total"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_the_health_check_over_ipv4_to_a_dual_stack_tls_listener_is_not_told(
    start_server: Start, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """``listen.metrics: "[::]:9464"`` binds dual-stack (test_listen_dual_stack), so the
    image's HEALTHCHECK (``127.0.0.1:9464``, plain HTTP first) arrives from
    ``::ffff:127.0.0.1``. ``connection_gate._loopback`` asks ``ip_address(peer).is_loopback``,
    which is False for an IPv4-mapped address on Python 3.11: every check (each 30 s) is
    counted in ``toolwatch_connections_refused_total{reason="tls_handshake"}`` and logged as
    ``tls_handshake ... HTTP_REQUEST`` once a minute, the very noise the exemption was written
    to avoid. Should: an IPv4-mapped loopback peer is loopback (``ipv4_mapped``)."""
    server = start_server(**tls(pki), listen__metrics="[::]:0")
    port = int(server.address("metrics").rsplit(":", 1)[1])
    with caplog.at_level(logging.WARNING, "toolwatch.senders"):
        assert healthcheck.check("127.0.0.1", port) == 200
        for _ in range(3):
            server.call(lambda: None)
    told = [r.getMessage() for r in caplog.records if r.name == "toolwatch.senders"]
    assert told == []
    assert server.sample(REFUSED, {"listener": "metrics", "reason": "tls_handshake"}) == 0
