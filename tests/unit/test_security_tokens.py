"""Bearer tokens: parsing the header, reading the token file, and reloading it on a clock."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from toolwatch.bearer_tokens import TokenFile, bearer_token
from toolwatch.config import read_token_file
from toolwatch.model import ManualClock
from toolwatch.sinks.prometheus import PrometheusMetrics

RELOAD_SECONDS = 30.0


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` the way secret mounts and careful operators do: a new inode."""
    staging = path.with_suffix(".new")
    staging.write_text(text)
    os.replace(staging, path)


@pytest.fixture
def token_path(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text("old-token\n")
    return path


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.DEF-1_2~3+4/5==", "abc.DEF-1_2~3+4/5=="),
        ("bearer abc", "abc"),
        ("BEARER   abc  ", "abc"),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("abc", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token_takes_the_token_of_the_bearer_scheme_only(
    header: str | None, token: str | None
) -> None:
    assert bearer_token(header) == token


def test_token_file_holds_one_token_per_line(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("\n  first-token  \n\nsecond-token\n")
    assert read_token_file(path) == ("first-token", "second-token")


def test_comment_lines_are_not_tokens(tmp_path: Path) -> None:
    """An operator revoking a token leaves a note: the note must not make the whole file
    unusable (which would keep the revoked token accepted)."""
    path = tmp_path / "tokens"
    path.write_text("# ci-runner, revoked 2026-12-03 (leaked)\n  #rotate by 2027-01\nnew-token\n")
    assert read_token_file(path) == ("new-token",)


def test_an_empty_token_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("\n   \n")
    with pytest.raises(ValueError, match=r"tokens: holds no bearer token"):
        read_token_file(path)


def test_a_malformed_token_is_reported_by_line_without_its_value(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("good-token\nsecret with spaces\n")
    with pytest.raises(ValueError, match=r"line 2 is not a bearer token") as error:
        read_token_file(path)
    assert "secret" not in str(error.value)


def test_any_listed_token_is_accepted_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("current-token\nnext-token\n")
    tokens = TokenFile(path, RELOAD_SECONDS, ManualClock())
    assert tokens.accepts("current-token")
    assert tokens.accepts("next-token")
    for wrong in ("current-toke", "current-token2", "CURRENT-TOKEN", "", None):
        assert not tokens.accepts(wrong)


def test_a_changed_file_is_used_only_after_reload_seconds(token_path: Path) -> None:
    clock = ManualClock()
    tokens = TokenFile(token_path, RELOAD_SECONDS, clock)
    write_atomically(token_path, "new-token\n")

    clock.advance(RELOAD_SECONDS - 1)
    assert tokens.accepts("old-token")
    assert not tokens.accepts("new-token")

    clock.advance(1)
    assert tokens.accepts("new-token")
    assert not tokens.accepts("old-token")


def test_a_file_rewritten_in_place_is_reloaded(token_path: Path) -> None:
    clock = ManualClock()
    tokens = TokenFile(token_path, RELOAD_SECONDS, clock)
    token_path.write_text("old-token\nadded-token\n")  # same inode, new size
    clock.advance(RELOAD_SECONDS)
    assert tokens.accepts("added-token")
    assert tokens.accepts("old-token")


def test_requests_between_reloads_do_no_file_io(token_path: Path) -> None:
    clock = ManualClock()
    tokens = TokenFile(token_path, RELOAD_SECONDS, clock)
    token_path.unlink()  # any stat or read would now fail
    for _ in range(1000):
        clock.advance(RELOAD_SECONDS / 1000 / 2)
        assert tokens.accepts("old-token")


@pytest.mark.parametrize("broken", ["missing", "empty"])
def test_an_unusable_file_at_reload_keeps_the_previous_tokens(
    token_path: Path, broken: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    failures: list[None] = []
    tokens = TokenFile(token_path, RELOAD_SECONDS, clock, lambda: failures.append(None))
    if broken == "missing":
        token_path.unlink()
    else:
        write_atomically(token_path, "\n")
    clock.advance(RELOAD_SECONDS)
    with caplog.at_level(logging.ERROR, logger="toolwatch.bearer_tokens"):
        assert tokens.accepts("old-token")
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "keeping the previous bearer tokens"
    ]

    assert len(failures) == 1  # counted: toolwatch_security_reload_failures_total{file}
    clock.advance(RELOAD_SECONDS)
    assert tokens.accepts("old-token")
    assert len(failures) == 2  # each look while it stays broken

    write_atomically(token_path, "repaired-token\n")
    clock.advance(RELOAD_SECONDS)
    assert tokens.accepts("repaired-token")
    assert not tokens.accepts("old-token")
    assert len(failures) == 2


def test_an_unusable_file_at_start_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        TokenFile(tmp_path / "absent", RELOAD_SECONDS, ManualClock())


def test_reload_failures_are_counted_per_file_from_a_closed_set() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    for what in ("tokens", "tokens", "certificate", "/etc/secret/path"):
        metrics.reload_failed(what)
    name = "toolwatch_security_reload_failures_total"
    counts = {f: registry.get_sample_value(name, {"file": f}) for f in ("tokens", "certificate")}
    assert counts == {"tokens": 2.0, "certificate": 1.0}
    assert registry.get_sample_value(name, {"file": "_other"}) == 1.0


def test_auth_failures_are_counted_per_listener_from_a_closed_set() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    for listener in ("grpc", "grpc", "metrics", "Bearer abc"):
        metrics.auth_failed(listener)
    counts = {
        listener: registry.get_sample_value("toolwatch_auth_failures_total", {"listener": listener})
        for listener in ("grpc", "metrics", "http", "_other", "Bearer abc")
    }
    assert counts == {"grpc": 2, "metrics": 1, "http": 0, "_other": 1, "Bearer abc": None}
