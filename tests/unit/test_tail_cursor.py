"""``toolwatch tail --cursor-file``: when the cursor file is rewritten (time and the timer
thread injected)."""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.tail_cursor import CURSOR_SAVE_SECONDS, KEPT_CURSORS, _Cursor, _rewrite


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Timers:
    """``_Cursor``'s ``start_timer``: records each timer; the test fires or cancels it."""

    def __init__(self) -> None:
        self.started: list[tuple[float, Callable[[], None]]] = []
        self.cancelled = 0

    def __call__(self, delay: float, action: Callable[[], None]) -> Timers:
        self.started.append((delay, action))
        return self

    def cancel(self) -> None:
        self.cancelled += 1

    def fire(self) -> None:
        _, action = self.started[-1]
        action()


def kept(file: Path) -> dict[str, int]:
    streams: dict[str, int] = json.loads(file.read_text(encoding="utf-8"))["streams"]
    return streams


def cursor_at(file: Path | None) -> tuple[_Cursor, Clock, Timers]:
    clock, timers = Clock(), Timers()
    cursor = _Cursor.load(file, clock, timers)
    cursor.stream_id = "s1"
    return cursor, clock, timers


def test_a_burst_rewrites_the_file_once_then_its_last_finding_a_tenth_of_a_second_later(
    tmp_path: Path,
) -> None:
    file = tmp_path / "tail.cursor"
    cursor, clock, timers = cursor_at(file)
    assert kept(file) == {}
    clock.now += CURSOR_SAVE_SECONDS  # an interval after the load's rewrite
    cursor.handled(1)
    assert kept(file) == {"s1": 1}
    assert timers.started == []
    for sequence in range(2, 50):  # a burst, within the interval
        clock.now += CURSOR_SAVE_SECONDS / 100
        cursor.handled(sequence)
    assert kept(file) == {"s1": 1}  # behind: printed again if tail is killed now
    ((delay, _),) = timers.started  # one timer for the burst, due an interval after 1
    assert abs(delay - CURSOR_SAVE_SECONDS * 0.99) < 1e-9
    timers.fire()  # no finding since: the timer's thread catches the file up
    assert kept(file) == {"s1": 49}
    clock.now += CURSOR_SAVE_SECONDS / 2
    cursor.handled(50)  # within the interval of the timer's rewrite: a new timer
    assert kept(file) == {"s1": 49}
    assert len(timers.started) == 2
    cursor.flush()  # the subscription ended first
    assert (kept(file), timers.cancelled) == ({"s1": 50}, 1)
    assert sorted(tmp_path.iterdir()) == [file]  # no copy left beside it


def test_a_finding_after_a_quiet_spell_is_kept_at_once(tmp_path: Path) -> None:
    file = tmp_path / "tail.cursor"
    cursor, clock, timers = cursor_at(file)
    for sequence in (1, 2, 3):
        clock.now += 60
        cursor.handled(sequence)
        assert kept(file) == {"s1": sequence}
    assert timers.started == []


def test_a_timer_that_fires_after_the_flush_writes_nothing_more(tmp_path: Path) -> None:
    file = tmp_path / "tail.cursor"
    cursor, _clock, timers = cursor_at(file)
    cursor.handled(1)  # within the interval of the load's rewrite
    cursor.flush()
    assert kept(file) == {"s1": 1}
    file.write_text('{"streams": {"elsewhere": 7}}\n', encoding="utf-8")
    timers.fire()  # cancelled too late: it finds the file caught up
    cursor.flush()  # nothing handled since: not rewritten either
    assert kept(file) == {"elsewhere": 7}


