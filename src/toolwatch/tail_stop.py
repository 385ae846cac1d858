"""Stopping ``toolwatch tail`` on a signal (SIGTERM, Ctrl-C) without raising inside gRPC's
code (``TailStop``).

The CLI ends tail on a signal by raising ``KeyboardInterrupt`` in its main thread, at the
first bytecode boundary after it. Raised inside gRPC's own Python code, that leaves gRPC's
books wrong: between ``_RPCState.due.add(receive_message)`` and the operation started in its
core (``grpc._channel._MultiThreadedRendezvous._next``) the call then never completes for
the channel's polling thread, which polls on after ``Channel.close`` has destroyed the
completion queue it polls: a use after free, which ended tail with SIGABRT (abseil's ``Mutex
corrupt: waiting writer with no waiters``, or glibc's ``malloc(): ... corrupted``) or a
thread's traceback instead of its exit code. So a stop that comes while the main thread is
in gRPC's code raises nothing there: it is remembered, and the call tail follows is cancelled
from a thread of its own (``call.cancel``, which any thread may call); tail then ends as on
Ctrl-C once gRPC has returned. A stop that comes elsewhere raises as before.

Threading: ``request`` is a signal handler's (on the main thread, the one that runs
``run_tail``); ``follow``, ``check`` and ``unfollow`` that thread's; the canceller runs on
a daemon thread of its own, from ``__enter__`` to ``__exit__``. The handler takes no lock
(the main thread may hold any when it runs): it sets a flag and an event no other code of
the main thread waits on.
"""

from __future__ import annotations

import os
import threading
from types import FrameType, TracebackType
from typing import Final, Protocol

import grpc

__all__ = ["TailStop"]

#: Where gRPC's Python code is: a frame there is in the middle of gRPC's own work.
_GRPC_CODE: Final = os.path.dirname(grpc.__file__) + os.sep


class _Call(Protocol):
    def cancel(self) -> bool: ...


class TailStop:
    """Whether tail was asked to stop, and the call it follows, which a stop that comes while
    the main thread is in gRPC's code cancels (module docstring). Outside a ``with`` block
    nothing cancels the call: a stop then only raises, which is what callers that send no
    signals (a thread of a test, ``run_tail`` called from a program) need."""

    __slots__ = ("_call", "_finished", "_thread", "_wake", "requested")

    def __init__(self) -> None:
        self.requested = False
        self._call: _Call | None = None
        self._wake = threading.Event()
        self._finished = False
        self._thread: threading.Thread | None = None

    def __enter__(self) -> TailStop:
        """Starts the canceller's thread (before any handler can need it: a handler that
        started a thread could wait forever on a lock the main thread holds)."""
        self._thread = threading.Thread(
            target=self._cancel_when_asked, name="toolwatch-tail-stop", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._finished = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def request(self, frame: FrameType | None) -> None:
        """A signal handler's: tail is to stop. Raises ``KeyboardInterrupt`` unless ``frame``
        (where the main thread is) is in gRPC's code; there the call is cancelled instead,
        and tail stops once gRPC returns (``check``)."""
        self.requested = True
        if not _in_grpc(frame):
            raise KeyboardInterrupt
        self._wake.set()

    def follow(self, call: _Call) -> None:
        """``call`` is the one tail follows now; raises ``KeyboardInterrupt`` if a stop came
        while it was being made (in gRPC's code, before there was a call to cancel)."""
        self._call = call
        self.check()

    def unfollow(self) -> None:
        """The call followed has ended."""
        self._call = None

    def check(self) -> None:
        """Raises ``KeyboardInterrupt`` if a stop was asked for."""
        if self.requested:
            raise KeyboardInterrupt

    def _cancel_when_asked(self) -> None:
        self._wake.wait()
        call = self._call
        if not self._finished and call is not None:
            call.cancel()


def _in_grpc(frame: FrameType | None) -> bool:
    """Whether ``frame``, or one it was called from, runs gRPC's Python code."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_GRPC_CODE):
            return True
        frame = frame.f_back
    return False
