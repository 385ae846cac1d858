"""``App.stop`` gives blocked outputs "the rest of the shutdown's grace
(1 s at least)", not that once per output.

A real in-process server (``start_server``): its findings log and ToolTrace dump are real pipes
(``/dev/fd/N``) that are full and not read (a stalled log driver, a hung mount). The shutdown
waits real seconds for them, so it is timed on the real clock.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration import agents
from tests.integration.conftest import RunningServer, until
from tests.integration.faults_support import POLICY, export
from tests.pipes import full_pipe
from toolwatch.app_shutdown import OUTPUTS_CLOSE_SECONDS


@pytest.fixture
def full_pipes() -> Iterator[list[tuple[int, int]]]:
    pipes = [full_pipe(), full_pipe()]
    yield pipes
    for read_end, _write_end in pipes:  # the blocked writes fail (EPIPE): the threads end
        with contextlib.suppress(OSError):
            os.close(read_end)
    # The write ends stay open until the outputs' threads, given up by the shutdown, have
    # ended: a thread that looks at its path (``/dev/fd/N``) once N was closed and taken by
    # another file (the next test's subprocess.Popen's exec-status pipe) opened that file and
    # held it, and Popen waited for ever (a CI run stuck in the FIFO test after this one).
    assert until(lambda: not any(_output_thread(t) for t in threading.enumerate()), 10.0)
    for _read_end, write_end in pipes:
        with contextlib.suppress(OSError):
            os.close(write_end)


def _output_thread(thread: threading.Thread) -> bool:
    return thread.name.startswith("toolwatch-output ")


def test_two_blocked_outputs_share_the_shutdowns_wait_for_them(
    start_server: Callable[..., RunningServer],
    full_pipes: list[tuple[int, int]],
    tmp_path: Path,
) -> None:
    """Scenario: the findings log and the ToolTrace dump both block (both on standard output's
    stalled log driver, or on one hung mount); a run was judged, so each holds a line; the
    server stops with a grace of 1 s.

    Was: ``Outputs.close`` gives each output the whole wait in turn: the shutdown waits about
    2 s for them, the rest of the grace once per output. In the gateway manifest (preStop 5 s
    + grace 20 s + last scrape 15 s + 5 s margin = terminationGracePeriodSeconds 45) a
    shutdown whose receivers stopped at once waits about 2 x 19 s for the outputs: the kubelet
    kills it during the last-scrape linger, so the drain's counts are never scraped (what the
    linger is for).

    Now: the outputs share one deadline (the grace's end, 1 s at least), as ``App.stop``'s
    comment and the commit message say: close them all at once (set each closing, then join
    each until the one deadline).

    Regression: before 1eeaddc closing the files did not wait.
    """
    (_, findings_end), (_, dump_end) = full_pipes
    policy = tmp_path / "toolwatch.yaml"
    policy.write_text(yaml.safe_dump({"policy": POLICY}))
    server = start_server(
        policy,
        output__findings=f"/dev/fd/{findings_end}",
        output__dump_tooltraces=f"/dev/fd/{dump_end}",
    )
    spans = agents.record(agents.unverified_refund_run(), "genai")
    assert export(server.address("grpc"), spans).name == "SUCCESS"
    wait = server.app.config.assembly.completion_wait_seconds

    def advance_and_tick() -> int:
        server.clock.advance(wait + 0.001)
        return server.app.engine.tick()

    assert server.call(advance_and_tick) == 1  # a finding for the log, a line for the dump
    assert not server.app.outputs_written(0.2)  # both blocked, holding them

    started = time.monotonic()
    server.stop()  # App.stop(grace=1.0)
    took = time.monotonic() - started
    assert took < OUTPUTS_CLOSE_SECONDS + 0.6, (
        f"the shutdown waited {took:.1f} s for its blocked outputs; the grace was 1 s"
    )
