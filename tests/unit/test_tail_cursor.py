"""``toolwatch tail --cursor-file``: when the cursor file is rewritten (time injected)."""

from __future__ import annotations

import json
from pathlib import Path

from toolwatch.tail import CURSOR_SAVE_SECONDS, _Cursor


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def kept(file: Path) -> dict[str, int]:
    streams: dict[str, int] = json.loads(file.read_text(encoding="utf-8"))["streams"]
    return streams


def test_a_burst_rewrites_the_file_at_most_once_per_interval_and_the_end_keeps_the_last(
    tmp_path: Path,
) -> None:
    file, clock = tmp_path / "tail.cursor", Clock()
    cursor = _Cursor.load(file, clock)
    assert kept(file) == {}
    cursor.stream_id = "s1"
    clock.now += CURSOR_SAVE_SECONDS  # an interval after the load's rewrite
    cursor.handled(1)
    assert kept(file) == {"s1": 1}
    for sequence in range(2, 50):  # a burst, within the interval
        clock.now += CURSOR_SAVE_SECONDS / 100
        cursor.handled(sequence)
    assert kept(file) == {"s1": 1}  # behind: printed again if tail is killed now
    clock.now += CURSOR_SAVE_SECONDS * 0.6  # the interval since the last rewrite is over
    cursor.handled(50)
    assert kept(file) == {"s1": 50}
    cursor.handled(51)
    assert kept(file) == {"s1": 50}
    cursor.flush()  # the subscription ended
    assert kept(file) == {"s1": 51}
    assert not file.with_name("tail.cursor.partial").exists()


def test_a_finding_after_a_quiet_spell_is_kept_at_once(tmp_path: Path) -> None:
    file, clock = tmp_path / "tail.cursor", Clock()
    cursor = _Cursor.load(file, clock)
    cursor.stream_id = "s1"
    for sequence in (1, 2, 3):
        clock.now += 60
        cursor.handled(sequence)
        assert kept(file) == {"s1": sequence}


def test_flush_writes_only_when_the_file_is_behind(tmp_path: Path) -> None:
    file, clock = tmp_path / "tail.cursor", Clock()
    cursor = _Cursor.load(file, clock)
    file.write_text('{"streams": {"elsewhere": 7}}\n', encoding="utf-8")
    cursor.flush()  # nothing handled since the load: the file is not rewritten
    assert kept(file) == {"elsewhere": 7}


def test_without_a_file_nothing_is_written(tmp_path: Path) -> None:
    clock = Clock()
    cursor = _Cursor.load(None, clock)
    cursor.stream_id = "s1"
    cursor.handled(1)
    cursor.flush()
    assert cursor.streams == {"s1": 1}
    assert list(tmp_path.iterdir()) == []