def test_a_file_that_cannot_be_rewritten_mid_run_is_told_once_and_tried_again(
    tmp_path: Path,
) -> None:
    """A full disk or a volume gone (here: the file's directory moved away, so no copy can
    be made beside it) is no traceback: told once, naming the file and the reason, the
    file left as it was until a rewrite works, and told then."""
    directory = tmp_path / "cursors"
    directory.mkdir()
    file = directory / "tail.cursor"
    told: list[str] = []
    clock, timers = Clock(), Timers()
    cursor = _Cursor.load(file, clock, timers, warn=told.append)
    cursor.stream_id = "s1"
    directory.rename(tmp_path / "away")
    for sequence in (1, 2, 3):
        clock.now += 1
        cursor.handled(sequence)  # each tries the rewrite
    cursor.flush()
    (tmp_path / "away").rename(directory)
    assert kept(file) == {}
    (warning,) = told
    copy = re.escape(f"{file}.") + r"[^/]+\.partial"
    assert re.fullmatch(
        re.escape(f"--cursor-file {file}: cannot rewrite it (No such file or directory: ")
        + copy
        + re.escape(
            "); following the stream all the same and trying again: until it is rewritten, a"
            " run started now resumes from where it last was"
        ),
        warning,
    ), warning
    clock.now += 1
    cursor.handled(4)
    assert kept(file) == {"s1": 4}
    assert told[1:] == [f"--cursor-file {file}: rewritten again"]


def test_the_cursor_file_tail_creates_is_readable_by_its_owner_alone(tmp_path: Path) -> None:
    """It holds the tokens tail resumes as. Was: created as the umask let it be (0644 under
    the usual 022, 0666 here under 0), and a ``.partial`` left by a crash kept its mode.
    Now: 0600 whatever the umask, each copy made anew under a name of its own; one a crash
    left (0644 here) is neither used nor removed."""
    file = tmp_path / "tail.cursor"
    left = tmp_path / "tail.cursor.partial"
    left.write_text("{}")
    left.chmod(0o644)
    umask = os.umask(0)
    try:
        cursor, _clock, _timers = cursor_at(file)
        assert stat.S_IMODE(file.stat().st_mode) == 0o600
        cursor.handled(1)
        cursor.flush()
    finally:
        os.umask(umask)
    assert (stat.S_IMODE(file.stat().st_mode), kept(file)) == (0o600, {"s1": 1})
    assert sorted(tmp_path.iterdir()) == [file, left]


def test_two_tails_given_one_cursor_file_both_rewrite_it(tmp_path: Path) -> None:
    """One tail to a file (docs/commands.md), but two given the same one must not fail on each
    other's copy. Was: each wrote ``FILE.partial``, unlinked then created with ``O_EXCL``:
    a rewrite that came while the other's copy was written unlinked it, or found it made
    again and failed (EEXIST), or renamed the other's half-written copy, and the one whose
    copy was taken failed its rename (ENOENT), each told as a file that cannot be
    rewritten. Now: each copy has a name of its own (``FILE.<random>.partial``): the file is
    always one of the two's whole cursor."""
    file = tmp_path / "tail.cursor"
    told: list[str] = []
    cursors = []
    for stream in ("a", "b"):
        cursor = _Cursor.load(file, warn=told.append)
        cursor.stream_id = stream
        cursors.append(cursor)
    failures: list[OSError] = []

    def rewrite(cursor: _Cursor) -> None:
        for sequence in range(1, 101):
            cursor.streams[cursor.stream_id] = sequence
            try:
                cursor.save()
            except OSError as error:
                failures.append(error)

    threads = [threading.Thread(target=rewrite, args=(cursor,)) for cursor in cursors]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert (failures, told) == ([], [])
    assert kept(file) in ({"a": 100}, {"b": 100})
    assert sorted(tmp_path.iterdir()) == [file]


def test_without_a_file_nothing_is_written(tmp_path: Path) -> None:
    cursor, _clock, timers = cursor_at(None)
    cursor.handled(1)
    cursor.handled(2)
    cursor.flush()
    assert cursor.streams == {"s1": 2}
    assert timers.started == []
    assert list(tmp_path.iterdir()) == []


def test_a_kept_sequence_up_to_the_largest_a_request_carries_is_resumed(tmp_path: Path) -> None:
    """``ResumeFrom.after`` is a uint64: 2**64-1 is kept (one more is no cursor file)."""
    file = tmp_path / "tail.cursor"
    file.write_text('{"streams": {"s0": 0, "s1": 18446744073709551615}}')
    cursor, _clock, _timers = cursor_at(file)
    resumed = cursor.resuming(findings_pb2.SubscribeRequest(min_severity="high"))
    assert [(r.stream_id, r.after) for r in resumed.resume] == [("s0", 0), ("s1", 2**64 - 1)]
    assert resumed.min_severity == "high"


