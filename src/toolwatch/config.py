"""Configuration: one validated object, built once at start-up, passed down as plain values.

Sources, lowest precedence first: built-in defaults, the YAML file (``--config``), then
``TOOLWATCH_*`` environment variables and command-line flags (the CLI merges those two).
Every error names the file, the field path and the reason, and stops start-up.

The sections of other stages are defined next to their stage (``evaluation.settings``,
``references.settings``); this module composes them and owns the server-level sections.
"""

from __future__ import annotations

import datetime
import io
import ipaddress
import os
import re
import socket
import ssl
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from toolwatch.assembly.buffer import LOST_PARENT_WAIT_NS, AssemblyLimits
from toolwatch.certificate_dates import (
    CertificateDates,
    certificate_dates,
    expiry_warning,
    first_to_expire,
)
from toolwatch.evaluation.settings import ComparingSettings, EvaluatorsSettings, PolicySettings
from toolwatch.ingest.decode import DecodeOptions
from toolwatch.ingest.scan import COMPILED_UNAVAILABLE, Decoder
from toolwatch.references.settings import GoldenSettings, ShadowSettings
from toolwatch.sections import (
    WEEK_SECONDS,
    YAML11_BOOLEANS,
    FilePath,
    Seconds,
    YamlLoader,
    is_text,
    numbers_as_written,
    seconds_to_ns,
    takes_null,
    unknown_key,
    value_types,
    yaml11_booleans,
    yaml11_numbers,
)
from toolwatch.sections import Section as _Section

__all__ = [
    "LISTENERS",
    "AssemblySettings",
    "AuthSettings",
    "Config",
    "ConfigError",
    "IngestSettings",
    "ListenSettings",
    "Listener",
    "MetricsSettings",
    "OutputSettings",
    "SecuritySettings",
    "TlsSettings",
    "check_certificate",
    "check_outputs",
    "host_addresses",
    "is_ip_address",
    "is_loopback",
    "load_config",
    "output_warnings",
    "parse_listen_address",
    "parse_port",
    "private_file_warning",
    "read_token_file",
]

_MIB = 2**20
#: gRPC takes its channel options (``grpc.max_receive_message_length``) as C ints.
_MAX_REQUEST_BYTES = 2**31 - 1
#: About 33 bytes each at most (``toolwatch.assembly.remembered``): 1.65 GB; 15,000,000 is
#: a replica's most spans a second (50,000), each a trace of its own, for 300 s.
_MAX_REMEMBERED_TRACES = 50_000_000


#: ToolwatchSecurityFilesNotReloaded sees a failing file only if it is looked at every 5m.
ALERTED_RELOAD_SECONDS = 240


class ConfigError(ValueError):
    """Invalid configuration. The message names the source, the field path and the reason."""


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


class IngestSettings(_Section):
    # OTLP: "It is RECOMMENDED to use 20 MiB as the default limit", after decompression.
    max_request_bytes: int = Field(
        20 * _MIB, gt=0, le=_MAX_REQUEST_BYTES, description="cap after decompression"
    )
    # A value is part of a request; the compiled scanner takes the cap as a C ssize_t.
    max_value_bytes: int = Field(
        65_536, gt=0, le=_MAX_REQUEST_BYTES, description="longer attribute values are cut"
    )
    # SDKs keep 128 attributes of every kind per span by default; one with more than this of
    # the attributes conventions read (a model output's flattened tool calls) is rejected,
    # counted: converting them all would hold memory out of proportion to the request.
    max_span_attributes: int = Field(
        1024, gt=0, le=1_000_000, description="a span with more attributes read is rejected"
    )
    retry_after_seconds: float = Field(1.0, gt=0, le=300)
    # Bodies in flight stay under this times max_request_bytes (toolwatch.ingest.slots); more
    # concurrent requests are answered as overloaded, before their bodies are read.
    max_concurrent_requests: int = Field(
        16, gt=0, le=10_000, description="requests read or handled at once, both receivers"
    )
    read_timeout_seconds: float = Field(
        30.0, gt=0, le=600, description="a body not received by then frees its slot (retryable)"
    )
    # aiohttp's own default is an hour: a client that opens a connection and never finishes
    # its headers (slowloris) held a socket that long. 120 s outlasts the scrape interval and
    # the Collector's idle connections (closed at 90 s, idle_conn_timeout), so the client
    # closes an idle one first: no export is sent on a connection the server is closing.
    idle_timeout_seconds: float = Field(
        120.0,
        gt=0,
        le=3600,
        description="an HTTP connection (OTLP or metrics) with no request, or a connection's"
        " handshake not finished (at most 60 s), for this long is closed",
    )
    # gRPC's bandwidth-delay probing grows HTTP/2 windows ahead of reads, so calls waiting for
    # a slot would still have their bodies buffered by gRPC (measured: 100 x 10 MiB held 1 GiB
    # with 16 slots). Off, a waiting call holds one 64 KiB window; a body being read still
    # gets the window it needs (10 MiB at 50 ms RTT: 0.64 s against 0.1-0.2 s with it on).
    grpc_bdp_probe: bool = Field(
        False, description="grow gRPC windows ahead of reads (WAN senders; unbounds memory)"
    )
    decoder: Decoder = Field(
        "auto", description="OTLP scanner: auto (compiled if built), compiled, reference"
    )

    @field_validator("decoder")
    @classmethod
    def _available(cls, value: Decoder) -> Decoder:
        if value == "compiled" and COMPILED_UNAVAILABLE:
            raise ValueError(f"the compiled OTLP scanner cannot be used: {COMPILED_UNAVAILABLE}")
        return value


