"""Configuration errors and warnings of the security files: client names, certificates expired,
not valid yet or expiring, client CAs, empty paths, token files, files read only when used."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import grpc
import pytest

from tests.certificates import ca_certificate
from tests.unit.config_errors_support import error_lines
from toolwatch.config import ConfigError, check_certificate, load_config
from toolwatch.ingest.decode_requests import scanner
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock
from toolwatch.references.shadow import ShadowJoiner


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, object]:
    import trustme  # noqa: PLC0415 (only these tests need certificates)

    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    cert, key, client_ca = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(client_ca))
    return {
        "security.tls.cert_file": str(cert),
        "security.tls.key_file": str(key),
        "security.tls.client_ca_file": str(client_ca),
    }


@pytest.mark.parametrize(
    ("names", "reason"),
    [
        (["10.1.2.3"], "'10.1.2.3' is an IP address: a client is named by its certificate's"),
        (["::1"], "'::1' is an IP address"),
        ([""], "'': a client name is a certificate's common name, DNS name, URI or email"),
        ([" collector "], "' collector ': a client name is a certificate's common name"),
    ],
)
def test_a_client_name_that_no_certificate_field_could_match_is_refused(
    tls_files: dict[str, object], names: list[str], reason: str
) -> None:
    lines = error_lines(None, {**tls_files, "security.tls.client_names": names})
    assert lines[1].startswith("  command line/environment: security.tls.client_names: ")
    assert reason in lines[1]


def test_client_names_need_mutual_tls(tls_files: dict[str, object]) -> None:
    del tls_files["security.tls.client_ca_file"]
    lines = error_lines(None, {**tls_files, "security.tls.client_names": ["collector"]})
    assert "security.tls: " in lines[1]
    assert lines[1].endswith(
        "client_names needs client_ca_file: without mutual TLS no client shows a certificate"
        " to take a name from"
    )


def test_client_names_are_kept_once_each_in_order(tls_files: dict[str, object]) -> None:
    names = ["spiffe://cluster.local/ns/o/sa/c", "collector", "collector"]
    config = load_config(None, {**tls_files, "security.tls.client_names": names})
    assert config.security.tls is not None
    assert config.security.tls.client_names == ("spiffe://cluster.local/ns/o/sa/c", "collector")


DAY, HOUR = datetime.timedelta(days=1), datetime.timedelta(hours=1)
MINUTE, SECOND = datetime.timedelta(minutes=1), datetime.timedelta(seconds=1)
#: A certificate's end a year after the real time, to the second.
LATER = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + 365 * DAY


def certificate_files(
    tmp_path: Path,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
) -> tuple[Path, dict[str, object]]:
    """A certificate for 127.0.0.1 valid between those dates (trustme's defaults: 2000 to
    3000), and the overrides serving it."""
    import trustme  # noqa: PLC0415 (only these tests need certificates)

    leaf = trustme.CA().issue_cert("127.0.0.1", not_before=not_before, not_after=not_after)
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return cert, {"security.tls.cert_file": str(cert), "security.tls.key_file": str(key)}


def test_an_expired_certificate_stops_start_up_naming_the_file_and_its_dates(
    tmp_path: Path,
) -> None:
    """Every client would refuse it: nothing could connect. ``serve`` and check-config check
    it (``check_certificate``); loading the file, as a SIGHUP does, does not: security is
    restart-only, and the running set is kept."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    begun, ended = now - datetime.timedelta(days=30), now - datetime.timedelta(days=1)
    cert, overrides = certificate_files(tmp_path, begun, ended)
    config = load_config(None, overrides)
    check_certificate(config, None, overrides, now=ended)  # valid to the second
    with pytest.raises(ConfigError) as refused:
        check_certificate(config, None, overrides, now=ended + SECOND)
    assert str(refused.value) == (
        f"command line/environment: security.tls.cert_file: {cert}: the certificate expired"
        f" at {ended:%Y-%m-%d %H:%M:%S} UTC (valid from {begun:%Y-%m-%d %H:%M:%S} UTC to"
        f" {ended:%Y-%m-%d %H:%M:%S} UTC): every client would refuse it; install a renewed"
        " certificate"
    )


