"""The integration suite's fixtures for the review's tests: a real server on loopback port 0
(``start_server``) and certificates made at run time (``pki``)."""

from tests.integration.conftest import _build_line_left_out, start_server
from tests.integration.test_security import _no_ca_bundle_override, pki

__all__ = ["_build_line_left_out", "_no_ca_bundle_override", "pki", "start_server"]
