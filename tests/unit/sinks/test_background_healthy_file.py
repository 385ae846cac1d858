"""a healthy output must not lose lines because they are long.

The output is a real ``LineFile`` on a real file in ``tmp_path`` (a local disk with room):
nothing blocks, so the writer thread is only ever behind by what the event loop published
since it last ran.
"""

from __future__ import annotations

import logging
from pathlib import Path

from toolwatch.sinks.background import OUTPUT_BACKLOG_CHARS, BackgroundOutput
from toolwatch.sinks.linefile import LineFile, WriteFailures

_WAIT = 10.0


class _Failures:
    def __init__(self) -> None:
        self.count = 0

    def failed(self) -> None:
        self.count += 1


def test_two_large_tooltraces_published_back_to_back_are_both_written_to_a_healthy_file(
    tmp_path: Path,
) -> None:
    """Scenario: ``output.dump_tooltraces`` on a local disk with room. One tick completes two
    runs of a retrieval agent whose tool results are large (``ingest.max_value_bytes`` is
    64 KiB a value: 40 calls with a 64 KiB result make a ToolTrace line of about 2.6 Mi
    characters); ``ToolTraceWriter`` publishes one line each, back to back on the event loop.

    Was: the second line is lost whenever the first is still queued or being written (its
    characters count against the 4 Mi bound until its write returns), which is nearly always
    when both come from one tick: the thread cannot even run until the loop lets go of the
    GIL. It is counted in ``toolwatch_output_failures_total{output="tooltraces"}`` and logged
    as "blocked: 2,622,058 characters written before it still wait to be written", on a disk
    that never blocked. A line longer than the bound is lost whenever anything at all waits.

    Now: write both, as before 1eeaddc (every line reached a healthy file): e.g. when a
    line does not fit, let ``write`` wait (briefly, bounded) for the thread, or lose lines only
    once the thread has been blocked in a write for some time, or bound by lines waiting
    behind a write that has not returned rather than by characters in flight.

    Regression: before 1eeaddc the dump's lines were written synchronously; none was lost on
    a healthy disk.
    """
    path = tmp_path / "tooltraces.jsonl"
    failures = _Failures()
    told = WriteFailures("the ToolTrace dump", failures.failed, logging.getLogger(__name__))
    output = BackgroundOutput(LineFile(str(path)), told)
    line = '{"trace_id":"%s","calls":[' + ",".join(['{"result":"' + "r" * 65_536 + '"}'] * 40)
    first, second = (line % trace + "]}\n" for trace in ("a" * 32, "b" * 32))
    assert len(first) + len(second) > OUTPUT_BACKLOG_CHARS
    assert len(first) < OUTPUT_BACKLOG_CHARS and len(second) < OUTPUT_BACKLOG_CHARS
    try:
        output.write(first)
        output.write(second)
        assert output.written(_WAIT)
        written = [row[:45] for row in path.read_text().splitlines()]
        assert (written, failures.count) == (
            [first[:45], second[:45]],
            0,
        )
    finally:
        output.close(_WAIT)
