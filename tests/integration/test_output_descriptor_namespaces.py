"""``output.findings: /dev/stderr``, standard error a Unix stream socket (systemd's journal),
where ``/proc`` is not what the process's own would be (review of stderrsock): a PID
namespace that kept its parent's ``/proc`` (``unshare -pf`` without ``--mount-proc``, a
sandbox), and no ``/proc`` mounted at all (a bare chroot or container).

Real processes in real namespaces (``unshare``: skipped where the machine refuses it), their
standard error the child's end of a ``socket.socketpair()``, read from the other end; the
children run the sources ``PYTHONPATH`` names.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.integration.cli_support import clean_env

_WAIT = 60.0  # seconds: a bound on each child, never reached when it works

_NO_PROC = 'umount -l /proc && exec "$0" "$@"'  # sh -c: /proc unmounted, then argv run


def _unshare_works(*flags: str) -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(
            ["unshare", *flags, "sh", "-c", "true"], check=False, capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _run(argv: list[str]) -> tuple[int, str, str]:
    """``argv`` run, its standard error a Unix stream socket: its exit code, its standard
    output, and what it wrote to the socket."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.settimeout(_WAIT)
        done = subprocess.run(
            argv,
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=theirs.fileno(),
            env=clean_env(),
            timeout=_WAIT,
        )
        theirs.close()
        told = b"".join(iter(lambda: ours.recv(65536), b""))
    return done.returncode, done.stdout.decode(), told.decode()


_WRITE_DEV_STDERR = textwrap.dedent(
    """
    from toolwatch.outputs import open_text
    stream = open_text("output.findings", "/dev/stderr")
    stream.write("LINE\\n")
    stream.close()
    """
)


@pytest.mark.skipif(not _unshare_works("-pf"), reason="no PID namespaces here")
def test_dev_stderr_in_a_pid_namespace_that_shares_proc_writes_the_socket() -> None:
    """Was: the descriptor a path names was read from its text, ``/proc/PID/fd/N``, PID
    compared with ``os.getpid()``; in the namespace ``/proc/self`` is the process under its
    parent namespace's number, so ``/dev/stderr`` was not recognised and opening failed "No
    such device or address". Now: the socket ``os.stat`` finds there is matched with the
    descriptor whose ``fstat`` it is, whatever number led to it, and written."""
    code, _, told = _run(["unshare", "-pf", sys.executable, "-c", _WRITE_DEV_STDERR])
    assert (code, told) == (0, "LINE\n")


_CHECK_AND_OPEN = textwrap.dedent(
    """
    import json, os
    from toolwatch.config import ConfigError, check_outputs, load_config
    from toolwatch.outputs import OutputError, open_text
    setting = {"output.findings": "/dev/stderr"}
    verdict = {"proc": os.path.exists("/proc/self")}
    try:
        check_outputs(load_config(None, setting), None, setting)
        verdict["check"] = "ok"
    except ConfigError as exc:
        verdict["check"] = str(exc)
    try:
        open_text("output.findings", "/dev/stderr").close()
        verdict["open"] = "ok"
    except OutputError as exc:
        verdict["open"] = str(exc)
    print(json.dumps(verdict))
    """
)

_NEEDS_PROC = (
    "the path needs /proc mounted to name descriptor 2 (standard error), and /proc/self/fd"
    " is missing (give - for standard output)"
)


@pytest.mark.skipif(not _unshare_works("-m"), reason="no mount namespaces here")
def test_without_proc_check_config_and_serve_refuse_dev_stderr_alike() -> None:
    """Descriptor 2 open (the socket), ``/proc`` unmounted: ``/dev/stderr`` leads to
    ``/proc/self/fd/2``, which is not there.
    Was: ``check_outputs`` found no descriptor in the path, checked ``/dev`` writable, and
    passed (``check-config`` said the configuration was fine); ``serve`` then failed "No
    such file or directory", though descriptor 2 was open. Now: both refuse it, saying the
    path needs ``/proc`` mounted (and that ``-`` writes standard output)."""
    code, out, told = _run(
        ["unshare", "-m", "sh", "-c", _NO_PROC, sys.executable, "-c", _CHECK_AND_OPEN]
    )
    assert code == 0, told
    assert json.loads(out) == {
        "proc": False,
        "check": f"command line/environment: output.findings: /dev/stderr: {_NEEDS_PROC}",
        "open": f"cannot open /dev/stderr (output.findings): {_NEEDS_PROC}",
    }


@pytest.mark.skipif(not _unshare_works("-m"), reason="no mount namespaces here")
@pytest.mark.parametrize("command", ["check-config", "serve"])
def test_without_proc_the_commands_say_dev_stderr_needs_it(command: str) -> None:
    """The commands themselves, as ``check-config --findings /dev/stderr`` and ``serve``
    (listeners on port 0) run in a container without ``/proc``: each exits 2 at once with
    the same message, naming the flag."""
    flags = [f"--{name}-listen=127.0.0.1:0" for name in ("grpc", "http", "metrics", "stream")]
    argv = [sys.executable, "-m", "toolwatch.cli", command, "--findings", "/dev/stderr"]
    if command == "serve":
        argv += flags
    code, _, told = _run(["unshare", "-m", "sh", "-c", _NO_PROC, *argv])
    refused = f"--findings: output.findings: /dev/stderr: {_NEEDS_PROC}"
    assert (code, told) == (2, f"toolwatch: configuration error\n{refused}\n")
