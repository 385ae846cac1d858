"""``toolwatch replay`` stopped with Ctrl-C ends as a command does, without a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from tests.integration.cli_support import EXAMPLES, clean_env, toolwatch_script


def test_ctrl_c_during_a_replay_prints_no_traceback(tmp_path: Path) -> None:
    """docs/commands.md, Exit codes: 130 for Ctrl-C, as a shell reports a command that signal
    ended. A replay of a large capture takes minutes; Ctrl-C in it printed a Python traceback
    from wherever it was (``tooltrace_from_dict``, ``json.loads``, ...). The capture is a FIFO
    held open: replay has opened it once the write end opens, and is reading when
    interrupted, however fast the machine."""
    capture = tmp_path / "capture.otlp.jsonl"
    os.mkfifo(capture)
    request = (EXAMPLES / "unverified-refund.otlp.json").read_text()
    line = json.dumps(json.loads(request), separators=(",", ":")) + "\n"
    process = subprocess.Popen(
        [toolwatch_script(), "replay", "--no-progress", str(capture)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        with capture.open("w") as writer:  # opens once replay has opened the other end
            writer.write(line * 100)
            writer.flush()
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert "Traceback" not in stderr, stderr[-600:]
    assert process.returncode == 130, (process.returncode, stderr[-600:])
