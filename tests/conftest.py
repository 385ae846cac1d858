"""Suite-wide test settings.

Hypothesis: its timing checks (a per-example deadline, "data generation too slow") measure the
machine, not the code, and CI shares its machine; they are off for every test. What a test
checks stays random: each run explores new examples, and a failure prints its seed.

The compiled hot path (``toolwatch.compiled``): the suite runs what the install built, and
refuses to start when a compiled module is older than its source, since it would then test
code that is not the source's (``make test`` rebuilds first; ``TOOLWATCH_PURE_PYTHON=1``
runs the source without a rebuild).
"""

import gc
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from toolwatch import compiled, compiled_state

settings.register_profile("toolwatch", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("toolwatch")


def pytest_report_header() -> str:
    return f"toolwatch hot path: {compiled_state.state().describe()}"


def pytest_sessionstart(session: pytest.Session) -> None:
    stale = compiled_state.state().stale
    if stale:
        pytest.exit(
            f"compiled modules older than their source: {', '.join(stale)}; rebuild with "
            f"`make test` (or run the source: {compiled.PURE_PYTHON_ENV}=1)",
            returncode=4,
        )


@pytest.fixture
def no_automatic_gc() -> Iterator[None]:
    """What only a full collection would free stays, as under ``tune_gc``'s thresholds,
    where such collections are rare (and bytes do not count toward them): measured on
    ``toolwatch serve``, 40 gzip bodies of 7.8 KB refused in the decode thread (8 MB
    inflated) took it from 80 MiB resident to 1,011 MiB while they did stay."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