def test_a_certificate_not_valid_yet_is_warned_of_not_refused(tmp_path: Path) -> None:
    """Refusing it would be a trap for a clock a little behind the CA's: a certificate just
    issued would stop start-up until the clocks agree."""
    cert, overrides = certificate_files(tmp_path)
    config = load_config(None, overrides)
    early = datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=datetime.UTC)
    assert config.warnings(now=early, defaults=True) == [
        f"security.tls.cert_file {cert}: the certificate is not valid until 2000-01-01 00:00:00"
        " UTC (valid from 2000-01-01 00:00:00 UTC to 3000-01-01 00:00:00 UTC): until then"
        " clients whose clocks agree with this machine's refuse it"
    ]
    assert config.warnings(now=early + datetime.timedelta(seconds=1), defaults=True) == []


def test_a_certificate_expiring_within_14_days_is_warned_of_with_its_date(
    tmp_path: Path,
) -> None:
    """ToolwatchCertificateExpiresSoon's threshold for a 90-day certificate (a third of its
    lifetime is 30 days): 14 days left is not warned of, less is. (Later than the real time,
    which the configuration refuses an expired one at.)"""
    ends = LATER
    cert, overrides = certificate_files(tmp_path, not_before=ends - 90 * DAY, not_after=ends)
    config = load_config(None, overrides)
    assert config.warnings(now=ends - 14 * DAY, defaults=True) == []
    assert config.warnings(now=ends - 14 * DAY + SECOND, defaults=True) == [
        f"security.tls.cert_file {cert}: the certificate expires at {ends:%Y-%m-%d %H:%M:%S} UTC,"
        " in 13 days 23 hours: every client refuses it from then on; renew it (toolwatch takes"
        " the renewed file within tls.reload_seconds, without a restart)"
    ]


@pytest.mark.parametrize(
    ("lifetime", "warned_within", "left"),
    [
        (DAY, 8 * HOUR, "7 hours 59 minutes"),  # a mesh's certificate
        (HOUR, 20 * MINUTE, "0 hours 19 minutes"),  # a SPIFFE SVID's
        (7 * DAY, 2 * DAY + 8 * HOUR, "2 days 7 hours"),  # some internal CAs'
    ],
)
def test_a_short_lived_certificate_is_warned_of_with_a_third_of_its_lifetime_left(
    tmp_path: Path, lifetime: datetime.timedelta, warned_within: datetime.timedelta, left: str
) -> None:
    """Always under 14 days, so warned of only past 2/3 of its lifetime, where cert-manager
    renews: fresh, or with exactly a third left, it is not."""
    ends = LATER
    cert, overrides = certificate_files(tmp_path, not_before=ends - lifetime, not_after=ends)
    config = load_config(None, overrides)
    assert config.warnings(now=ends - lifetime, defaults=True) == []  # just issued
    assert config.warnings(now=ends - warned_within, defaults=True) == []
    assert config.warnings(now=ends - warned_within + SECOND, defaults=True) == [
        f"security.tls.cert_file {cert}: the certificate expires at {ends:%Y-%m-%d %H:%M:%S} UTC,"
        f" in {left}: every client refuses it from then on; renew it (toolwatch takes the"
        " renewed file within tls.reload_seconds, without a restart)"
    ]


def test_a_client_ca_expiring_within_14_days_is_warned_of_with_its_date(
    tmp_path: Path,
) -> None:
    """The first CA of the file to expire: its clients are refused from then on. Its own
    lifetime counts (6 days: warned of under 2 days left), not the other CA's (14 days)."""
    ends = LATER
    _cert, overrides = certificate_files(tmp_path)
    client_ca = tmp_path / "client-ca.pem"
    old = ca_certificate("old", ends, not_before=ends - 6 * DAY)
    client_ca.write_bytes(ca_certificate("new", ends + 400 * DAY) + old)
    config = load_config(None, {**overrides, "security.tls.client_ca_file": str(client_ca)})
    assert config.warnings(now=ends - 2 * DAY, defaults=True) == []
    assert config.warnings(now=ends - 2 * DAY + SECOND, defaults=True) == [
        f"security.tls.client_ca_file {client_ca}: a CA certificate in it expires at"
        f" {ends:%Y-%m-%d %H:%M:%S} UTC, in 1 days 23 hours: the client certificates it signed"
        " are refused from then on; renew it, and them"
    ]
    # Expired beside a valid one, the old CA verifies no one and no one needs it: the new one
    # is the file's first to expire (a rotation keeps the old CA in the file).
    assert config.warnings(now=ends + SECOND, defaults=True) == []


