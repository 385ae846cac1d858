"""Was (review of 3489464) (``toolwatch.sinks.python_reports``, entered by ``serve`` inside
``queued_logging``): a report made by the garbage collector while its thread is inside the
log queue's lock deadlocks the process. Shown in a child process (a hung thread cannot be
undone in this one), which enters the hooks as ``serve`` enters them: ``with
queued_logging(), logged_python_reports()``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

_DEADLOCK_CHILD = """
import faulthandler, gc, logging, os, sys, threading

faulthandler.dump_traceback_later(15, exit=True)  # where it hangs, then exit code 1

from toolwatch.sinks.logqueue import queued_logging
from toolwatch.sinks.python_reports import logged_python_reports

# Standard error blocked (a log driver whose collector is down): a pipe nobody reads, full.
read_end, write_end = os.pipe()
os.set_blocking(write_end, False)
try:
    while True:
        os.write(write_end, b"x" * 4096)
except BlockingIOError:
    pass
os.set_blocking(write_end, True)
logging.basicConfig(
    level="INFO", format="%(levelname)s %(name)s: %(message)s", stream=os.fdopen(write_end, "w")
)

again = True


class Spool:
    # In a reference cycle, so only the collector finalizes it; its __del__ raises, and
    # leaves another such cycle for the next collection while ``again``.
    def __init__(self):
        self.me = self

    def __del__(self):
        if again:
            Spool()
        raise OSError("flush of the spool file failed")


with queued_logging(limit=2, close_timeout=10), logged_python_reports():
    Spool()
    gc.set_threshold(1)  # collect at (nearly) every allocation: the rare timing, every time
    for n in range(200):
        logging.getLogger("toolwatch.test").info("record %d", n)
    again = False
    gc.set_threshold(700)
    gc.collect()
    # Standard error drains again (the collector is back): what the log thread writes.
    written = []
    chunks = iter(lambda: os.read(read_end, 65536), b"")  # to the end of the pipe
    reader = threading.Thread(target=lambda: written.extend(chunks))
    reader.start()
os.close(write_end)  # the log thread is done: the reader reads to the end
reader.join()

faulthandler.cancel_dump_traceback_later()
print("lost told:", b"log record(s) lost" in b"".join(written), flush=True)
os._exit(0)  # not to wait for the pipe at exit
"""


def test_a_finalizer_that_raises_while_the_log_queue_is_full_hangs_nothing(
    tmp_path: Path,
) -> None:
    """What is wrong: ``sys.unraisablehook`` (and ``warnings.showwarning``: a ResourceWarning
    or "coroutine was never awaited" comes from a finalizer too) runs wherever the garbage
    collector runs, which is any allocation of any thread. When the log queue is full
    (standard error blocked: the case ``queued_logging`` exists for), ``queue.put_nowait``
    raises ``queue.Full`` while holding the queue's mutex, a plain ``threading.Lock``;
    allocating that exception can start a collection; a finalizer that raises then calls
    ``_log_unraisable`` on the same thread, whose record goes to ``put_nowait`` again and
    waits for the mutex its own thread holds, for ever. Then every thread that logs (the
    event loop among them) and the log thread block on that mutex: the server hangs, and
    SIGTERM, handled on the loop, does nothing. Before the change the default hook wrote
    ``sys.stderr`` and took no lock. (asyncio's "Task exception was never retrieved",
    logged from ``Task.__del__``, had the same exposure already; this change adds every
    unraisable exception and every warning raised in a finalizer.)
    Should: a report made while the reporting thread is inside the log queue (or any
    re-entrant report) is not queued through the same lock: it is counted lost, or written
    by the previous hook; the process goes on and the losses are told.
    Shown: a child process enters ``queued_logging(limit=2)`` and ``logged_python_reports``
    as ``serve`` does, its standard error a full pipe; the collector's threshold is 1 (so the
    rare timing happens at once) and a cycle whose ``__del__`` raises is always pending;
    200 INFO records. It should finish and tell the losses; it hangs in ``queue.put`` called
    from ``_log_unraisable`` called from ``queue.put`` (faulthandler's dump, exit code 1)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_DEADLOCK_CHILD)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "lost told: True\n"), done.stderr[-3000:]
