"""The ``listen:`` section and what reads addresses: ``HOST:PORT`` and ports as listeners and
``tail --target`` take them, loopback hosts, the addresses a host name binds.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Literal

from pydantic import field_validator, model_validator

from toolwatch.sections import Section as _Section

__all__ = [
    "LISTENERS",
    "ListenSettings",
    "Listener",
    "host_addresses",
    "is_ip_address",
    "is_loopback",
    "parse_listen_address",
    "parse_port",
]


#: A host name (RFC 1123 labels; ``_`` allowed, as container names have it) or IPv4 address.
_HOST_NAME = re.compile(
    r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?"
)


def parse_listen_address(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` for IPv6). Port 0 asks the OS for a free port."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{value!r} is not HOST:PORT")
    if host.startswith("[") or host.endswith("]"):
        if not (host.startswith("[") and host.endswith("]")):
            raise ValueError(f"{value!r}: the brackets around the host are not balanced")
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{value!r}: {host!r} in brackets is not an IPv6 address") from None
    elif ":" in host:
        raise ValueError(f"{value!r}: an IPv6 host is written in brackets: [{host}]:{port_text}")
    elif not _HOST_NAME.fullmatch(host):
        raise ValueError(f"{value!r}: {host!r} is not a host name or an IPv4 address")
    try:
        port = parse_port(port_text)
    except ValueError as exc:
        raise ValueError(f"{value!r}: {exc}") from None
    return host, port


def parse_port(text: str) -> int:
    """The TCP port ``text`` gives (0 to 65535, in ASCII digits), as listeners and ``tail``'s
    ``--target`` take it; raises ``ValueError`` saying what a port must be."""
    # str.isdigit() takes digits of any script ("\u0663", "\u00b2"), which gRPC does not,
    # and gRPC dials a port above 65535 modulo 65536.
    if not (text.isascii() and text.isdigit()) or not 0 <= int(text) <= 65535:
        hint = "" if text.isascii() else ", in the ASCII digits 0-9"
        raise ValueError(f"port must be a number from 0 to 65535{hint}")
    return int(text)


def is_loopback(host: str) -> bool:
    """True for loopback addresses (IPv4-mapped ones too) and ``localhost``."""
    name = host.lower().removesuffix(".")
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


#: A listener's name, as in ``ListenSettings`` and ``App.addresses``.
Listener = Literal["grpc", "http", "metrics", "stream"]
LISTENERS: tuple[Listener, ...] = ("grpc", "http", "metrics", "stream")


#: A listener on these holds its port on every interface.
_EVERY_INTERFACE = frozenset({"0.0.0.0", "::"})


class ListenSettings(_Section):
    """Listener addresses. Defaults are loopback: safe for a sidecar."""

    grpc: str = "127.0.0.1:4317"
    http: str = "127.0.0.1:4318"
    metrics: str = "127.0.0.1:9464"
    stream: str = "127.0.0.1:4319"

    @field_validator("grpc", "http", "metrics", "stream")
    @classmethod
    def _address(cls, value: str) -> str:
        parse_listen_address(value)
        return value

    @model_validator(mode="after")
    def _distinct(self) -> ListenSettings:
        """Two listeners cannot share a port on an address they both name (``localhost`` and
        ``127.0.0.1`` name one), or anywhere when one of them listens on every interface
        (port 0 picks a free port for each)."""
        bound: list[tuple[str, frozenset[str], int]] = []
        for name in LISTENERS:
            host, port = parse_listen_address(getattr(self, name))
            addresses = host_addresses(host)
            for other, other_addresses, other_port in bound:
                shared = (
                    addresses & other_addresses or (addresses | other_addresses) & _EVERY_INTERFACE
                )
                if port != 0 and port == other_port and shared:
                    raise ValueError(
                        f"listen.{other} and listen.{name} both use port {port} "
                        f"({getattr(self, other)!r}, {getattr(self, name)!r})"
                    )
            bound.append((name, addresses, port))
        return self


#: What gRPC listens on for ``localhost``, whatever the resolver says (it binds both).
_LOCALHOST = frozenset({"127.0.0.1", "::1"})


def is_ip_address(host: str) -> bool:
    """Whether ``host`` is an IPv4 or IPv6 address, not a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_addresses(host: str) -> frozenset[str]:
    """The IP addresses ``host`` names (itself for an IP address; ``localhost`` both loopback
    addresses; another name as the resolver has it, or the name itself when it does not
    resolve: binding will say why)."""
    if is_ip_address(host):
        return frozenset({str(ipaddress.ip_address(host))})
    if host.lower().removesuffix(".") == "localhost":
        return _LOCALHOST
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return frozenset({host})
    return frozenset(str(ipaddress.ip_address(info[4][0])) for info in found) or frozenset({host})
