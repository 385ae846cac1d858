"""What unit and integration tests share of the engine's outputs: ``KeptToolTraces``, a
ToolTrace sink that keeps what it is given.

Import as ``from tests.kept_support import KeptToolTraces`` (``pythonpath = ["."]`` in the
pytest settings puts the repository root on the path for every test directory)."""

from __future__ import annotations

from toolwatch.model_traces import ToolTrace

__all__ = ["KeptToolTraces"]


class KeptToolTraces:
    """A ToolTrace sink that keeps what it is given (``--dump-tooltraces`` in memory)."""

    def __init__(self) -> None:
        self.traces: list[ToolTrace] = []

    def write(self, trace: ToolTrace) -> None:
        self.traces.append(trace)

    def close(self) -> None:
        pass