class AssemblySettings(_Section):
    completion_wait_seconds: Seconds = Field(2.0, gt=0, le=WEEK_SECONDS)
    max_trace_age_seconds: Seconds = Field(300.0, gt=0, le=WEEK_SECONDS)
    local_parent_wait_seconds: Seconds | None = Field(None, gt=0, le=WEEK_SECONDS)
    lost_parent_wait_seconds: Seconds = Field(LOST_PARENT_WAIT_NS / 1e9, gt=0, le=WEEK_SECONDS)
    late_span_window_seconds: Seconds = Field(300.0, ge=0, le=WEEK_SECONDS)  # 0: off
    max_traces: int = Field(10_000, gt=0)
    max_spans_per_trace: int = Field(5_000, gt=0)
    max_buffered_spans: int = Field(200_000, gt=0)
    max_buffered_bytes: int = Field(256 * _MIB, gt=0)
    max_remembered_traces: int = Field(2_000_000, ge=0, le=_MAX_REMEMBERED_TRACES)
    overflow: Literal["backpressure", "evict_oldest"] = "backpressure"
    tick_seconds: float = Field(0.01, gt=0, le=10, description="how often completion is checked")

    @model_validator(mode="after")
    def _runs_can_complete(self) -> AssemblySettings:
        # A run is complete once quiet for the wait, and judged incomplete at the age: a wait
        # as long as the age would flag every run incomplete (policy checks only).
        if self.completion_wait_seconds >= self.max_trace_age_seconds:
            raise ValueError(
                f"completion_wait_seconds ({self.completion_wait_seconds:g}) must be shorter "
                f"than max_trace_age_seconds ({self.max_trace_age_seconds:g}): a run still "
                "waiting at that age is evaluated as incomplete, so no run would complete"
            )
        # The same of the wait for a local parent: counted from the trace's last span, it
        # ends after the age, counted from its first (buffer.py, _Trace.due_ns).
        wait = self.local_parent_wait_seconds
        if wait is not None and wait >= self.max_trace_age_seconds:
            raise ValueError(
                f"local_parent_wait_seconds ({wait:g}) must be shorter than "
                f"max_trace_age_seconds ({self.max_trace_age_seconds:g}): it counts from a "
                "trace's last span, so the trace reaches that age first and is evaluated as "
                "incomplete; the wait would never apply"
            )
        # A trace whose parent was lost in export is judged complete this long after the
        # wait: at or past the age it would be judged incomplete instead (the default is
        # left alone when only the age is set short, as in a test rig).
        lost = self.completion_wait_seconds + self.lost_parent_wait_seconds
        if (
            "lost_parent_wait_seconds" in self.model_fields_set
            and lost >= self.max_trace_age_seconds
        ):
            raise ValueError(
                f"completion_wait_seconds + lost_parent_wait_seconds ({lost:g}) must be shorter"
                f" than max_trace_age_seconds ({self.max_trace_age_seconds:g}): a run that lost"
                " a parent in export would reach that age first and be evaluated as incomplete"
            )
        return self

    @model_validator(mode="after")
    def _trace_cap_can_apply(self) -> AssemblySettings:
        # The per-trace cap is what keeps one runaway trace (an agent looping on a tool) from
        # filling the buffer, refusing every other sender's spans (backpressure) or evicting
        # every other run until it is evaluated.
        if self.max_spans_per_trace >= self.max_buffered_spans:
            raise ValueError(
                f"max_spans_per_trace ({self.max_spans_per_trace}) must be smaller than "
                f"max_buffered_spans ({self.max_buffered_spans}): one trace at the cap would "
                "fill the whole buffer, so the cap would never keep a runaway trace from "
                "crowding out every other run; lower max_spans_per_trace"
            )
        return self

    def limits(self) -> AssemblyLimits:
        return AssemblyLimits(
            completion_wait_ns=seconds_to_ns(self.completion_wait_seconds),
            max_trace_age_ns=seconds_to_ns(self.max_trace_age_seconds),
            local_parent_wait_ns=(
                0
                if self.local_parent_wait_seconds is None
                else seconds_to_ns(self.local_parent_wait_seconds)
            ),
            lost_parent_wait_ns=seconds_to_ns(self.lost_parent_wait_seconds),
            late_span_window_ns=seconds_to_ns(self.late_span_window_seconds),
            max_traces=self.max_traces,
            max_spans_per_trace=self.max_spans_per_trace,
            max_buffered_spans=self.max_buffered_spans,
            max_buffered_bytes=self.max_buffered_bytes,
            max_remembered_traces=self.max_remembered_traces,
            overflow=self.overflow,
        )


