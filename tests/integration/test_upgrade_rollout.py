"""A rolling upgrade as an operator sees it: two ``toolwatch serve`` processes, one of the
old build and one of the new (each image's ``TOOLWATCH_REVISION``), scraped as Prometheus
scrapes pods mid-rollout. Real child processes, ``/metrics`` over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.integration import agents
from tests.integration.cli_support import clean_env, run_cli
from tests.integration.conftest import until
from tests.integration.faults_support import ServeProcess, export, write_config
from toolwatch import __version__

COMPLETE = {"agent": "refund-bot", "outcome": "complete", "reference": "none", "traffic": "live"}
MISSING = COMPLETE | {"outcome": "missing_spans"}


def build_info(server: ServeProcess, revision: str) -> float:
    """``toolwatch_build_info`` of ``revision``, whichever decoder and hot path the build has
    (the compiled build's and pure Python's differ)."""
    labels = {"version": __version__, "revision": revision}
    return sum(
        server.sample("toolwatch_build_info", labels | {"decoder": decoder, "hot_path": hot_path})
        for decoder in ("compiled", "reference")
        for hot_path in ("compiled", "python")
    )


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


@pytest.mark.parametrize("from_history", [True, False], ids=["gateway-setting", "default"])
def test_a_trace_split_by_a_rollout_is_judged_as_docs_deployment_md_says(
    tmp_path: Path, serve_process: Callable[..., ServeProcess], from_history: bool
) -> None:
    """Scenario (gateway layout, docs/deployment.md, Upgrading toolwatch): a rollout step
    changes the replica set while a run is in flight; its first model call and its lookup
    went to the leaving replica, the rest (the refund, the root) to another.

    The leaving replica drains its half as unfinished (``incomplete_reason: shutdown``, no
    finding).
    Was: the half holding the root was judged complete, with no ``incomplete_reason``, and
    raised a false ``MISSING_VERIFICATION_STEP`` (a page): nothing in it said it lost spans.
    Now, with ``assembly.missing_spans_from_history`` (as ``gateway.yaml`` sets it): its
    model spans' input shows the model calls the run made before them (the lookup's request
    among them), whose spans it does not hold: it is judged incomplete, ``missing_spans``,
    raises no ``MISSING_VERIFICATION_STEP`` and is counted under that outcome (the ticket
    alert ``ToolwatchRunsEvaluatedIncomplete`` reads it). Without it (the default, for a
    sidecar, which never splits a run), judged as before."""
    fast = {"completion_wait_seconds": 0.5, "missing_spans_from_history": from_history}
    leaving = serve_process(write_config(tmp_path / "leaving.yaml", {}, assembly=fast))
    staying = serve_process(write_config(tmp_path / "staying.yaml", {}, assembly=fast))
    spans = agents.record(agents.refund_run(), "genai")
    assert [span.name for span in spans[:2]] == ["chat gpt-4o", "execute_tool lookup_order"]
    assert export(leaving.addresses["grpc"], spans[:2]) == SpanExportResult.SUCCESS
    assert export(staying.addresses["grpc"], spans[2:]) == SpanExportResult.SUCCESS
    outcome = MISSING if from_history else COMPLETE
    assert until(lambda: staying.sample("toolwatch_tool_traces_total", outcome) == 1.0)
    other = COMPLETE if from_history else MISSING
    assert staying.sample("toolwatch_tool_traces_total", other) == 0.0
    leaving.terminate(30)
    staying.terminate(30)
    judged = [(t["complete"], t["incomplete_reason"]) for t in leaving.tooltraces]
    assert (judged, leaving.findings) == ([(False, "shutdown")], [])
    judged = [(t["complete"], t["incomplete_reason"]) for t in staying.tooltraces]
    assert [c["tool_name"] for c in staying.tooltraces[0]["calls"]] == ["issue_refund"]
    found = [(f["category"], f["tool"]) for f in staying.findings]
    if from_history:
        assert judged == [(False, "missing_spans")]
        assert found == []  # nothing else in the policy reads what this half did
    else:
        assert judged == [(True, None)]
        assert found == [("MISSING_VERIFICATION_STEP", "issue_refund")]


def test_a_whole_run_that_skipped_the_lookup_still_pages(
    tmp_path: Path, serve_process: Callable[..., ServeProcess]
) -> None:
    """A gateway replica (``missing_spans_from_history``) given a whole run that refunds
    with no lookup: its model spans' input shows only the calls it holds, so it is complete
    and raises the page."""
    server = serve_process(
        write_config(
            tmp_path / "c.yaml",
            {},
            assembly={"completion_wait_seconds": 0.5, "missing_spans_from_history": True},
        )
    )
    spans = agents.record(agents.unverified_refund_run(), "genai")
    assert export(server.addresses["grpc"], spans) == SpanExportResult.SUCCESS
    assert until(lambda: server.sample("toolwatch_tool_traces_total", COMPLETE) == 1.0)
    server.terminate(30)
    assert [(t["complete"], t["incomplete_reason"]) for t in server.tooltraces] == [(True, None)]
    found = [(f["category"], f["tool"], f["incomplete_reason"]) for f in server.findings]
    assert found == [("MISSING_VERIFICATION_STEP", "issue_refund", None)]
