"""What Python itself reports on standard error while ``serve`` runs, logged instead:
``warnings`` (``warnings.showwarning``), an exception no thread caught
(``threading.excepthook``) and one Python could not raise (``sys.unraisablehook``, a
``__del__`` that raised). Their defaults write ``sys.stderr`` from whatever thread they run
on, a traceback a line at a time, past the lock the log thread and the outputs take per
file (``toolwatch.sinks.destinations``): where standard error is shared (``2>&1``, the
journal, ``findings: /dev/stderr``) their lines were torn, and tore others. As log records
they go through the log thread (``toolwatch.sinks.logqueue``), whole, in the configured
format.

asyncio's own reports ("Task exception was never retrieved", a callback that raised) are
log records of the ``asyncio`` logger already. gRPC core's C code writes descriptor 2 itself
(``GRPC_VERBOSITY``): no hook reaches it.

Threading: the hooks run on the thread that reports; each makes one log record there (its
traceback formatted where it is made), and keeps no reference to the objects reported.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Final, TextIO

__all__ = ["THREAD_LOGGER", "UNRAISABLE_LOGGER", "WARNINGS_LOGGER", "logged_python_reports"]

#: The logger of warnings, as ``logging.captureWarnings`` names it.
WARNINGS_LOGGER: Final = "py.warnings"
#: The logger of exceptions that ended a thread.
THREAD_LOGGER: Final = "py.threading"
#: The logger of exceptions Python could not raise (``sys.unraisablehook``).
UNRAISABLE_LOGGER: Final = "py.unraisable"
_REPORTS: Final = (WARNINGS_LOGGER, THREAD_LOGGER, UNRAISABLE_LOGGER)


@contextlib.contextmanager
def logged_python_reports() -> Iterator[None]:
    """For the ``with`` block, warnings, exceptions that end a thread and unraisable
    exceptions are log records; on leaving, the hooks found are put back. Which warnings
    are shown is still the warnings filters' choice (``-W``, ``PYTHONWARNINGS``), not the
    log level's: Python printed these whatever ``TOOLWATCH_LOG_LEVEL`` said, so their
    loggers have levels of their own for the block (at ``ERROR`` every warning was gone,
    at ``CRITICAL`` every thread that died: a review's tests)."""
    shown, ended, ignored = warnings.showwarning, threading.excepthook, sys.unraisablehook
    loggers = [logging.getLogger(name) for name in _REPORTS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    warnings.showwarning = _log_warning
    threading.excepthook = _log_thread_exception
    sys.unraisablehook = _log_unraisable
    try:
        yield
    finally:
        warnings.showwarning = shown
        threading.excepthook = ended
        sys.unraisablehook = ignored
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _log_warning(  # noqa: PLR0917 - warnings.showwarning's signature
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """One line, where ``logging.captureWarnings`` would log ``warnings.formatwarning``'s
    text: the source line under it (read from the file, on the thread that warned) and a
    newline at its end, three lines of output of which one is empty. A warning shown to a
    file of the caller's (``file``) is written there, as the default does."""
    if file is not None:
        with contextlib.suppress(OSError):  # as the default: a file that cannot take it
            file.write(warnings.formatwarning(message, category, filename, lineno, line))
        return
    logging.getLogger(WARNINGS_LOGGER).warning(
        "%s:%s: %s: %s", filename, lineno, category.__name__, message
    )


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    """As ``threading.excepthook``'s default says it (``SystemExit`` ends a thread quietly),
    as an ERROR record with the traceback."""
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else str(threading.get_ident())
    _log_exception(THREAD_LOGGER, f"Exception in thread {name}", args)


def _log_unraisable(args: sys.UnraisableHookArgs) -> None:
    """As ``sys.unraisablehook``'s default says it ("Exception ignored in: <object>"), as an
    ERROR record with the traceback. The object is only ``repr``-ed, here: keeping it would
    bring back one being finalized."""
    said = args.err_msg or "Exception ignored in"
    if args.object is not None:
        try:
            said = f"{said}: {args.object!r}"
        except Exception:  # a repr that raises: as the default says it
            said = f"{said}: <object repr() failed>"
    _log_exception(UNRAISABLE_LOGGER, said, args)


def _log_exception(
    logger: str, said: str, args: threading.ExceptHookArgs | sys.UnraisableHookArgs
) -> None:
    """An ERROR record of ``said`` with the exception's traceback; with its type alone, for
    a report without a value (the hooks' arguments allow one)."""
    log = logging.getLogger(logger)
    if args.exc_value is None:
        log.error("%s: %s", said, args.exc_type.__name__)
    else:
        log.error("%s", said, exc_info=(args.exc_type, args.exc_value, args.exc_traceback))