class OutputSettings(_Section):
    """Where findings and ToolTraces go. ``-`` is standard output; ``None`` is off."""

    findings: str | None = "-"
    dump_tooltraces: str | None = None
    show_argument_values: bool = False
    show_fields: tuple[str, ...] = ()
    stream_max_subscribers: int = Field(
        64, gt=0, le=10_000, description="findings-stream subscriptions open at once"
    )
    # A subscriber's findings not yet written (about 1 KB each): a burst beyond them is lost
    # to it, counted and told (Finding.missed_before, missed_after); 64 subscribers x 1,000
    # hold ~64 MB.
    stream_queue_size: int = Field(
        1000, gt=0, le=100_000, description="findings queued per stream subscriber"
    )
    # The last findings published, held for subscribers that resume after a lost connection,
    # whatever the number of subscribers: about 0.5 KB each as sent (redacted; names cut at
    # 128 characters), and the tags of 16 times as many (at most 65,536; about 160 bytes
    # each, names kept as digests). A client away longer loses the older, and is told.
    stream_replay_size: int = Field(
        1000, ge=0, le=100_000, description="findings held for stream subscribers that resume"
    )

    @field_validator("show_fields")
    @classmethod
    def _field_paths(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        for entry in entries:
            if not all(part.strip() for part in entry.split(".")):
                raise ValueError(
                    f"{entry!r} is no field path: write 'field', 'field.inner' or 'tool.field'"
                )
        return entries


class MetricsSettings(_Section):
    label_value_cap: int = Field(100, gt=0, le=10_000)
    agent_tool_pair_cap: int = Field(1000, gt=0, le=100_000)
    agents: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()


#: A listener's name, as in ``ListenSettings`` and ``App.addresses``.
Listener = Literal["grpc", "http", "metrics", "stream"]
LISTENERS: tuple[Listener, ...] = ("grpc", "http", "metrics", "stream")

# RFC 6750 section 2.1: b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
_BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def read_token_file(path: Path) -> tuple[str, ...]:
    """The bearer tokens in ``path``, one per line (blank lines, ``#`` comment lines and
    surrounding whitespace ignored: ``#`` is no token character; several tokens let clients
    move to a new one before the old one is removed).
    Raises ``OSError`` when the file cannot be read and ``ValueError`` naming the file and
    line (never the token) when it holds no token or a line is not an RFC 6750 token."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(_not_utf8(path, exc)) from None
    tokens = []
    for number, line in enumerate(text.splitlines(), start=1):
        token = line.strip()
        if token.startswith("#"):
            continue
        if token and not _BEARER_TOKEN.fullmatch(token):
            raise ValueError(f"{path}: line {number} is not a bearer token (RFC 6750 b64token)")
        if token:
            tokens.append(token)
    if not tokens:
        raise ValueError(f"{path}: holds no bearer token (one per line)")
    return tuple(tokens)


#: The validation context key that, false, leaves the files ``security`` names unread
#: (``load_config``'s ``security_files``).
_SECURITY_FILES = "security_files"


def _reads_security_files(info: ValidationInfo) -> bool:
    """Whether this validation reads the files ``security`` names (``load_config``)."""
    context = info.context
    return not isinstance(context, dict) or context.get(_SECURITY_FILES, True) is not False


def _readable(path: Path) -> Path:
    try:
        with path.open("rb"):
            return path
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _dates(path: Path) -> CertificateDates | None:
    try:
        return certificate_dates(path.read_bytes())
    except OSError:  # said by the check that the files load
        return None


def _first_to_expire(path: Path, now: datetime.datetime) -> CertificateDates | None:
    try:
        return first_to_expire(path.read_bytes(), now)
    except OSError:  # as _dates
        return None


def _dates_unread(field: str, path: Path) -> str:
    # OpenSSL loads PEM that ``cryptography`` does not read, e.g. "TRUSTED CERTIFICATE".
    return (
        f"security.tls.{field} {path}: no certificate dates can be read from it (PEM that"
        " OpenSSL loads but cryptography does not, such as a TRUSTED CERTIFICATE block): it"
        " is served, but neither warned of before it expires nor reported in"
        " toolwatch_tls_certificate_expiry_timestamp_seconds; write it as plain CERTIFICATE"
        " blocks"
    )


def _ssl_reason(exc: ssl.SSLError | OSError) -> str:
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None)
    return str(reason or exc).replace("_", " ").lower()


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
    return b""


class TlsSettings(_Section):
    """TLS on the listeners named in ``listeners`` (all four by default). PEM files, checked
    for changes at most every ``reload_seconds`` and reloaded when they changed (new
    connections get the new certificate; a set that does not load, or whose certificate is
    not valid then, keeps the previous one). An expired certificate is refused at start-up
    and by check-config (``check_certificate``), not when a reload validates the file again:
    security is restart-only, and the running set is kept whatever the file's dates
    (``tls.CertificateFiles`` refuses an expired one itself). One not valid yet, or one or a
    client CA with less than 14 days and less than a third of its lifetime left, is warned of
    (``Config.warnings``).
    The private key must not be encrypted. ``client_ca_file`` turns on mutual TLS: those
    listeners then accept only clients whose certificate that CA signed. ``client_names``
    narrows that to certificates naming one of them (``toolwatch.security.ClientNames``): a CA
    shared with other services signs their certificates too."""

    cert_file: FilePath
    key_file: FilePath
    client_ca_file: FilePath | None = None
    client_names: tuple[str, ...] = ()
    listeners: tuple[Listener, ...] = LISTENERS
    # Above 240, ToolwatchSecurityFilesNotReloaded may miss a failure (Config.warnings).
    reload_seconds: Seconds = Field(60.0, gt=0, le=3600)

    @field_validator("listeners")
    @classmethod
    def _some_listener(cls, listeners: tuple[Listener, ...]) -> tuple[Listener, ...]:
        return _named_listeners(listeners, "TLS")

    @field_validator("client_names")
    @classmethod
    def _client_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not name or name != name.strip():
                raise ValueError(
                    f"{name!r}: a client name is a certificate's common name, DNS name, URI"
                    " or email address, written as in the certificate (no blanks around it)"
                )
            try:
                ipaddress.ip_address(name)
            except ValueError:
                continue
            raise ValueError(
                f"{name!r} is an IP address: a client is named by its certificate's common"
                " name or a DNS, URI or email subject alternative name, not by an address"
            )
        return tuple(dict.fromkeys(names))

    @field_validator("cert_file", "key_file", "client_ca_file")
    @classmethod
    def _file(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        if path is None or not _reads_security_files(info):
            return path
        return _readable(path)

    def expired(self, now: datetime.datetime) -> str | None:
        """Why the certificate cannot start a server at ``now``: it has expired, and every
        client would refuse it; else ``None``. One not valid yet is only warned of
        (``not_valid_yet``): a clock a little behind the CA's must not stop start-up."""
        dates = _dates(self.cert_file)
        if dates is None or now <= dates.not_after:
            return None
        return (
            f"{self.cert_file}: {dates.problem(now)}: every client would refuse it; install a"
            " renewed certificate"
        )

    def not_valid_yet(self, now: datetime.datetime) -> str | None:
        """What to warn of when the certificate is not valid yet at ``now``, else ``None``."""
        dates = _dates(self.cert_file)
        if dates is None or now >= dates.not_before:
            return None
        return (
            f"security.tls.cert_file {self.cert_file}: {dates.problem(now)}: until then clients"
            " whose clocks agree with this machine's refuse it"
        )

    def expiring(self, now: datetime.datetime) -> list[str]:
        """What to warn of when the certificate, or the first CA of the client CA file to
        expire, has less than 14 days and less than a third of its lifetime left at ``now``
        (``certificate_dates.expiry_warning``); or when the dates of either cannot be read."""
        said = []
        dates = _dates(self.cert_file)
        if dates is None:
            said.append(_dates_unread("cert_file", self.cert_file))
        when = expiry_warning(dates, now) if dates is not None else None
        if when is not None:
            said.append(
                f"security.tls.cert_file {self.cert_file}: the certificate {when}: every client"
                " refuses it from then on; renew it (toolwatch takes the renewed file within"
                " tls.reload_seconds, without a restart)"
            )
        ca = self.client_ca_file
        first = _first_to_expire(ca, now) if ca is not None else None
        if ca is not None and first is None:
            said.append(_dates_unread("client_ca_file", ca))
        when = expiry_warning(first, now) if first is not None else None
        if when is not None:
            said.append(
                f"security.tls.client_ca_file {ca}: a CA certificate in it {when}: the client"
                " certificates it signed are refused from then on; renew it, and them"
            )
        return said

    @model_validator(mode="after")
    def _names_need_a_client_ca(self) -> TlsSettings:
        if self.client_names and self.client_ca_file is None:
            raise ValueError(
                "client_names needs client_ca_file: without mutual TLS no client shows a"
                " certificate to take a name from"
            )
        return self

    @model_validator(mode="after")
    def _files_load(self, info: ValidationInfo) -> TlsSettings:
        if not _reads_security_files(info):
            return self
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(self.cert_file, self.key_file, password=_no_password)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(
                f"{self.cert_file} with key {self.key_file}: not a PEM certificate chain and "
                f"its unencrypted private key ({_ssl_reason(exc)})"
            ) from None
        if self.client_ca_file is not None:
            try:
                context.load_verify_locations(cafile=self.client_ca_file)
            except (ssl.SSLError, OSError) as exc:
                raise ValueError(
                    f"{self.client_ca_file}: not a PEM CA certificate ({_ssl_reason(exc)})"
                ) from None
        return self


def _named_listeners(listeners: tuple[Listener, ...], what: str) -> tuple[Listener, ...]:
    if not listeners:
        raise ValueError(
            f"names no listener, so {what} would guard none: name some of"
            f" {', '.join(LISTENERS)}, or leave the section out"
        )
    return listeners


class AuthSettings(_Section):
    """Bearer tokens (RFC 6750) required on the listeners named in ``listeners``.

    ``bearer_token_file`` holds the accepted tokens, one per line; it is checked for changes
    at most every ``reload_seconds`` and re-read when it changed. ``/metrics`` needs the
    token only when ``metrics`` is listed; ``/healthz``, ``/readyz`` and the gRPC health
    check (``Check``; its ``Watch`` stream does) never do (kubelet probes cannot send one).
    """

    bearer_token_file: FilePath
    reload_seconds: Seconds = Field(10.0, gt=0, le=3600)  # as TlsSettings.reload_seconds
    listeners: tuple[Listener, ...] = ("grpc", "http", "stream")

    @field_validator("listeners")
    @classmethod
    def _some_listener(cls, listeners: tuple[Listener, ...]) -> tuple[Listener, ...]:
        return _named_listeners(listeners, "bearer tokens")

    @field_validator("bearer_token_file")
    @classmethod
    def _has_tokens(cls, path: Path, info: ValidationInfo) -> Path:
        if not _reads_security_files(info):
            return path
        try:
            read_token_file(path)
        except OSError as exc:
            raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
        return path


class SecuritySettings(_Section):
    """TLS and bearer-token authentication of the listeners; both off by default (the
    default listeners are loopback-only)."""

    tls: TlsSettings | None = None
    auth: AuthSettings | None = None

    def uses_tls(self, listener: str) -> bool:
        return self.tls is not None and listener in self.tls.listeners

    def uses_auth(self, listener: str) -> bool:
        return self.auth is not None and listener in self.auth.listeners

    def exposure(self, listener: str) -> str | None:
        """What is wrong with ``listener`` if it is reachable beyond loopback, or ``None``.
        The metrics listener may go without client authentication (scrapes often do)."""
        tls, auth = self.uses_tls(listener), self.uses_auth(listener)
        if not tls and not auth:
            return "without TLS or authentication"
        if not tls:
            return "without TLS: its bearer tokens cross the network in clear text"
        mutual = self.tls is not None and self.tls.client_ca_file is not None
        if not auth and not mutual and listener != "metrics":
            return "with TLS but no client authentication: any client that reaches it is served"
        return None


class Config(_Section):
    """The whole configuration. ``Config()`` is the built-in default."""

    listen: ListenSettings = ListenSettings()
    ingest: IngestSettings = IngestSettings()
    assembly: AssemblySettings = AssemblySettings()
    policy: PolicySettings = PolicySettings()
    evaluators: EvaluatorsSettings = EvaluatorsSettings()
    golden: GoldenSettings = GoldenSettings()
    shadow: ShadowSettings = ShadowSettings()
    output: OutputSettings = OutputSettings()
    metrics: MetricsSettings = MetricsSettings()
    security: SecuritySettings = SecuritySettings()
    shutdown_grace_seconds: float = Field(10.0, gt=0, le=600)
    # After the drain, /metrics stays up until it is scraped once more, at most this long, so
    # the findings of the drain reach Prometheus (only if something has scraped it before and
    # the engine counted something since its last scrape).
    shutdown_metrics_linger_seconds: float = Field(15.0, ge=0, le=600)

    @model_validator(mode="after")
    def _sections_agree(self) -> Config:
        self.check_across_sections()
        return self

    def check_across_sections(self) -> None:
        """The checks that read several sections, which validation runs: for a configuration
        put together from two, as a reload does. Raises ``ValueError`` saying what is wrong."""
        self._references_agree()
        self._comparisons_have_their_reference()
        self._shown_fields_name_tools_as_findings_do()
        self.evaluators.tool_arguments.refuse_keys_of_one_target(self.policy.normalizer())

    def _references_agree(self) -> None:
        # One attribute cannot be both a case id and a pair key/role: a canary run would be
        # taken for a shadow half (or the reverse) and compared with the wrong reference.
        shared = self.golden.reference_keys() & self.shadow.reference_keys()
        if shared:
            raise ValueError(
                f"golden.case_id_attribute {min(shared)!r} is also a shadow attribute;"
                " use a different attribute for each"
            )

    def _comparisons_have_their_reference(self) -> None:
        # An evaluator held to a reference that never comes would never run, unsaid.
        missing = {"expected": self.golden.cases_file is None, "source": not self.shadow.enabled}
        setting = {"expected": "golden.cases_file is not set", "source": "shadow is off"}
        for name, evaluator in self.evaluators:
            # safety's policy checks run whatever it compares drift with: not refused.
            if not isinstance(evaluator, ComparingSettings):
                continue
            against = evaluator.against
            if evaluator.enabled and against != "auto" and missing[against]:
                raise ValueError(
                    f"evaluators.{name}.against is {against!r} but {setting[against]}, so it"
                    " would never run: configure that reference, use 'auto', or set"
                    f" evaluators.{name}.enabled: false"
                )

    def _shown_fields_name_tools_as_findings_do(self) -> None:
        # Findings carry normalized tool names: "Issue_Refund.order_id" would never match.
        normalize = self.policy.normalizer()
        named = self.named_tools()
        for entry in self.output.show_fields:
            tool, dot, field = entry.partition(".")
            normal = normalize(tool)
            if dot and tool != normal and normal in named:
                raise ValueError(
                    f"output.show_fields: {entry!r} names tool {tool!r}, which findings call"
                    f" {normal!r}: write {normal + '.' + field!r}"
                )

    def warnings(
        self, now: datetime.datetime | None = None, addresses: Mapping[str, str] | None = None
    ) -> list[str]:
        """Settings that are valid but defeat something (``serve`` logs them, ``check-config``
        prints them), with the files as they are at ``now`` (default: the current time).
        ``addresses``: the listeners' (``serve`` gives the bound ones; default: ``listen``'s),
        each warned about when it is reachable beyond loopback without TLS or authentication,
        or with bearer tokens but no TLS to keep them secret."""
        listen = self.listen
        if addresses is None:
            addresses = {
                "grpc": listen.grpc,
                "http": listen.http,
                "metrics": listen.metrics,
                "stream": listen.stream,
            }
        said = []
        for name, address in addresses.items():
            host, _port = parse_listen_address(address)
            problem = self.security.exposure(name)
            if not is_loopback(host) and problem is not None:
                said.append(f"{name} listener {address} is reachable beyond loopback {problem}")
        tls = self.security.tls
        now = now or datetime.datetime.now(datetime.UTC)
        early = tls.not_valid_yet(now) if tls else None
        if early is not None:
            said.append(early)
        said += tls.expiring(now) if tls else []
        for name, part in (("tls", self.security.tls), ("auth", self.security.auth)):
            if part is not None and part.reload_seconds > ALERTED_RELOAD_SECONDS:
                said.append(
                    f"security.{name}.reload_seconds is {part.reload_seconds:g}: a changed file"
                    " that fails to load may not fire ToolwatchSecurityFilesNotReloaded, which"
                    f" needs a look every 5 minutes (at most {ALERTED_RELOAD_SECONDS})"
                )
        if self.evaluators.tool_arguments.default_strategy == "numeric":
            said.append(
                "evaluators.tool_arguments.default_strategy is 'numeric': order ids and other"
                " numbers one apart score near 1 (1043 for 1042: 0.99), so a call on the wrong"
                " entity passes; name the numeric fields in strategies instead"
            )
        return said

    def named_tools(self) -> frozenset[str]:
        """The tools the policy and ``metrics.tools`` name, normalized as calls are."""
        policy = self.policy
        normalize = policy.normalizer()
        tools = {*self.metrics.tools, *policy.dangerous_tools, *policy.verification_tools}
        tools |= set(policy.repeat_limits)
        tools |= {tool for allowed in policy.allowed_tools.values() for tool in allowed}
        return frozenset(normalize(tool) for tool in tools)

    def named_agents(self) -> frozenset[str]:
        """The agents ``metrics.agents`` and the policy name (``allowed_tools`` keys other
        than ``*``, invariants' ``agents``), as written: kept as label values under the cap."""
        policy = self.policy
        agents = {*self.metrics.agents, *policy.allowed_tools}
        agents |= {agent for rule in policy.invariants for agent in rule.agents}
        return frozenset(agent for agent in agents if agent.strip() and agent != "*")

    def reference_keys(self) -> frozenset[str]:
        """Every attribute key ingest copies into ``SpanRecord.reference_keys``: the golden
        cases' case id, the shadow pairs' key and role (none unless they are configured)."""
        return self.golden.reference_keys() | self.shadow.reference_keys()

    def decode_options(self) -> DecodeOptions:
        """How the receivers and replay decode requests: the ingest limits, and the keys the
        golden cases and shadow pairs are found by."""
        return DecodeOptions(
            reference_keys=self.reference_keys(),
            max_value_bytes=self.ingest.max_value_bytes,
            max_span_attributes=self.ingest.max_span_attributes,
            decoder=self.ingest.decoder,
        )


def check_outputs(
    config: Config,
    path: Path | None,
    overrides: dict[str, Any] | None = None,
    origins: dict[str, str] | None = None,
) -> None:
    """Refuse an output file ``serve`` could not open (``serve`` and ``check-config`` call
    this; ``replay`` writes none, so a production configuration replays anywhere).
    ``config`` was loaded from ``path``, ``overrides`` and ``origins`` (``load_config``).
    Raises ``ConfigError`` naming where the value came from, the setting, the path and the
    reason."""
    for name in ("findings", "dump_tooltraces"):
        problem = _unwritable(getattr(config.output, name))
        if problem is not None:
            where = f"output.{name}"
            origin = _origin(where, _source(path), overrides or {}, origins or {})
            raise ConfigError(f"{origin}: {where}: {problem}")


def check_certificate(
    config: Config,
    path: Path | None,
    overrides: dict[str, Any] | None = None,
    origins: dict[str, str] | None = None,
    now: datetime.datetime | None = None,
) -> None:
    """Refuse an expired TLS certificate (``TlsSettings.expired``) at ``now`` (the wall
    clock by default): ``serve`` at start-up and ``check-config`` call this, a reload does not
    (``TlsSettings``). Arguments and ``ConfigError`` as ``check_outputs``."""
    tls = config.security.tls
    problem = tls.expired(now or datetime.datetime.now(datetime.UTC)) if tls else None
    if problem is not None:
        where = "security.tls.cert_file"
        origin = _origin(where, _source(path), overrides or {}, origins or {})
        raise ConfigError(f"{origin}: {where}: {problem}")


def private_file_warning(target: str, setting: str, status: os.stat_result) -> str | None:
    """The warning for ``target``, an output that holds arguments and results unredacted
    (the ToolTrace dump), when ``status`` says it is a regular file others may read (not
    ``/dev/null``): ``serve`` logs it when it opens the file, ``check-config`` prints it
    (``output_warnings``)."""
    mode = status.st_mode & 0o777
    if not stat.S_ISREG(status.st_mode) or not mode & 0o077:
        return None
    return (
        f"{target} ({setting}) may be read by others (mode {mode:o}), and it holds arguments"
        " and results unredacted: chmod 600 it"
    )


def output_warnings(config: Config) -> list[str]:
    """What ``serve`` would warn of when it opens the output files (``private_file_warning``):
    an existing ToolTrace dump others may read. One that does not exist yet is created
    readable by its owner alone."""
    target = config.output.dump_tooltraces
    if target is None or target == "-":
        return []
    try:
        status = os.stat(target)
    except OSError:  # not there yet (or refused by check_outputs)
        return []
    warning = private_file_warning(target, "output.dump_tooltraces", status)
    return [warning] if warning is not None else []


def _unwritable(target: str | None) -> str | None:
    if target is None or target == "-":
        return None
    if not target.strip():
        return "empty path: give a file, - for standard output, or null for off"
    if os.path.basename(target) in ("", ".", ".."):  # Path("new.jsonl/") drops the "/"
        return f"{target} names a directory, not a file"
    path = Path(target)
    try:
        if path.is_dir():
            return f"{target} is a directory, not a file"
        folder = path.parent
        if not folder.is_dir():
            return _no_directory(folder)
        writes = path if path.exists() else folder
    except OSError as exc:  # a name too long, a loop of links, ...
        return f"{target}: {exc.strerror or exc}"
    if not os.access(writes, os.W_OK):
        return f"{writes} is not writable"
    return None


def _no_directory(folder: Path) -> str:
    """Why ``folder``, an output's, is no directory: missing, or under (or itself) a file."""
    for above in (folder, *folder.parents):
        if above.exists():
            if above.is_dir():
                break
            return f"{above} is not a directory"
    return f"directory {folder} does not exist"


def _source(path: Path | None) -> str:
    """How errors name where a configuration came from."""
    return str(path) if path else "defaults"


def load_config(
    path: Path | None,
    overrides: dict[str, Any] | None = None,
    origins: dict[str, str] | None = None,
    *,
    security_files: bool = True,
    path_origin: str | None = None,
) -> Config:
    """Read ``path`` (YAML), apply ``overrides`` (dotted keys, e.g. ``listen.grpc``), and
    validate. Raises ``ConfigError`` naming the file, the field path and the reason.
    ``origins`` says where an override was given (its flag or variable, by key), for the
    errors to blame it; one not named there is blamed on the command line/environment.

    ``security_files=False`` validates the ``security`` section without reading the files it
    names (TLS certificate, key and client CA, bearer-token file), which only the listeners
    use: ``replay`` binds none, so a production configuration replays where its Secrets are
    not mounted. ``serve`` (and a reload) and ``check-config`` read them.

    ``path_origin``: the environment variable that named ``path``, if one did; an error
    reading the file names it, as errors name the flag or variable of an override."""
    source = _source(path)
    try:
        data, root = _read_yaml(path) if path else ({}, None)
    except ConfigError as exc:
        if path_origin is None:
            raise
        raise ConfigError(f"{path_origin}: {exc}") from None
    ambiguous = _ambiguous_booleans(root, overrides or {})
    if ambiguous:
        lines = [f"{source}: {len(ambiguous)} configuration error(s)"]
        raise ConfigError("\n".join([*lines, *(f"  {source}: {line}" for line in ambiguous)]))
    if path is not None:
        _resolve_relative(data, path.parent)
    # After resolving: paths given as overrides (flags, env) are relative to the working
    # directory.
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    try:
        return Config.model_validate(data, context={_SECURITY_FILES: security_files})
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, exc, overrides or {}, origins or {})) from None


