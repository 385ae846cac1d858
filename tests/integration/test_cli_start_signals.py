"""SIGHUP while ``toolwatch serve`` starts (a configuration reloader's, a ``postStart`` hook's),
and to the commands that reload nothing.

A process can catch a signal only once the interpreter runs its code: before, SIGHUP's
default ends it. What the tests hold ``serve`` to is that it catches SIGHUP before anything
slow to import (an audit hook in a child watches the imports), and that from then on no
SIGHUP ends it (the real console script is sent them from the moment ``/proc`` says it
catches SIGHUP until it listens).
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.cli_support import (
    EXAMPLES,
    FREE_PORTS,
    LISTENING,
    START_SECONDS,
    Served,
    clean_env,
    tail_process,
)
from tests.integration.conftest import until
from tests.integration.evaluation_support import MINIMAL_POLICY

RELOADED = "configuration reloaded: policy, golden, evaluators apply"

#: Imports a program as the console script does (``from toolwatch.cli import main``), with
#: the command line ARGV..., and prints the modules imported while SIGHUP still had its
#: default action, then whether it is caught: an audit hook sees every import as it starts.
_IMPORTED_BEFORE_SIGHUP_IS_CAUGHT = """
import sys, _signal
imported = []
def hook(event, args):
    if event == "import" and _signal.getsignal(_signal.SIGHUP) == _signal.SIG_DFL:
        imported.append(args[0])
sys.addaudithook(hook)
sys.argv = ["toolwatch", *sys.argv[1:]]
exec(sys.argv.pop(1))
caught = _signal.getsignal(_signal.SIGHUP) != _signal.SIG_DFL
import json
print(json.dumps({"imported": imported, "caught": caught}))
"""


def imported_before_sighup_is_caught(program: str, *argv: str) -> tuple[set[str], bool]:
    """The modules ``program`` imported while SIGHUP had its default action (it ends the
    process then), in a fresh interpreter whose command line is ``toolwatch ARGV``; whether
    SIGHUP is caught once it ran."""
    run = subprocess.run(
        [sys.executable, "-c", _IMPORTED_BEFORE_SIGHUP_IS_CAUGHT, program, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
        check=True,
    )
    report = json.loads(run.stdout.splitlines()[-1])
    return set(report["imported"]), bool(report["caught"])


def test_serve_catches_sighup_before_importing_anything_slow() -> None:
    """A reloader's SIGHUP at start-up ended ``serve`` up to 0.1 s in (more under load): the
    package imported ``importlib.abc``, ``dataclasses`` and ``pathlib`` first, 50 ms, before
    the CLI's first line. Now only what ``os``, ``signal`` and ``sys`` need, and
    ``importlib.machinery``, comes before it: the interpreter's own start is the window."""
    baseline, _ = imported_before_sighup_is_caught("import os, signal, sys, importlib.machinery")
    imported, caught = imported_before_sighup_is_caught("from toolwatch.cli import main", "serve")

    assert caught
    assert imported - baseline == {"__future__", "toolwatch", "toolwatch.compiled", "toolwatch.cli"}


def test_python_m_toolwatch_runs_the_cli_and_imports_no_more_before_sighup_is_caught() -> None:
    """``python -m toolwatch`` failed ("No module named toolwatch.__main__"). It runs the
    same CLI, and, as the console script, catches SIGHUP having imported only the CLI."""
    # runpy is -m's own: what it imports comes before any module of toolwatch.
    before = "import os, signal, sys, importlib.machinery, runpy, importlib.util"
    baseline, _ = imported_before_sighup_is_caught(before)
    program = "import runpy; runpy.run_module('toolwatch')"  # as -m does, main() not run
    imported, caught = imported_before_sighup_is_caught(program, "serve")
    assert caught
    assert imported - baseline == {"__future__", "toolwatch", "toolwatch.compiled", "toolwatch.cli"}
    run = subprocess.run(
        [sys.executable, "-m", "toolwatch", "check-config", str(EXAMPLES / "toolwatch.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
        check=False,
    )
    said = f"{EXAMPLES / 'toolwatch.yaml'}: ok, 5 golden case(s)\n"
    assert (run.returncode, run.stdout) == (0, said), run.stderr


def test_the_commands_that_reload_nothing_leave_sighup_to_its_default() -> None:
    """``tail`` is a terminal's program: the SIGHUP of a closed terminal ends it, as it ends
    ``replay`` and ``check-config``; none of them reloads anything."""
    for command in ("tail", "replay", "check-config"):
        _, caught = imported_before_sighup_is_caught("from toolwatch.cli import main", command)
        assert not caught, command


def caught_signals(pid: int) -> int:
    """The mask of the signals process ``pid`` catches (``SigCgt`` in ``/proc``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return int(line.split()[1], 16)
    raise AssertionError(f"no SigCgt for {pid}")


def catches_sighup(process: subprocess.Popen[str]) -> Callable[[], bool]:
    return lambda: bool(caught_signals(process.pid) & (1 << (signal.SIGHUP - 1)))


def hang_up_until_listening(served: Served) -> int:
    """Sends ``served`` SIGHUP about every millisecond until its ``listening`` line is read;
    how many it sent."""
    sent = 0
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        assert served.process.poll() is None, f"ended by a SIGHUP: {served.seen}"
        served.process.send_signal(signal.SIGHUP)
        sent += 1
        try:
            line = served.lines.get(timeout=0.001)
        except queue.Empty:
            continue
        assert line is not None, f"ended: {served.process.wait()} {served.seen}"
        served.seen.append(line)
        if LISTENING.search(line):
            return sent
    raise AssertionError(f"no listening line: {served.seen}")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_sighups_from_when_serve_catches_them_until_it_listens_make_one_reload_after(
    tmp_path: Path,
) -> None:
    """SIGHUP after SIGHUP while ``serve`` starts: it survives them all, and they ask for one
    reload, once it listens (more only for those that came after it listened: the test
    cannot tell when its SIGHUPs arrive). A reload in the middle of the start ran for each
    that came once the server's handler was in place. SIGTERM then drains and exits 0."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(MINIMAL_POLICY)
    served = Served(["--config", str(config), *FREE_PORTS], clean_env())
    try:
        assert until(catches_sighup(served.process), START_SECONDS)
        sent = hang_up_until_listening(served)
        assert served.terminate() == 0
    finally:
        served.process.kill()

    messages = [line.split(": ", 1)[-1] for line in served.seen]
    listening = next(at for at, said in enumerate(messages) if said.startswith("listening "))
    reloads = [at for at, said in enumerate(messages) if "configuration reload" in said]
    assert sent > 1
    assert reloads, messages
    assert min(reloads) > listening, messages
    assert all(messages[at].startswith(RELOADED) for at in reloads), messages
    assert len(reloads) < sent, (len(reloads), sent)
    assert "shutting down" in messages


def test_a_sighup_ends_tail_as_a_closed_terminal_does() -> None:
    """``tail`` keeps SIGHUP's default: a terminal that closes ends it."""
    process = tail_process("--reconnect", "--target", "127.0.0.1:9")  # nothing listens
    try:
        assert process.stderr is not None
        assert "reconnecting" in process.stderr.readline()  # running, not starting
        process.send_signal(signal.SIGHUP)
        assert process.wait(timeout=30) == -signal.SIGHUP
    finally:
        process.kill()
        process.communicate()
