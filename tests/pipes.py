"""Pipes for the tests of outputs that block (a log driver that stopped reading) or share one
pipe, and what they read from them."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading

__all__ = ["drained", "full_pipe", "is_json", "non_blocking_page"]


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


def non_blocking_page() -> tuple[int, int]:
    """A pipe's (read end, write end) that holds one page, its write end non-blocking (as a
    parent that shares it may have set it). The caller closes both."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    os.set_blocking(write_end, False)
    return read_end, write_end


def drained(read_end: int) -> tuple[bytearray, threading.Thread]:
    """What a reader thread, started now, reads from ``read_end`` until its write end closes;
    join the thread before reading it."""
    data = bytearray()

    def read() -> None:
        while chunk := os.read(read_end, 65536):
            data.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return data, reader


def is_json(line: str) -> bool:
    """Whether ``line`` is one JSON value (a line of the findings log or the dump, whole)."""
    try:
        json.loads(line)
    except ValueError:
        return False
    return True
