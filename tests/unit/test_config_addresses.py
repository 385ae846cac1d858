"""Listen addresses: what ``HOST:PORT`` parses to, what is refused and why, and which hosts
count as loopback (the start-up warning about unprotected listeners depends on it)."""

from __future__ import annotations

import pytest

from toolwatch.config import (
    ConfigError,
    is_loopback,
    load_config,
    parse_listen_address,
    parse_port,
)


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("127.0.0.1:4317", ("127.0.0.1", 4317)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("[::1]:4317", ("::1", 4317)),
        ("[::]:65535", ("::", 65535)),
        ("localhost:9464", ("localhost", 9464)),
        (
            "toolwatch-0.toolwatch.svc.cluster.local.:4317",
            ("toolwatch-0.toolwatch.svc.cluster.local.", 4317),
        ),
        ("agent_sidecar:4318", ("agent_sidecar", 4318)),
    ],
)
def test_addresses_that_parse(value: str, parsed: tuple[str, int]) -> None:
    assert parse_listen_address(value) == parsed


def test_a_port_is_0_to_65535_in_ascii_digits_wherever_it_is_given() -> None:
    """``parse_port``: what ``listen.*`` and ``tail --target`` both take."""
    assert [parse_port(text) for text in ("0", "4319", "65535")] == [0, 4319, 65535]
    for text in ("", "-1", "65536", "99999", "+1", " 1", "1.0"):
        with pytest.raises(ValueError, match=r"^port must be a number from 0 to 65535$"):
            parse_port(text)
    with pytest.raises(ValueError, match=r"65535, in the ASCII digits 0-9$"):
        parse_port("\u0664\u0663\u0661\u0669")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("4317", "'4317' is not HOST:PORT"),
        (":4317", "':4317' is not HOST:PORT"),
        ("[::1:4317", "'[::1:4317': the brackets around the host are not balanced"),
        ("::1]:4317", "'::1]:4317': the brackets around the host are not balanced"),
        ("::1:0", "'::1:0': an IPv6 host is written in brackets: [::1]:0"),
        ("[zz]:1", "'[zz]:1': 'zz' in brackets is not an IPv6 address"),
        ("bad host:1", "'bad host:1': 'bad host' is not a host name or an IPv4 address"),
        ("-x:1", "'-x:1': '-x' is not a host name or an IPv4 address"),
        ("127.0.0.1:65536", "'127.0.0.1:65536': port must be a number from 0 to 65535"),
        ("127.0.0.1:http", "'127.0.0.1:http': port must be a number from 0 to 65535"),
        # Digits Python reads as numbers, gRPC does not: serve failed to bind, said why not.
        (
            "127.0.0.1:\u0663\u0663\u0663\u0663",
            "'127.0.0.1:\u0663\u0663\u0663\u0663': port must be a number from 0 to 65535,"
            " in the ASCII digits 0-9",
        ),
        (
            "127.0.0.1:\uff14\uff13",
            "'127.0.0.1:\uff14\uff13': port must be a number from 0 to 65535, in the ASCII"
            " digits 0-9",
        ),
        (  # "invalid literal for int() with base 10: '4\u00b2'"
            "127.0.0.1:4\u00b2",
            "'127.0.0.1:4\u00b2': port must be a number from 0 to 65535, in the ASCII digits 0-9",
        ),
    ],
)
def test_addresses_that_are_refused_say_why(value: str, reason: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_listen_address(value)
    assert str(refused.value) == reason


def test_a_bad_address_in_the_configuration_names_the_field() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, {"listen.grpc": "[::1:4317"})
    assert "listen.grpc" in str(refused.value)
    assert "the brackets around the host are not balanced" in str(refused.value)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("localhost.", True),
        ("0.0.0.0", False),
        ("::", False),
        ("::ffff:10.0.0.1", False),
        ("10.0.0.1", False),
        ("toolwatch.example", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("grpc", "stream", "clash"),
    [
        ("127.0.0.1:45319", "127.0.0.1:45319", True),
        # One address by two names: gRPC would bind what it could and start half-bound.
        ("127.0.0.1:45319", "localhost:45319", True),
        ("[::1]:45319", "localhost:45319", True),
        ("0.0.0.0:45319", "10.1.2.3:45319", True),  # every interface holds the port
        ("127.0.0.1:45319", "127.0.0.2:45319", False),
        ("127.0.0.1:45319", "localhost:45320", False),
        ("localhost:0", "127.0.0.1:0", False),  # port 0: a free port each
    ],
)
def test_two_listeners_cannot_share_a_port_on_an_address_they_both_name(
    grpc: str, stream: str, clash: bool
) -> None:
    overrides = {"listen.grpc": grpc, "listen.stream": stream}
    if not clash:
        assert load_config(None, overrides).listen.stream == stream
        return
    with pytest.raises(ConfigError) as refused:
        load_config(None, overrides)
    port = stream.rpartition(":")[2]
    assert f"listen.grpc and listen.stream both use port {port}" in str(refused.value)
