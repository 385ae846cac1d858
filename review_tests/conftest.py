"""The integration suite's real server on port 0 (``start_server``), for the review tests."""

from tests.integration.conftest import _build_line_left_out, start_server

__all__ = ["_build_line_left_out", "start_server"]
