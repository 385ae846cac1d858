"""``strace``, for the tests that stop or watch a real ``toolwatch`` process at a chosen system
call: skipped where it is missing or may not trace (a container without ``SYS_PTRACE``)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

__all__ = ["strace_or_skip"]


def strace_or_skip() -> str:
    """The path of an ``strace`` that can trace here; the test is skipped, saying why, when
    there is none."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    probe = subprocess.run([strace, "-qq", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here: {probe.stderr.decode().strip()}")
    return strace
