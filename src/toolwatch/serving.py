"""``toolwatch serve``'s server run: an ``App`` from start-up to the end of its shutdown,
driven by signals. SIGTERM and SIGINT drain (a second one skips the wait for a last scrape);
SIGHUP reloads the configuration once the server listens (``_HangUps``), one that came
while it started included.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from types import FrameType

from toolwatch.app import App
from toolwatch.config import Config
from toolwatch.process_tuning import raise_open_files, tune_gc
from toolwatch.sinks.logqueue import queued_logging
from toolwatch.sinks.python_reports import logged_python_reports

__all__ = ["serve"]

log = logging.getLogger("toolwatch")


async def serve(
    config: Config,
    reload: Callable[[], Config] | None = None,
    hung_up: Callable[[], bool] = lambda: False,
    terminated: Callable[[], bool] = lambda: False,
    interactive: bool = False,
    *,
    defaults: bool = False,
) -> int:
    """Run a server until SIGTERM or SIGINT, then shut down gracefully. Returns the exit
    code. The CLI has checked the output files (``config.check_outputs``). ``reload``
    loads the configuration again, on SIGHUP (``App.reload``, ``_HangUps``); ``hung_up``
    says whether a SIGHUP came while the process was starting, before this handler was in
    place, and ``terminated`` whether a SIGTERM or SIGINT did; ``interactive``: run from a
    terminal, where Ctrl-C skips the wait for a last scrape (``App.interrupted``); ``defaults``:
    as ``App`` takes it. Given ``reload``, SIGHUP is ignored once it returns or raises, to the
    end of the process.

    SIGTERM and SIGINT drain from before the first listener is bound (``App.start``) to the
    end: nothing is buffered before, and one that came earlier (``terminated``) stops the
    server as soon as it listens."""
    raise_open_files(config.ingest.max_connections)  # before the listeners and outputs open
    app = App(config, defaults=defaults)
    # A blocked standard error stalls nothing (lines are lost, told); what Python reports
    # itself (warnings, a thread's exception) goes through the same thread, in whole records.
    with queued_logging(), logged_python_reports():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        received: list[int] = []

        def stopping(signum: int) -> None:
            received.append(signum)
            stop.set()

        # Before start(): a SIGTERM right after the "listening" line must drain, not kill.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping, sig)
        if terminated():
            stop.set()
        hang_ups = _HangUps(loop, app, reload, hung_up) if reload is not None else None
        if hang_ups is not None:
            # Not ``loop.add_signal_handler``: closing the loop gives its signals their
            # default action back, and SIGHUP's ends the process, so a logrotate HUP while
            # Python exited turned a clean shutdown's 0 into death by signal. This handler
            # is swapped for SIG_IGN in one step when serve ends.
            signal.signal(signal.SIGHUP, hang_ups)
        try:
            await app.start()
            if hang_ups is not None:
                hang_ups.listening()
            tune_gc()
            await stop.wait()
            app.interrupted = interactive and received[:1] == [signal.SIGINT]
            log.info("shutting down")
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, app.hurry)
            await app.stop()
        finally:
            if reload is not None:
                signal.signal(signal.SIGHUP, signal.SIG_IGN)
        return 0


class _HangUps:
    """``serve``'s SIGHUP handler, run by Python in the main thread between two steps of the
    event loop. Until the server listens (``listening``), a SIGHUP is only remembered, as
    the CLI remembers one from before (``hung_up``): however many came, one reload once it
    listens, which reads the file again (it may have changed since start-up read it); a
    reload in the middle of ``App.start`` would have run for each. From then on each
    SIGHUP runs ``App.reload`` as one of the loop's callbacks."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        app: App,
        load: Callable[[], Config],
        hung_up: Callable[[], bool],
    ) -> None:
        self._loop = loop
        self._app = app
        self._load = load
        self._hung_up = hung_up
        self._asked = False  # a SIGHUP since this handler is in place, before ``listening``
        self._listening = False

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        if self._listening:
            self._loop.call_soon_threadsafe(self._app.reload, self._load)
        else:
            self._asked = True

    def listening(self) -> None:
        """The server listens: the one reload the SIGHUPs that came until now ask for, if
        one came. A SIGHUP from here on reloads by itself (``__call__``)."""
        self._listening = True
        if self._asked or self._hung_up():
            self._app.reload(self._load)
