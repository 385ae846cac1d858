"""Pipes for the tests of outputs that block (a log driver that stopped reading)."""

from __future__ import annotations

import contextlib
import os

__all__ = ["full_pipe"]


def full_pipe() -> tuple[int, int]:
    """A pipe's (read end, write end), the write end full: a blocking write to it waits
    until the read end is read. The caller closes both."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write_end, b"\n" * 65536)
    os.set_blocking(write_end, True)
    return read_end, write_end
