"""The integration suite's fixtures for the review's tests: a real server on loopback port 0
(``start_server``)."""

from tests.integration.conftest import _build_line_left_out, start_server

__all__ = ["_build_line_left_out", "start_server"]