def test_a_client_ca_file_whose_cas_have_all_expired_is_warned_of_by_the_last(
    tmp_path: Path,
) -> None:
    ends = LATER
    _cert, overrides = certificate_files(tmp_path)
    client_ca = tmp_path / "client-ca.pem"
    client_ca.write_bytes(
        ca_certificate("older", ends - 10 * DAY, not_before=ends - 90 * DAY)
        + ca_certificate("old", ends, not_before=ends - 90 * DAY)
    )
    config = load_config(None, {**overrides, "security.tls.client_ca_file": str(client_ca)})
    assert config.warnings(now=ends + SECOND, defaults=True) == [
        f"security.tls.client_ca_file {client_ca}: a CA certificate in it expired at"
        f" {ends:%Y-%m-%d %H:%M:%S} UTC: the client certificates it signed are refused from then"
        " on; renew it, and them"
    ]


def test_a_client_ca_whose_dates_cannot_be_read_is_warned_of_not_refused(
    tmp_path: Path, tls_files: dict[str, object]
) -> None:
    """OpenSSL loads a TRUSTED CERTIFICATE block, ``cryptography`` reads no dates from it:
    served, but with no expiry warning or gauge, which start-up says."""
    client_ca = Path(str(tls_files["security.tls.client_ca_file"]))
    client_ca.write_bytes(client_ca.read_bytes().replace(b"CERTIFICATE", b"TRUSTED CERTIFICATE"))
    config = load_config(None, tls_files)
    assert config.warnings(defaults=True) == [
        f"security.tls.client_ca_file {client_ca}: no certificate dates can be read from it"
        " (PEM that OpenSSL loads but cryptography does not, such as a TRUSTED CERTIFICATE"
        " block): it is served, but neither warned of before it expires nor reported in"
        " toolwatch_tls_certificate_expiry_timestamp_seconds; write it as plain CERTIFICATE"
        " blocks"
    ]


@pytest.mark.parametrize(
    ("setting", "value", "bound"),
    [
        # gRPC takes its channel options as C ints: serve died with an OverflowError.
        ("ingest.max_request_bytes", 3_000_000_000, 2_147_483_647),
        # The compiled scanner takes a C ssize_t: serve and replay died building it.
        ("ingest.max_value_bytes", 2**63, 2_147_483_647),
        # A half's wait becomes nanoseconds: 1e300 s overflowed when serve or replay began.
        ("shadow.pair_timeout_seconds", 1e300, 604_800),
    ],
)
def test_a_value_too_large_for_where_it_goes_is_refused_not_a_crash(
    setting: str, value: float, bound: int
) -> None:
    lines = error_lines(None, {setting: value})
    assert lines[1] == (
        f"  command line/environment: {setting}: Input should be less than or equal to"
        f" {bound} (got {value!r})"
    )
    largest = load_config(None, {"shadow.enabled": True, setting: bound})
    scanner(largest.decode_options())  # the compiled one where it is built
    ShadowJoiner(largest.shadow, ManualClock(), NoopMetrics())
    asyncio.run(grpc_server(largest.ingest.max_request_bytes))


async def grpc_server(max_request_bytes: int) -> None:
    """Builds the gRPC server as serve does with this request cap (its options are C ints)."""
    options = [("grpc.max_receive_message_length", max_request_bytes)]
    await grpc.aio.server(options=options).stop(None)


def test_a_token_file_that_is_not_utf8_is_named_with_the_byte(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_bytes(b"good-token\n\xff\n")
    lines = error_lines(None, {"security.auth.bearer_token_file": str(tokens)})
    # As the configuration file's own check says it, not "'utf-8' codec can't decode ...".
    assert lines[1] == (
        f"  command line/environment: security.auth.bearer_token_file: {tokens}: not UTF-8 text"
        f" (byte 11: invalid start byte) (got {str(tokens)!r})"
    )


def test_security_files_are_read_unless_the_loader_is_told_they_are_not_used(
    tmp_path: Path,
) -> None:
    """``replay`` binds no listener: its configuration's TLS and token files (Secrets mounted
    in the pod alone) are not read; the section is validated all the same."""
    missing = tmp_path / "not-mounted"
    security = {
        "security.tls.cert_file": str(missing / "tls.crt"),
        "security.tls.key_file": str(missing / "tls.key"),
        "security.auth.bearer_token_file": str(missing / "token"),
    }
    lines = error_lines(None, security)
    assert lines[0] == "defaults: 3 configuration error(s)"
    assert all(": cannot read: No such file or directory" in line for line in lines[1:])
    config = load_config(None, security, security_files=False)
    assert config.security.tls is not None and config.security.tls.cert_file.parent == missing
    with pytest.raises(ConfigError, match=r"security.tls.cert_fil: unknown setting"):
        load_config(None, {**security, "security.tls.cert_fil": "x"}, security_files=False)
