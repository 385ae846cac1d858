"""``toolwatch serve``'s start-up errors name the address, the listener and the reason."""

from __future__ import annotations

import pytest

from tests.integration.cli_support import FREE_PORTS, run_cli


@pytest.mark.parametrize("listener", ["grpc", "http", "metrics", "stream"])
def test_a_listen_host_that_does_not_resolve_says_why(listener: str) -> None:
    """docs/commands.md, Exit codes: 3 when serve could not start, "and the message says how to
    give it another". A host name that does not resolve (a typo, a name not in this pod's DNS)
    was told as ``Unknown error -2``: getaddrinfo's EAI_NONAME (-2) passed to ``os.strerror``,
    which knows only errno values, and the resolver's own words lost."""
    address = "no-such-host.invalid:4318"
    result = run_cli("serve", *FREE_PORTS, f"--{listener}-listen", address)
    assert result.returncode == 3, result.stderr
    told = [line for line in result.stderr.splitlines() if line.startswith("toolwatch:")]
    assert told and address in told[0] and f"listen.{listener}" in told[0], result.stderr
    assert "Unknown error" not in told[0], told[0]
    assert "does not resolve" in told[0], told[0]
    assert f"--{listener}-listen" in result.stderr  # how to give another
