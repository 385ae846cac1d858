"""The project's integration fixtures (a real server on port 0, an injected clock)."""

from tests.integration.conftest import serve_process, start_server  # noqa: F401
