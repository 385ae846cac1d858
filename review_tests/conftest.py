from tests.integration.conftest import start_server  # noqa: F401  # the project's fixture
