"""A rolling upgrade as an operator sees it: two ``toolwatch serve`` processes, one of the
old build and one of the new (each image's ``TOOLWATCH_REVISION``), scraped as Prometheus
scrapes pods mid-rollout. Real child processes, ``/metrics`` over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.integration.test_cli import clean_env, run_cli
from tests.integration.test_faults import ServeProcess, write_config
from toolwatch import __version__


def build_info(server: ServeProcess, revision: str) -> float:
    labels = {"version": __version__, "revision": revision}
    labels |= {"decoder": "compiled", "hot_path": "python"}
    reference = server.sample("toolwatch_build_info", labels | {"decoder": "reference"})
    return server.sample("toolwatch_build_info", labels) + reference


def test_each_pod_of_a_rollout_says_which_build_it_runs(
    tmp_path: Path, serve_process: Callable[..., ServeProcess]
) -> None:
    """Scenario: mid-rollout, one pod runs the old image and one the new; the operator asks
    Prometheus which pods run which build (the dashboard's "toolwatch builds" panel).

    Was: both said ``toolwatch_build_info{version="0.1.0"}`` (``__version__`` has not
    changed since the first commit): no way to tell old pods from new ones.
    Now: each says its build's ``revision`` (``TOOLWATCH_REVISION``, set by the image)."""
    old = serve_process(
        write_config(tmp_path / "old.yaml", {}), env={"TOOLWATCH_REVISION": "7aa4f47"}
    )
    new = serve_process(
        write_config(tmp_path / "new.yaml", {}), env={"TOOLWATCH_REVISION": "374c81e"}
    )
    assert (build_info(old, "7aa4f47"), build_info(new, "374c81e")) == (1.0, 1.0)
    assert (build_info(old, "374c81e"), build_info(new, "7aa4f47")) == (0.0, 0.0)


def test_version_and_check_config_name_the_revision(tmp_path: Path) -> None:
    """Was: ``toolwatch --version`` said ``toolwatch 0.1.0`` whatever the build.
    Now: ``toolwatch 0.1.0 (revision 374c81e)``; a revision that cannot be a label value is
    refused by ``check-config`` before the rollout, naming the variable and why."""
    shown = run_cli("--version", env=clean_env(TOOLWATCH_REVISION="374c81e"))
    assert (shown.returncode, shown.stdout) == (0, f"toolwatch {__version__} (revision 374c81e)\n")
    config = write_config(tmp_path / "c.yaml", {})
    checked = run_cli("check-config", str(config), env=clean_env(TOOLWATCH_REVISION="main branch"))
    assert checked.returncode == 2
    assert (
        "TOOLWATCH_REVISION: 'main branch' is not a revision:"
        " letters, digits and . _ + - only" in checked.stderr
    )
