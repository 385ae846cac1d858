"""Where ``toolwatch tail`` is in each findings stream it follows (``_Cursor``): the last
finding printed of each, and the token of its last subscription there, sent back as
``SubscribeRequest.resume`` when it subscribes again; kept across runs in the
``--cursor-file``, a JSON file rewritten whole and durably (``_Cursor.save``) at most every
``CURSOR_SAVE_SECONDS``, or in place where it cannot be replaced (``_IN_PLACE``).

Threading: used on the thread that runs ``run_tail``; a timer thread rewrites the file after
a burst's last finding (``CURSOR_SAVE_SECONDS``), so the cursor's rewrites, and the changes
to what they write, are made under its lock.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from toolwatch._proto.toolwatch.v1 import findings_pb2
from toolwatch.sinks.stream.protocol import (
    RESUME_KEY,
    RESUME_LOST_KEY,
    RESUME_TOKEN_KEY,
    STREAM_ID_KEY,
    STREAM_SEQUENCE_KEY,
)

__all__: list[str] = []


#: How many streams' cursors tail keeps (and sends when it resumes): the latest.
KEPT_CURSORS = 16
#: The shortest time between two rewrites of the cursor file while findings come: a rewrite
#: takes about 140 µs on ext4, which held tail to about 7,000 findings a second when each
#: one was kept at once, fewer than a burst the server sends (and whatever tail cannot read
#: in time, the server's queue for it loses). At most ten a second, the last of a burst a
#: tenth of a second after it (from a timer thread), and when a subscription ends: a tail
#: killed outright (SIGKILL) prints again, on its next run, what it printed in its last
#: tenth of a second; one that ends any other way (the CLI takes SIGTERM as Ctrl-C), at
#: most the finding it was printing.
CURSOR_SAVE_SECONDS = 0.1


class _Timer(Protocol):
    def cancel(self) -> None: ...


def _start_timer(delay: float, action: Callable[[], None]) -> _Timer:
    timer = threading.Timer(delay, action)
    timer.daemon = True  # an exit does not wait for it: flush() saves what it would
    timer.start()
    return timer


def _no_warning(_message: str) -> None:
    pass


@dataclass(slots=True)
class _Cursor:
    """Where tail is in each server stream it has followed (stream id -> the last finding's
    sequence, or, before any, the stream's when tail subscribed), the token of its last
    subscription to each (stream id -> ``toolwatch-resume-token``, sent back when it resumes),
    and which one it follows.

    Once tail follows the stream, a file that cannot be rewritten (a full disk, a volume
    remounted read-only, a permission taken away) is told once to ``warn``, naming it and
    why, and tail carries on: the rewrite is tried again, at most every
    ``CURSOR_SAVE_SECONDS``, and told when it works again. Meanwhile the file keeps the last
    cursor written, so a run started then prints again what this one printed since."""

    streams: dict[str, int] = field(default_factory=dict)
    stream_id: str = ""
    lost_connection: bool = False  # the last live subscription ended by a lost connection
    file: Path | None = None  # where the cursors are kept across runs
    clock: Callable[[], float] = time.monotonic
    start_timer: Callable[[float, Callable[[], None]], _Timer] = _start_timer
    saved_at: float = float("-inf")  # the last rewrite, or attempt at one
    unsaved: bool = False  # the file is behind
    warn: Callable[[str], None] = _no_warning
    failing: bool = False  # the last rewrite failed, and was told
    in_place: bool = False  # the file cannot be replaced by a rename: rewritten in place
    tokens: dict[str, str] = field(default_factory=dict)  # of the streams in ``streams``
    _pending: _Timer | None = None  # a rewrite to come
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the timer's thread saves

    @classmethod
    def load(
        cls,
        file: Path | None,
        clock: Callable[[], float] = time.monotonic,
        start_timer: Callable[[float, Callable[[], None]], _Timer] = _start_timer,
        warn: Callable[[str], None] = _no_warning,
    ) -> _Cursor:
        """The cursors kept in ``file`` (none if it does not exist yet, or is empty: made with
        ``touch`` for a mount of its own, before tail saved anything), and their tokens (none
        in a file written before tail kept them). Raises ``OSError`` or ``ValueError`` for a
        file that cannot be read or is not a cursor file: one whose stream ids are not all
        non-empty strings, whose sequences are not all integers a ``SubscribeRequest`` can
        carry (uint64), or whose tokens are not all strings, so that a damaged file is told,
        naming it, before tail subscribes."""
        streams: dict[str, int] = {}
        tokens: dict[str, str] = {}
        if file is not None and file.exists():
            try:
                text = file.read_text(encoding="utf-8")
                kept = json.loads(text) if text else {"streams": {}}
                streams = _kept_streams(kept["streams"])
                tokens = _kept_tokens(kept.get("tokens", {}), streams)
            except (ValueError, KeyError, TypeError):
                raise ValueError(
                    'not a tail cursor file (expected {"streams": {"<stream id>": <sequence>}},'
                    " each sequence an integer from 0 to 2**64-1, and optionally"
                    ' "tokens": {"<stream id>": "<token>"})'
                ) from None
        cursor = cls(
            streams, file=file, clock=clock, start_timer=start_timer, warn=warn, tokens=tokens
        )
        cursor.save()  # a file that cannot be written fails now, not after the first finding
        return cursor

    def save(self) -> None:
        """Rewrites the cursor file, if any, whole and durably: a copy beside it,
        ``FILE.<random>.partial``, is created (0600: it holds the tokens tail resumes as,
        and whoever reads one can resume as tail, taking what the server holds for it and
        ending its stream), written and synced, renamed over the file, and the directory
        synced, so that a crash, of tail or of the machine, leaves the old one or the new
        (never an empty file, which the next run would refuse). A file that cannot be
        replaced so (``_IN_PLACE``: mounted on its own, as a container's single-file volume,
        or in a directory tail cannot write, as a read-only root) is rewritten in place from
        then on, its mode as it was, told once to ``warn``. Raises ``OSError`` when it
        cannot."""
        with self._lock:
            self._save()

    def _save(self) -> None:
        if self.file is None:
            return
        kept: dict[str, object] = {"streams": self.streams}
        if self.tokens:  # without, as a file from before tail kept them
            kept["tokens"] = self.tokens
        text = json.dumps(kept) + "\n"
        if self.in_place:
            _rewrite(self.file, text)
        else:
            self._replace(self.file, text)
        self.saved_at, self.unsaved = self.clock(), False

    def _replace(self, file: Path, text: str) -> None:
        partial: Path | None = None
        try:
            # A name of its own, made anew, readable by its owner alone whatever the umask
            # (0600): a second tail given the same file (which it should not be) neither fails
            # on this one's copy nor writes into it. Named before it is created, so that a stop
            # while it is (SIGTERM, Ctrl-C) still finds it to remove (a review's test:
            # ``mkstemp`` named it only once made).
            partial = file.with_name(f"{file.name}.{secrets.token_hex(8)}.partial")
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            with open(os.open(partial, flags, 0o600), "w", encoding="utf-8") as copy:
                copy.write(text)
                copy.flush()
                os.fsync(copy.fileno())  # its data before the rename: never an empty file
            os.replace(partial, file)
        except BaseException as e:
            if partial is not None:
                # A half-written copy takes no room on a full disk; nor is one left behind by
                # a stop (SIGTERM, Ctrl-C: ``KeyboardInterrupt`` wherever the main thread is)
                # at each unlucky one, holding the tokens (a review's test).
                with suppress(OSError):
                    partial.unlink()
            if not isinstance(e, OSError):
                raise
            why = _IN_PLACE.get(e.errno or 0)
            if why is None or not file.is_file():
                raise
            # Rewritten in place instead, which a crash can leave damaged; a file that cannot
            # be written either raises here.
            _rewrite(file, text)
            self.in_place = True
            copies = f"{file.name}.*.partial"
            self.warn(
                f"--cursor-file {file}: {why.format(partial=copies, reason=e.strerror)},"
                " so it is rewritten in place: a crash while it is written can leave it"
                " damaged, and the next run then refuses it (remove it to start again); mount"
                " its directory instead"
            )
            return
        _sync_directory(file.parent)

    def _keep(self) -> None:
        """``_save`` while following the stream: a failure is told once, not raised (class
        docstring); ``unsaved`` stays set, so the rewrite is tried again."""
        try:
            self._save()
        except OSError as e:
            self.saved_at = self.clock()  # tried again no sooner than a rewrite would be
            if not self.failing:
                self.failing = True
                self.warn(
                    f"--cursor-file {self.file}: cannot rewrite it ({_os_reason(e)}); following"
                    " the stream all the same and trying again: until it is rewritten, a run"
                    " started now resumes from where it last was"
                )
            return
        if self.failing:
            self.failing = False
            self.warn(f"--cursor-file {self.file}: rewritten again")

    def flush(self) -> None:
        """Rewrites the cursor file if it is behind (at the end of a subscription)."""
        with self._lock:
            if self._pending is not None:
                self._pending.cancel()
                self._pending = None
            if self.unsaved:
                self._keep()

    def _catch_up(self) -> None:
        """The timer's: the rewrite a burst's last findings were waiting for."""
        with self._lock:
            self._pending = None
            if self.unsaved:
                self._keep()

    @property
    def sequence(self) -> int:
        return self.streams.get(self.stream_id, 0)

    def handled(self, sequence: int) -> None:
        """A finding of the current stream was printed, and is then kept (in the file at most
        ``CURSOR_SAVE_SECONDS`` later, or when the subscription ends): one printed just
        before tail is killed is printed again by the next run, never skipped."""
        if not self.stream_id:
            return
        with self._lock:
            self.streams[self.stream_id] = max(self.sequence, sequence)
            if self.file is None:
                return
            self.unsaved = True
            since = self.clock() - self.saved_at
            if since >= CURSOR_SAVE_SECONDS:
                self._keep()
            elif self._pending is None:
                self._pending = self.start_timer(CURSOR_SAVE_SECONDS - since, self._catch_up)

    def resuming(self, request: findings_pb2.SubscribeRequest) -> findings_pb2.SubscribeRequest:
        if not self.streams:
            return request
        resumed = findings_pb2.SubscribeRequest()
        resumed.CopyFrom(request)
        for stream_id, after in self.streams.items():
            token = self.tokens.get(stream_id, "")
            resumed.resume.add(stream_id=stream_id, after=after, token=token)
        return resumed

    def subscribed(self, metadata: Mapping[str, str], target: str, again: bool = True) -> str:
        """Takes the subscription's initial metadata; what to tell of the resume, if any.
        ``again``: tail subscribed before in this run (else it resumes where the cursor file
        says the last run left off)."""
        stream = metadata.get(STREAM_ID_KEY, "")  # none from a server that cannot resume
        resumed, lost = metadata.get(RESUME_KEY), int(metadata.get(RESUME_LOST_KEY) or 0)
        token = metadata.get(RESUME_TOKEN_KEY, "")  # none from a server older than tokens
        self.stream_id = stream
        with self._lock:
            if stream and resumed != "same":
                self._start_stream(stream, resumed, metadata)
            if stream and self.tokens.get(stream, "") != token:
                # Kept before any finding is printed: a run killed after printing one resumes
                # as this subscription, and claims what the server holds for it.
                self._keep_token(stream, token)
            if self.unsaved:
                self._keep()
        return self._resume_news(target, resumed, lost, again)

    def _start_stream(self, stream: str, resumed: str | None, metadata: Mapping[str, str]) -> None:
        """The lock held: ``stream`` is new to tail. A fresh subscription starts where the
        stream is; a resumed one (``resumed``: ``new``) is sent everything held, all after
        anything tail printed. The oldest cursors past ``KEPT_CURSORS`` are forgotten, with
        their tokens."""
        start = 0 if resumed == "new" else int(metadata.get(STREAM_SEQUENCE_KEY) or 0)
        self.streams.pop(stream, None)
        self.streams[stream] = start
        while len(self.streams) > KEPT_CURSORS:
            self.tokens.pop(forgotten := next(iter(self.streams)), None)
            del self.streams[forgotten]
        self.unsaved = True

    def _keep_token(self, stream: str, token: str) -> None:
        """The lock held: ``token`` is the one to resume ``stream`` with (none: forgotten)."""
        if token:
            self.tokens[stream] = token
        else:
            self.tokens.pop(stream, None)
        self.unsaved = True

    def _resume_news(self, target: str, resumed: str | None, lost: int, again: bool) -> str:
        """What ``subscribed`` tells of how the server took the resume (``resumed``: ``same``,
        ``new``, or none: nothing), ``lost`` the findings it no longer held."""
        unheld = _UNHELD.format(lost=lost) if lost else ""
        if again:
            verb, where = "reconnected to", "where it left off"
        else:
            verb, where = "connected to", "where the last run left off (--cursor-file)"
        if resumed == "same":
            return f"{verb} {target}, resuming {where}{unheld}"
        if resumed == "new":
            previous = _PREVIOUS_STREAM_LOG if self.lost_connection else ""
            return (
                f"{verb} {target}, a stream new to tail (the server restarted, or"
                f" another one answers): what it holds is sent{previous}{unheld}"
            )
        return ""


#: Told of a resume when the server no longer held ``lost`` of the findings published since.
_UNHELD: Final = (
    "; up to {lost} findings that pass the filter were published since and are no"
    " longer held by the server (output.stream_replay_size): missed (its findings log"
    " has them)"
)
#: Told of a stream new to tail after the last live subscription lost its connection.
_PREVIOUS_STREAM_LOG: Final = (
    "; findings the previous one published after the last one printed, if any, are in"
    " its findings log"
)


#: Why ``FILE.<random>.partial`` could not replace the cursor file, by errno, where rewriting
#: the file in place may still work: a file mounted on its own (``docker -v FILE:FILE``, a
#: Kubernetes ``subPath``), which no rename replaces; a directory tail cannot write (``docker
#: run --read-only``, ``readOnlyRootFilesystem``, a non-root user's file in ``/``).
_IN_PLACE: Final = {
    errno.EBUSY: "cannot be renamed over ({reason}: a file mounted on its own?)",
    errno.EROFS: "cannot write {partial} beside it ({reason}: a read-only root?)",
    errno.EACCES: "cannot write {partial} beside it ({reason}: its directory not writable?)",
    errno.EPERM: "cannot write {partial} beside it ({reason}: its directory not writable?)",
}


def _rewrite(file: Path, text: str) -> None:
    """Writes ``text`` over ``file`` in place (no rename), then syncs it: the new text first,
    then the file cut to its length, so that it is never empty."""
    data = text.encode("utf-8")
    with file.open("r+b") as kept:
        kept.write(data)
        kept.truncate(len(data))
        kept.flush()
        os.fsync(kept.fileno())


#: What a file system that cannot sync a directory says (some network and FUSE ones): the
#: rename stands, as durable as that file system makes it.
_NO_DIRECTORY_SYNC: Final = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})


def _sync_directory(directory: Path) -> None:
    """Syncs ``directory``, so that a rename in it survives a crash of the machine; best
    effort where the file system refuses (``_NO_DIRECTORY_SYNC``), or the directory cannot
    be opened to sync it (``EACCES``: Windows opens no directory, and one may be writable
    and not readable)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except PermissionError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in _NO_DIRECTORY_SYNC:
            raise
    finally:
        os.close(fd)


#: The largest sequence a cursor can hold: ``ResumeFrom.after`` is a uint64.
_LAST_SEQUENCE = 2**64 - 1


def _os_reason(error: OSError) -> str:
    """An ``OSError`` in words, with the path it names (the cursor file's
    ``FILE.<random>.partial`` copy, which is written first)."""
    reason = error.strerror or str(error)
    return f"{reason}: {error.filename}" if error.filename else reason


def _kept_tokens(kept: object, streams: Mapping[str, int]) -> dict[str, str]:
    """The ``tokens`` of a cursor file, of the streams it keeps a cursor of; raises
    ``ValueError`` unless every token is a string."""
    if not isinstance(kept, dict) or not all(isinstance(token, str) for token in kept.values()):
        raise ValueError("not a mapping of stream ids to tokens")
    return {stream: token for stream, token in kept.items() if stream in streams and token}


def _kept_streams(kept: object) -> dict[str, int]:
    """The ``streams`` of a cursor file; raises ``ValueError`` unless every stream id is a
    non-empty string and every sequence an integer from 0 to ``_LAST_SEQUENCE`` (a bool is
    none here, nor is a float: JSON's ``1e30`` or ``3.0``)."""
    if not isinstance(kept, dict) or not all(
        stream and type(after) is int and 0 <= after <= _LAST_SEQUENCE
        for stream, after in kept.items()
    ):
        raise ValueError("not a mapping of stream ids to sequences")
    return dict(kept)