def test_a_file_rewritten_in_place_holds_the_new_cursor_alone(tmp_path: Path) -> None:
    """The rewrite of a file no rename can replace (mounted on its own: EBUSY; the whole
    path is in tests/integration/test_tail_cursor_durable.py): the new text over the old,
    then cut to its length, so it is never empty. A shorter cursor leaves nothing of the
    longer one after it."""
    file = tmp_path / "tail.cursor"
    file.write_text('{"streams": {"a-long-stream-id": 123456789}}\n')
    _rewrite(file, '{"streams": {"s1": 2}}\n')
    assert file.read_text() == '{"streams": {"s1": 2}}\n'


@pytest.mark.parametrize(
    ("again", "said"),
    [
        (False, "connected to h:1, resuming where the last run left off (--cursor-file)"),
        (True, "reconnected to h:1, resuming where it left off"),
    ],
    ids=["first-subscription-of-a-run", "after-a-lost-connection"],
)
def test_a_resume_is_told_as_a_reconnection_only_when_this_run_had_subscribed(
    again: bool, said: str
) -> None:
    """Was: a run started with a cursor file said "reconnected to" a server it had not
    connected to before. Now: "connected to", resuming where the last run left off."""
    cursor = _Cursor({"s1": 3})
    metadata = {"toolwatch-stream-id": "s1", "toolwatch-resume": "same"}
    assert cursor.subscribed(metadata, "h:1", again=again) == said


def test_the_token_of_each_subscription_is_kept_with_its_cursor_and_sent_back(
    tmp_path: Path,
) -> None:
    """A file from before tail kept tokens resumes without one (the server then guesses);
    the token the subscription gets (``toolwatch-resume-token``) is in the file before any
    finding is printed, and the next resume sends it back in the cursor of its stream. A new
    token replaces it at each subscription; a file without tokens is written as it was."""
    file = tmp_path / "tail.cursor"
    file.write_text('{"streams": {"s0": 4, "s1": 3}}\n')
    cursor, _clock, _timers = cursor_at(file)
    assert file.read_text() == '{"streams": {"s0": 4, "s1": 3}}\n'
    resumed = cursor.resuming(findings_pb2.SubscribeRequest())
    assert [(r.stream_id, r.after, r.token) for r in resumed.resume] == [
        ("s0", 4, ""),
        ("s1", 3, ""),
    ]
    for token in ("a" * 32, "b" * 32):
        metadata = {
            "toolwatch-stream-id": "s1",
            "toolwatch-resume": "same",
            "toolwatch-resume-token": token,
        }
        cursor.subscribed(metadata, "h:1")
        assert json.loads(file.read_text()) == {
            "streams": {"s0": 4, "s1": 3},
            "tokens": {"s1": token},
        }
        resumed = cursor.resuming(findings_pb2.SubscribeRequest())
        assert [(r.stream_id, r.after, r.token) for r in resumed.resume] == [
            ("s0", 4, ""),
            ("s1", 3, token),
        ]
    assert _Cursor.load(file).tokens == {"s1": "b" * 32}  # the next run's


def test_the_token_of_a_stream_no_longer_kept_goes_with_its_cursor(tmp_path: Path) -> None:
    """Tokens in the file of streams it keeps no cursor of are not read; a stream's cursor
    pushed out (``KEPT_CURSORS``) takes its token with it."""
    file = tmp_path / "tail.cursor"
    file.write_text('{"streams": {"s0": 1}, "tokens": {"s0": "t0", "gone": "t9"}}\n')
    cursor = _Cursor.load(file)
    assert cursor.tokens == {"s0": "t0"}
    for number in range(1, KEPT_CURSORS + 1):
        metadata = {
            "toolwatch-stream-id": f"s{number}",
            "toolwatch-stream-sequence": "0",
            "toolwatch-resume-token": f"t{number}",
        }
        cursor.subscribed(metadata, "h:1")
    kept_file = json.loads(file.read_text())
    assert list(kept_file["streams"]) == [f"s{n}" for n in range(1, KEPT_CURSORS + 1)]
    assert kept_file["tokens"] == {f"s{n}": f"t{n}" for n in range(1, KEPT_CURSORS + 1)}