#: The file-path settings, as key paths.
_PATH_FIELDS = (
    ("golden", "cases_file"),
    ("security", "tls", "cert_file"),
    ("security", "tls", "key_file"),
    ("security", "tls", "client_ca_file"),
    ("security", "auth", "bearer_token_file"),
)


def _resolve_relative(data: dict[str, Any], base: Path) -> None:
    """Paths inside the file are relative to the file, not to the working directory."""
    for *parents, leaf in _PATH_FIELDS:
        node: Any = data
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(leaf), str) and node[leaf].strip():
            path = Path(node[leaf])
            node[leaf] = str(path if path.is_absolute() else base / path)


def _read_yaml(path: Path) -> tuple[dict[str, Any], yaml.Node | None]:
    """The file's settings, and its node tree (for where a value was written)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(_not_utf8(path, exc)) from None
    document = io.StringIO(text)
    document.name = str(path)  # so the error's mark names the file, not "<unicode string>"
    loader = YamlLoader(document)
    try:
        root = loader.get_single_node()
        numbers_as_written(root, Config)
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except RecursionError:  # the YAML library reads nesting by recursion
        raise ConfigError(f"{path}: not valid YAML: nested too deeply to read") from None
    finally:
        loader.dispose()
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data, root


def _ambiguous_booleans(root: yaml.Node | None, overrides: Mapping[str, Any]) -> list[str]:
    """Where the file wrote ``yes``, ``no``, ``on`` or ``off`` unquoted and the setting does
    not say which it means: YAML 1.1 read a boolean, ``YamlLoader`` (YAML 1.2) reads text.
    A boolean setting reads the boolean (``enabled: yes``, as before) and a text one the text
    (a tool named ``on``); a free-form value (a JSON Schema's ``enum: [NO]``) or a setting
    that null turns off (``findings: off``: a file named ``off``?) could mean either, so each
    is refused, naming where, the value and the fix. A value an override replaces is not
    looked at."""
    problems = []
    for loc, scalar in yaml11_booleans(root):
        where = ".".join(str(part) for part in loc)
        if any(where == key or where.startswith(key + ".") for key in overrides):
            continue
        types = value_types(Config, loc)
        if types is None or bool in types or all(is_text(t) for t in types):
            continue  # an unknown key, a boolean, or text (pydantic says what else is wrong)
        word, meant = scalar.value, str(YAML11_BOOLEANS[scalar.value]).lower()
        mark = scalar.start_mark
        at = f"(line {mark.line + 1}, column {mark.column + 1})"
        if Any in types:
            fix = f"write {meant} for the boolean, or quote the text: '{word}'"
        elif type(None) in types:
            fix = f"write null to leave it unset (off), or quote the text: '{word}'"
        else:
            continue  # a number, a severity: the text is refused as such
        problems.append(
            f"{where}: {word} is the text {word!r} (YAML 1.2), not {meant} as YAML 1.1 read"
            f" it: {fix} {at}"
        )
    return problems + _yaml11_numbers(root, overrides)


def _yaml11_numbers(root: yaml.Node | None, overrides: Mapping[str, Any]) -> list[str]:
    """Where the file wrote a number in a form of YAML 1.1's (``010``: octal 8, ``0x400``,
    ``1:30``: 90) that ``YamlLoader`` (YAML 1.2) reads as text, in a number setting, and the
    text does not read as the same number (``1_000`` does): each is
    refused, naming where, the value and both readings, not silently read as another number
    (``010`` as 10) or refused as no number without saying why. A value an override
    replaces is not looked at."""
    problems = []
    for loc, scalar, number in yaml11_numbers(root):
        where = ".".join(str(part) for part in loc)
        if any(where == key or where.startswith(key + ".") for key in overrides):
            continue
        types = value_types(Config, loc)
        if types is None or not ({int, float} & set(types)) or str in types or Any in types:
            continue  # unknown, text (a name 007), or free-form (a JSON Schema's const: 14:30)
        word = scalar.value
        try:
            if float(word) == number:
                continue  # 1_000: the same number either way
        except ValueError:
            pass
        mark = scalar.start_mark
        problems.append(
            f"{where}: {word} is the text {word!r} (YAML 1.2), not the number {number} YAML"
            f" 1.1 read: write the number in decimal (line {mark.line + 1}, column"
            f" {mark.column + 1})"
        )
    return problems


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> str:
    return f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})"


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``dotted`` in ``data``, adding the sections on the way that are not there (or are
    null where a section may be: off, which the override turns on). A section the file gives
    as anything else stays as the file has it, so validation refuses it: an override cannot
    say what the file meant by it."""
    *parents, leaf = dotted.split(".")
    node = data
    for depth, key in enumerate(parents, start=1):
        if key not in node or (node[key] is None and takes_null(Config, tuple(parents[:depth]))):
            node[key] = {}
        child = node[key]
        if not isinstance(child, dict):
            return
        node = child
    node[leaf] = value


