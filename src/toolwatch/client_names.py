"""The names a client certificate gives (``certificate_names``): what ``tls.client_names``
is compared with, and what a refusal's log line calls a client (``toolwatch.senders``).

Threading: a function of its argument alone (its cache is thread-safe); any thread.
"""

from __future__ import annotations

import functools

from cryptography import x509
from cryptography.x509.oid import NameOID

__all__ = ["certificate_names"]


@functools.lru_cache(maxsize=256)  # a connection's calls show the same certificate
def certificate_names(certificate: bytes) -> frozenset[str]:
    """The names a client certificate (DER, or PEM) gives: every subject common name and its
    DNS, URI and email subject alternative names (not its IP addresses: they name a host).
    None when ``cryptography`` cannot read them all (an exotic alternative name, such as an
    x400Address, included): such a certificate names no client."""
    try:
        if certificate.startswith(b"-----BEGIN"):
            cert = x509.load_pem_x509_certificate(certificate)
        else:
            cert = x509.load_der_x509_certificate(certificate)
        names = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        try:
            alternative = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        except x509.ExtensionNotFound:
            return frozenset(names)
        for kind in (x509.DNSName, x509.UniformResourceIdentifier, x509.RFC822Name):
            names += alternative.value.get_values_for_type(kind)
    except Exception:  # not only ValueError: an x400Address name raises its own error
        return frozenset()  # a certificate it cannot read names no client
    return frozenset(names)
