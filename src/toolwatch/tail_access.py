"""How ``toolwatch tail`` reaches a findings stream: a gRPC channel of its own for each
subscription, which pings the server (``_channel_options``), and, for a secured stream (the
server's ``security`` section), a ``StreamAccess``: TLS with the server's CA, a client
certificate for mutual TLS, a bearer-token file. Each file is read, and checked, when a
channel or the call's metadata is made; an error names the flag (or the ``TOOLWATCH_TAIL_*``
variable that gave it: ``ACCESS_FLAGS``) and the file.

Threading: none of its own; used on the thread that runs ``run_tail``.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import grpc

from toolwatch.config.listen import is_loopback
from toolwatch.config.security import read_token_file
from toolwatch.sinks.stream.protocol import KEEPALIVE_SECONDS

__all__ = ["StreamAccess"]


# The receive window stays at HTTP/2's 64 KiB: with BDP probing gRPC grows it to megabytes,
# and a tail that stops reading (Ctrl-Z, a full pipe) would hold thousands of findings the
# server has written and cannot count if the connection then drops. With 64 KiB the server's
# writes wait, its queue for this subscriber fills, and what it loses it counts and tells.
# Each subscription gets a new channel with subchannels of its own: in gRPC's global pool the
# next channel would share the last one's connection backoff, so an attempt right after a
# refused one (the server coming back) could fail at once, without trying.
# Keepalive pings find a connection gone silent without a reset, which would otherwise leave
# tail waiting forever (the server allows them, sinks.stream.protocol.stream_server_options): a ping
# every ``keepalive`` seconds, and a connection whose ping is not answered within a third of
# that is dropped, so a silent connection is found in at most 4/3 of it. gRPC core since
# its ping rework times a keepalive ping out by ``ping_timeout_ms`` (default a minute), no
# longer by ``keepalive_timeout_ms``: both are set.
def _channel_options(keepalive: float) -> tuple[tuple[str, int], ...]:
    timeout_ms = round(keepalive * 1000 / 3)
    return (
        ("grpc.http2.bdp_probe", 0),
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.keepalive_time_ms", round(keepalive * 1000)),
        ("grpc.keepalive_timeout_ms", timeout_ms),
        ("grpc.http2.ping_timeout_ms", timeout_ms),
        ("grpc.http2.max_pings_without_data", 0),
    )


#: ``StreamAccess``'s flags: their environment variable and help.
ACCESS_FLAGS: Final[Mapping[str, tuple[str, str]]] = {
    "--tls-ca": ("TOOLWATCH_TAIL_TLS_CA", "CA certificate (PEM) of the server; turns TLS on"),
    "--tls-cert": ("TOOLWATCH_TAIL_TLS_CERT", "client certificate (PEM) for mutual TLS"),
    "--tls-key": ("TOOLWATCH_TAIL_TLS_KEY", "client private key (PEM) for mutual TLS"),
    "--bearer-token-file": ("TOOLWATCH_TAIL_BEARER_TOKEN_FILE", "send this file's first token"),
}


@dataclass(frozen=True, slots=True)
class StreamAccess:
    """How to reach a secured findings stream.

    TLS is on when ``tls`` is true or a CA or client certificate is given; ``ca_file`` (PEM)
    is the CA that signed the server's certificate (default: the system's roots).
    ``cert_file`` and ``key_file`` (PEM, together) are the client certificate for mutual
    TLS. The first token of ``bearer_token_file`` is sent as ``authorization: Bearer``.
    ``from_env`` names the ``TOOLWATCH_TAIL_*`` variable that gave a file, by its flag, so
    that an error names what the operator set.
    """

    tls: bool = False
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    bearer_token_file: Path | None = None
    from_env: Mapping[str, str] = field(default_factory=dict)

    def given(self, flag: str) -> str:
        """How the file of ``flag`` was given: the flag, or the variable that set it."""
        return self.from_env.get(flag, flag)

    def tls_off(self) -> str:
        """What turns TLS off again: each flag to drop, or variable to unset, that turned it on."""
        on = [("--tls", self.tls), ("--tls-ca", self.ca_file), ("--tls-cert", self.cert_file)]
        steps = [
            f"unset {self.from_env[flag]}" if flag in self.from_env else f"drop {flag}"
            for flag, given in on
            if given
        ]
        return " and ".join(steps)

    @property
    def secure(self) -> bool:
        """Whether the channel has TLS."""
        return bool(self.tls or self.ca_file or self.cert_file)

    def channel(self, target: str, keepalive: float = KEEPALIVE_SECONDS) -> grpc.Channel:
        """A channel to ``target`` that pings every ``keepalive`` seconds. Raises
        ``ValueError`` naming the flag and the file for one that cannot be read or holds no
        PEM certificate (or key) that fits: gRPC takes any bytes, and each handshake then
        fails as if the server could not be reached."""
        if (self.cert_file is None) != (self.key_file is None):
            given, missing = ("--tls-cert", "--tls-key")[:: 1 if self.key_file is None else -1]
            raise ValueError(
                f"{self.given(given)} without {missing} (or {ACCESS_FLAGS[missing][0]}):"
                " a client certificate needs both"
            )
        options = _channel_options(keepalive)
        if not self.secure:
            return grpc.insecure_channel(target, options=options)
        chain, key = _client_certificate(self.cert_file, self.key_file, self.given)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_ca_certificates(self.ca_file, self.given("--tls-ca")),
            private_key=key,
            certificate_chain=chain,
        )
        return grpc.secure_channel(target, credentials, options=options)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata. Raises ``ValueError`` naming the flag for an unusable token
        file."""
        path = self.bearer_token_file
        if path is None:
            return ()
        given = self.given("--bearer-token-file")
        try:
            token = read_token_file(path)[0]
        except OSError as e:
            raise ValueError(f"{given}: {path}: cannot read: {e.strerror or e}") from None
        except ValueError as e:
            raise ValueError(f"{given}: {e}") from None
        return (("authorization", f"Bearer {token}"),)