def _format_errors(
    source: str, exc: ValidationError, overrides: dict[str, Any], origins: dict[str, str]
) -> str:
    """One line per error: where the value came from, the field path, the reason."""
    lines = [f"{source}: {exc.error_count()} configuration error(s)"]
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        # pydantic locates a refused key as (..., mapping, key, "[key]").
        key = loc[-2:-1] if loc[-1:] == ("[key]",) else ()
        where = ".".join(str(part) for part in loc[: -2 if key else None]) or "(top level)"
        origin = _origin(where, source, overrides, origins, missing=error["type"] == "missing")
        value = error.get("input")
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        # A section's own checks get the whole section: the reason names what is wrong.
        got = (
            ""
            if key or (isinstance(value, dict) and error["type"] != "extra_forbidden")
            else f" (got {shown})"
        )
        named = f" (key {key[0]!r})" if key else ""
        lines.append(f"  {origin}: {where}{named}: {_reason(error)}{got}")
    return "\n".join(lines)


#: pydantic's wording of a wrong type, in the words of a YAML file.
_TYPE_REASONS = {
    "tuple_type": "expected a list",
    "list_type": "expected a list",
    "set_type": "expected a list",
    "frozen_set_type": "expected a list",
    "dict_type": "expected a mapping (key: value lines)",
    "model_type": "expected a mapping (key: value lines)",
    "model_attributes_type": "expected a mapping (key: value lines)",
    "path_type": "expected a file path",
}


