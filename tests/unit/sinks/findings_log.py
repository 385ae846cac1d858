"""The findings log as the follow tests open it: ``open_outputs`` for ``output.findings`` at
a path (and ``output.dump_tooltraces`` where asked), with the writes' failures and the
thread's follow clock in the test's hands; waits bounded by ``WAIT`` (``permit_file``'s)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from permit_file import WAIT

from toolwatch.config import OutputSettings
from toolwatch.outputs import Outputs, open_outputs
from toolwatch.sinks.background_thread import FOLLOW_SECONDS
from toolwatch.sinks.findings import Redaction

__all__ = ["FollowedLog", "open_findings_log"]


def open_findings_log(
    path: Path,
    failed: Callable[[str], None] = lambda _label: None,
    clock: Callable[[], float] = lambda: 0.0,
    dump: Path | None = None,
) -> Outputs:
    """The outputs writing the findings log at ``path`` (a FIFO: a reader must be there, or
    the open is ``O_NONBLOCK``'s to decide) and the ToolTrace dump at ``dump`` (none:
    ``None``): no redaction, wall clock 0; each write lost is told to ``failed`` by its
    output's label; ``clock`` is the thread's follow clock (by default it never moves: a
    SIGHUP alone looks at the path). Raises ``OutputError`` as ``open_outputs`` does."""
    return open_outputs(
        OutputSettings(findings=str(path), dump_tooltraces=None if dump is None else str(dump)),
        [],
        [],
        Redaction(),
        wall_clock=lambda: 0,
        failed=failed,
        clock=clock,
    )


class FollowedLog:
    """The findings log ``findings.jsonl`` in ``logs`` (made here), its thread's follow clock
    in the test's hands; the writes it failed, by label."""

    def __init__(self, logs: Path) -> None:
        logs.mkdir()
        self.logs = logs
        self.path = logs / "findings.jsonl"
        self.failures: list[str] = []
        self._now = 0.0
        self.outputs = open_findings_log(self.path, self.failures.append, lambda: self._now)

    def write(self, line: str, *, after_a_look: bool = True) -> None:
        """``line`` written, once the thread has looked at its path (it was due), or with no
        look of its own (``after_a_look=False``: the clock does not move)."""
        if after_a_look:
            self._now += 2 * FOLLOW_SECONDS
        output = self.outputs.files[0].output
        output.write(line)
        assert output.written(WAIT)

    def sighup(self) -> None:
        """A SIGHUP's look at the path (``Outputs.reopen``), done once this returns."""
        self.outputs.reopen()
        assert self.outputs.files[0].output.written(WAIT)
