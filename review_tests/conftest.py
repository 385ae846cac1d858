"""The integration suite's fixtures (a real server on port 0), for the review's tests."""

from tests.integration.conftest import start_server

__all__ = ["start_server"]
