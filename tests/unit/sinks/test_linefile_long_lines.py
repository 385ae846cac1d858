"""``LineFile`` writes a line longer than ``_PIECE_CHARS`` a piece at a time (so that its bytes
are never all held beside it: ``background.OUTPUT_BACKLOG_CHARS``), and still whole or not at
all: a failure in a later piece cuts off the pieces written before it.

Real files in ``tmp_path``; a full disk is this process's RLIMIT_FSIZE (Python ignores
SIGXFSZ: the write that crosses it writes what fits and fails with EFBIG, as ENOSPC does)."""

from __future__ import annotations

import contextlib
import errno
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolwatch.sinks.linefile import _PIECE_CHARS, LineFile


@contextlib.contextmanager
def _file_size_limit(limit: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_a_long_line_of_characters_of_every_width_is_written_as_it_was(tmp_path: Path) -> None:
    """Pieces end between characters, whatever their UTF-8 width."""
    path = tmp_path / "findings.jsonl"
    line = ("aé€😀" * _PIECE_CHARS)[: 3 * _PIECE_CHARS + 5] + "\n"
    file = LineFile(str(path))
    try:
        assert file.write(line) == len(line)
    finally:
        file.close()
    assert path.read_text(encoding="utf-8") == line


def test_a_disk_that_fills_up_in_a_later_piece_keeps_none_of_the_line(tmp_path: Path) -> None:
    """Room for two pieces and a half: the line fails (EFBIG), the two pieces written are cut
    off again, and the next line follows the one before, not a torn part."""
    path = tmp_path / "tooltraces.jsonl"
    file = LineFile(str(path))
    try:
        file.write("first\n")
        room = len("first\n") + 5 * _PIECE_CHARS // 2
        with _file_size_limit(room), pytest.raises(OSError) as failed:
            file.write("x" * (5 * _PIECE_CHARS) + "\n")
        file.write("after\n")
    finally:
        file.close()
    assert (failed.value.errno, path.read_text()) == (errno.EFBIG, "first\nafter\n")


def test_a_line_unicode_cannot_encode_in_a_later_piece_keeps_none_of_it(tmp_path: Path) -> None:
    """A lone surrogate past the first piece: ``ValueError`` (as when it is in the first),
    and the pieces written before it cut off again."""
    path = tmp_path / "findings.jsonl"
    file = LineFile(str(path))
    try:
        file.write("first\n")
        with pytest.raises(UnicodeEncodeError):
            file.write("x" * (2 * _PIECE_CHARS) + "\ud800\n")
        file.write("after\n")
    finally:
        file.close()
    assert path.read_text() == "first\nafter\n"
