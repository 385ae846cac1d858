"""A rolling upgrade as an operator sees it: two ``toolwatch serve`` processes, one of the
old build and one of the new (each image's ``TOOLWATCH_REVISION``), scraped as Prometheus
scrapes pods mid-rollout. Real child processes, ``/metrics`` over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.conftest import until
from tests.integration.test_cli import clean_env, run_cli
from tests.integration.test_faults import ServeProcess, export, write_config
from toolwatch import __version__

COMPLETE = {"agent": "refund-bot", "outcome": "complete", "reference": "none", "traffic": "live"}


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


def test_a_trace_split_by_a_rollout_is_judged_as_docs_deployment_md_says(
    tmp_path: Path, serve_process: Callable[..., ServeProcess]
) -> None:
    """Scenario (gateway layout, docs/deployment.md, Upgrading toolwatch): a rollout step
    changes the replica set while a run is in flight; its first model call and its lookup
    went to the leaving replica, the rest (the refund, the root) to another.

    What the doc tells the operator to expect, pinned here: the leaving replica drains its
    half as unfinished (``incomplete_reason: shutdown``, no finding); the half holding the
    root is judged complete, with no ``incomplete_reason``, and raises a false
    ``MISSING_VERIFICATION_STEP``: nothing in it says it lost spans. A known limitation, not
    fixed: should it ever be, this test and the doc change together."""
    fast = {"completion_wait_seconds": 0.5}
    leaving = serve_process(write_config(tmp_path / "leaving.yaml", {}, assembly=fast))
    staying = serve_process(write_config(tmp_path / "staying.yaml", {}, assembly=fast))
    spans = agents.record(agents.refund_run(), "genai")
    assert [span.name for span in spans[:2]] == ["chat gpt-4o", "execute_tool lookup_order"]
    assert export(leaving.addresses["grpc"], spans[:2]) == SpanExportResult.SUCCESS
    assert export(staying.addresses["grpc"], spans[2:]) == SpanExportResult.SUCCESS
    assert until(lambda: staying.sample("toolwatch_tool_traces_total", COMPLETE) == 1.0)
    leaving.terminate(30)
    staying.terminate(30)
    judged = [(t["complete"], t["incomplete_reason"]) for t in leaving.tooltraces]
    assert (judged, leaving.findings) == ([(False, "shutdown")], [])
    assert [(t["complete"], t["incomplete_reason"]) for t in staying.tooltraces] == [(True, None)]
    found = [(f["category"], f["tool"], f["incomplete_reason"]) for f in staying.findings]
    assert found == [("MISSING_VERIFICATION_STEP", "issue_refund", None)]
