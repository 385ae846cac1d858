"""Running the ``toolwatch`` command as a process: its script, a clean environment, ``serve``
read on a pump thread, ``tail``, and the examples' policy and free ports."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

LISTENING = re.compile(
    r"listening grpc=(?P<grpc>\S+:\d+) http=(?P<http>\S+:\d+)"
    r" metrics=(?P<metrics>\S+:\d+) stream=(?P<stream>\S+:\d+)$"
)
START_SECONDS = 30.0
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def toolwatch_script() -> str:
    beside = Path(sys.executable).with_name("toolwatch")
    found = str(beside) if beside.exists() else shutil.which("toolwatch")
    assert found is not None, "the toolwatch console script is not installed"
    return found


#: ``serve``'s flags for free ports on every listener.
FREE_PORTS = tuple(
    arg
    for name in ("grpc", "http", "metrics", "stream")
    for arg in (f"--{name}-listen", "127.0.0.1:0")
)


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any ``TOOLWATCH_*`` variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLWATCH_")}
    return env | extra


def run_cli(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [toolwatch_script(), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env) if env is not None else clean_env(),
        check=False,
    )


def tail_process(*args: str) -> subprocess.Popen[str]:
    """``toolwatch tail ARGS`` as a process, its output and messages read as text."""
    return text_process([toolwatch_script(), "tail", *args])


def text_process(command: Sequence[str]) -> subprocess.Popen[str]:
    """``command`` as a process without input, its output and messages read as text."""
    return subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )


class Served:
    """A ``toolwatch serve`` subprocess whose stderr is read by a pump thread."""

    def __init__(
        self, args: Sequence[str], env: Mapping[str, str], command: Sequence[str] = ()
    ) -> None:
        self.process = subprocess.Popen(
            [*(command or [toolwatch_script(), "serve"]), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env),
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern: re.Pattern[str], timeout: float = START_SECONDS) -> re.Match[str]:
        """The first stderr line matching ``pattern``; fails at the deadline or at exit."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if (match := pattern.search(line)) is not None:
                return match
        raise AssertionError(f"no line matching {pattern.pattern!r} in {self.seen}")

    def terminate(self) -> int:
        """SIGTERM, then the exit code; the rest of stderr lands in ``seen``."""
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=60)
        while (line := self.lines.get(timeout=10)) is not None:
            self.seen.append(line)
        return code
