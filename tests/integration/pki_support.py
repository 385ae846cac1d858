"""The certificates and token file the security tests use, made at run time (trustme):
``make_pki`` and the ``pki`` fixture (tests/integration/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme

from tests.certificates import alt_names, write_client_certificate

TOKEN = "s3cret-token"


@dataclass(frozen=True)
class Pki:
    """PEM files: a server certificate for 127.0.0.1 and two client certificates, one
    signed by the CA the server trusts for clients and one by a stranger."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_ca: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path
    rogue_key: Path
    named_cert: Path
    named_key: Path
    token_file: Path
    clients: trustme.CA  # the client CA, to issue more client certificates

    def client_files(self, directory: Path, cert: bytes, key: bytes) -> tuple[Path, Path]:
        """``cert`` and ``key`` (PEM) written to ``directory``, for clients that read files."""
        paths = directory / "client-cert.pem", directory / "client-key.pem"
        paths[0].write_bytes(cert)
        paths[1].write_bytes(key)
        return paths

    def read(self, name: str) -> bytes:
        path: Path = getattr(self, name)
        return path.read_bytes()


def write_leaf(cert: trustme.LeafCert, cert_path: Path, key_path: Path) -> None:
    for pem in cert.cert_chain_pems:
        pem.write_to_path(str(cert_path), append=True)
    cert.private_key_pem.write_to_path(str(key_path))


#: The names of the client certificate ``named`` (the Collector's, as a cluster's CA would
#: issue it, SPIFFE ID and all; and an IP address, which names no client).
NAMED_CN = "otel-collector"
NAMED_DNS = "otel-collector.observability.svc"
NAMED_SPIFFE = "spiffe://cluster.local/ns/observability/sa/otel-collector"
NAMED_EMAIL = "collector@example.com"


def make_pki(d: Path) -> Pki:
    """The certificates of ``Pki``, made in the directory ``d``."""
    server_ca, client_ca, rogue_ca = trustme.CA(), trustme.CA(), trustme.CA()
    server_ca.cert_pem.write_to_path(str(d / "ca.pem"))
    client_ca.cert_pem.write_to_path(str(d / "client-ca.pem"))
    write_leaf(server_ca.issue_cert("127.0.0.1", "localhost"), d / "server.pem", d / "server.key")
    write_leaf(client_ca.issue_cert("agent.example"), d / "client.pem", d / "client.key")
    write_leaf(rogue_ca.issue_cert("agent.example"), d / "rogue.pem", d / "rogue.key")
    write_client_certificate(
        client_ca,
        d / "named.pem",
        d / "named.key",
        [NAMED_CN],
        alt_names(f"dns:{NAMED_DNS}", f"uri:{NAMED_SPIFFE}", f"email:{NAMED_EMAIL}", "ip:10.1.2.3"),
    )
    (d / "tokens").write_text(TOKEN + "\n")
    return Pki(
        ca=d / "ca.pem",
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        client_ca=d / "client-ca.pem",
        client_cert=d / "client.pem",
        client_key=d / "client.key",
        rogue_cert=d / "rogue.pem",
        rogue_key=d / "rogue.key",
        named_cert=d / "named.pem",
        named_key=d / "named.key",
        token_file=d / "tokens",
        clients=client_ca,
    )