def _reason(error: ErrorDetails) -> str:
    """Why a value was refused, in a configuration file's words."""
    kind, loc = error["type"], error["loc"]
    if kind == "extra_forbidden":
        return unknown_key(Config, loc, "setting")
    if kind in _TYPE_REASONS:
        return _TYPE_REASONS[kind]
    if kind == "string_too_short" and error.get("ctx", {}).get("min_length") == 1:
        return "empty"  # a name, trimmed
    message = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message


#: Where an override came from when ``origins`` does not say.
_OVERRIDDEN = "command line/environment"


def _origin(
    where: str,
    source: str,
    overrides: dict[str, Any],
    origins: dict[str, str],
    missing: bool = False,
) -> str:
    """Where the failing value came from: an override (its flag or variable, as ``origins``
    names it) set it or a field around it; or a section-level check failed on a section
    overrides set fields of, beside the file's; or a field is ``missing`` from a section an
    override set a field of (``TOOLWATCH_TLS_CERT`` without a key)."""
    for key in overrides:
        if where == key or where.startswith(key + "."):
            return origins.get(key, _OVERRIDDEN)
    section = where.rpartition(".")[0] if missing else where
    inside = [origins.get(key, _OVERRIDDEN) for key in overrides if key.startswith(section + ".")]
    if inside:
        return " and ".join((source, *dict.fromkeys(inside)))
    return source
