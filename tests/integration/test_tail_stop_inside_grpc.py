"""A SIGTERM or Ctrl-C that comes while ``toolwatch tail``'s main thread is inside gRPC's own
code ends it with its exit code, and leaves no gRPC thread polling a closed channel.

Was: the CLI's handler raised ``KeyboardInterrupt`` wherever the main thread was. Raised in
``grpc._channel._MultiThreadedRendezvous._next`` between ``_RPCState.due.add(receive_message)``
and the operation started in gRPC's core, it left the call due an operation that never comes,
so the channel's polling thread never saw the call end and polled on after ``Channel.close``
had destroyed its completion queue: a use after free. Once in CI that was
``test_cursor_file_that_cannot_be_written_mid_run_is_no_traceback`` (SIGTERM right after a
finding printed, as the main thread goes back to gRPC for the next): tail died of SIGABRT,
``[mutex.cc : 1989] RAW: Lock: Mutex corrupt: waiting writer with no waiters``. Here, with the
signal raised at that line every time, 10 runs of 10 ended with the thread's traceback
(``TypeError: 'NoneType' object is not callable`` in ``channel_spin``: an event of the
destroyed queue) or with SIGABRT (``malloc(): unsorted double linked list corrupted``).

Now: a stop that comes inside gRPC's code is remembered and the call cancelled from another
thread (``toolwatch.tail_stop``); tail ends with 143 (130 for Ctrl-C), nothing said, every
thread done.

How it is shown. The real CLI (``toolwatch.cli.main``) in a process of its own, whose main
thread is traced (``sys.settrace``) only to raise the signal (``signal.raise_signal``, a real
one, run by the handler the CLI installed) at the first line of ``_next`` after that
``due.add``, in the ``_next`` that follows the first finding printed. Once ``main`` returns,
the process waits for its other threads, so that one left polling shows (its traceback, an
abort, or a thread that does not end) instead of racing the exit.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import pytest

from tests.integration.cli_support import text_process
from tests.integration.stream_support import make_finding, make_trace, serve

#: The CLI, with the signal (argv[1]) raised inside gRPC's ``_next`` (module docstring);
#: says on stderr if it never was, and which threads outlived ``main`` by 10 s.
_TAIL_SIGNALLED_INSIDE_GRPC = """
import inspect, signal, sys, threading
import grpc._channel

next_ = grpc._channel._MultiThreadedRendezvous._next
lines, first = inspect.getsourcelines(next_)
due = "self._state.due.add(cygrpc.OperationType.receive_message)"
after = next(first + i for i, line in enumerate(lines) if due in line)
signum, calls, raised = int(sys.argv[1]), 0, False

def in_next(frame, event, arg):
    global raised
    if event == "line" and frame.f_lineno > after and not raised:
        raised = True
        signal.raise_signal(signum)
    return in_next

def calls_of_next(frame, event, arg):
    global calls
    if event == "call" and frame.f_code is next_.__code__:
        calls += 1
        return in_next if calls == 2 else None
    return None

sys.argv = ["toolwatch", "tail", *sys.argv[2:]]
from toolwatch.cli import main

sys.settrace(calls_of_next)
code = main()
sys.settrace(None)
if not raised:
    print("the signal was never raised inside gRPC", file=sys.stderr)
for thread in threading.enumerate():
    if thread is not threading.current_thread():
        thread.join(timeout=10)
        if thread.is_alive():
            print(f"still running: {thread.name}", file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.parametrize(
    ("signum", "exit_code"), [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)]
)
def test_a_stop_inside_grpc_ends_tail_with_its_code_and_every_thread(
    signum: int, exit_code: int
) -> None:
    async def scenario() -> tuple[int, str, str]:
        async with serve() as h:
            command = [sys.executable, "-c", _TAIL_SIGNALLED_INSIDE_GRPC, str(signum)]
            tail = text_process([*command, "--target", h.target])
            try:
                await asyncio.wait_for(h.broker.wait_for_subscribers(1), timeout=30)
                h.broker.publish(make_trace(), [make_finding(explanation="f1")])
                out, err = await asyncio.to_thread(tail.communicate, timeout=60)
            finally:
                tail.kill()
            return tail.returncode, out, err

    code, out, err = asyncio.run(scenario())
    assert (code, err) == (exit_code, "")
    assert [line.rpartition(" — ")[2] for line in out.splitlines()] == ["f1"]