def _local(host: str) -> bool:
    """Whether the host part of a gRPC target is this machine: a loopback name or address,
    as ``dns:///localhost``, ``ipv4:127.0.0.1`` or ``[::1]`` write it too, or a unix socket."""
    if host.startswith(("unix:", "unix-abstract:")):
        return True
    name = host.rpartition("/")[2].removeprefix("ipv4:").removeprefix("ipv6:")
    return is_loopback(name.strip("[]"))


def _read(flag: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ValueError(f"{flag}: {path}: cannot read: {e.strerror or e}") from None


def _ca_certificates(path: Path | None, given: str) -> bytes | None:
    """``--tls-ca``'s file (``None``: the system's roots), checked to hold PEM certificates;
    errors name it as ``given``."""
    if path is None:
        return None
    data = _read(given, path)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=data.decode("ascii"))
    except UnicodeDecodeError:  # DER, or another binary file
        reason = "not PEM text"
    except (ssl.SSLError, ValueError) as e:  # no certificate, a broken one, an empty file
        reason = _ssl_reason(e)
    else:
        return data
    raise ValueError(f"{given}: {path}: holds no PEM CA certificate ({reason})")


def _client_certificate(
    cert: Path | None, key: Path | None, given: Callable[[str], str]
) -> tuple[bytes | None, bytes | None]:
    """``--tls-cert``'s chain and ``--tls-key``'s key (PEM), checked to load together;
    errors name each as ``given`` says it was given."""
    if cert is None or key is None:
        return None, None
    named_cert, named_key = given("--tls-cert"), given("--tls-key")
    chain, private = _read(named_cert, cert), _read(named_key, key)
    try:  # an encrypted key is refused: gRPC takes none, and OpenSSL would prompt for it
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key, password=lambda: b"")
    except (ssl.SSLError, OSError) as e:
        raise ValueError(
            f"{named_cert} {cert} with {named_key} {key}: not a PEM certificate chain and its"
            f" unencrypted private key ({_ssl_reason(e)})"
        ) from None
    return chain, private


def _ssl_reason(error: Exception) -> str:
    """OpenSSL's reason (``NO_START_LINE``: ``no start line``), else the error's words
    without the place in Python's source that raised it."""
    reason = getattr(error, "reason", None)
    if reason:
        return str(reason).replace("_", " ").lower()
    return re.sub(r" \(_ssl\.c:\d+\)$", "", str(error))
