"""The ``toolwatch`` command line: ``serve``, ``check-config``, ``replay``, ``tail``.

Every ``serve`` flag can also be set with a ``TOOLWATCH_*`` environment variable (flags win);
``check-config`` takes the same flags and variables, and checks what ``serve`` would run.
Exit codes: 0 success, 1 a gate failed (replay), 2 bad usage or configuration, 3 runtime error,
4 another client took tail's stream over (its cursor file shared), 130 Ctrl-C, 141 the
output's reader left, 143 SIGTERM (tail).

Here: the signals of ``serve``'s start-up, ``main`` (logging, exit codes) and ``serve``.
Each other command has a module of its own (``cli_check_config``, ``cli_replay``,
``cli_tail``); ``cli_sources`` reads the configuration's file, flags and variables;
``cli_usage`` holds what ``--help`` says.
"""

from __future__ import annotations

import os
import signal
import sys

# `serve` reloads its configuration on SIGHUP once it serves. One that comes while it
# starts (the imports below take about 0.4 s) is remembered and acted on once it serves
# (toolwatch.serving.serve): SIGHUP's default would end it, and ignoring it would lose the edit
# it announced. So these are the first lines of toolwatch to run. Before them a SIGHUP
# still ends the process: in the interpreter's own start, tens of milliseconds; in the
# console script's imports (pip's imports `sys`, older pips' `re` too); in the package's
# __init__, which imports toolwatch.compiled, which imports `__future__`, `os`, `sys` and
# `importlib.machinery`; in this module's `__future__`, `os`, `signal` and `sys` above.
# Nothing slow (tests/integration/test_cli_start_signals.py holds them to that).
# A SIGTERM or SIGINT then is remembered too, and the server stops as soon as it serves,
# draining nothing, exiting 0: their defaults would end it with 143 or a traceback.
# The other commands reload nothing: SIGHUP keeps its default and ends them, as it ends a
# program whose terminal closed (tail's, say).


class _StartSignals:
    """Whether a SIGHUP came while ``serve`` started, and whether a SIGTERM or SIGINT did:
    however many came, they ask for one reload, one stop."""

    __slots__ = ("hung_up", "terminated")

    def __init__(self) -> None:
        self.hung_up = False
        self.terminated = False


_START_SIGNALS = _StartSignals()


def _remember_hangup(_signum: int, _frame: object) -> None:
    _START_SIGNALS.hung_up = True


def _remember_termination(_signum: int, _frame: object) -> None:
    _START_SIGNALS.terminated = True


def _remember_signals() -> None:
    signal.signal(signal.SIGHUP, _remember_hangup)
    signal.signal(signal.SIGTERM, _remember_termination)
    signal.signal(signal.SIGINT, _remember_termination)


def _interrupted_while_starting(_signum: int, _frame: object) -> None:
    """Ctrl-C while the imports below run: nothing done yet, so nothing to keep or flush."""
    os._exit(128 + signal.SIGINT)


if sys.argv[1:2] == ["serve"]:
    _remember_signals()
elif (
    sys.argv[1:2] in (["replay"], ["check-config"], ["tail"])
    and signal.getsignal(signal.SIGINT) is signal.default_int_handler
):
    # Ctrl-C then would print a traceback from wherever the import was; main() ends the
    # commands quietly with 130 once it runs. A SIGINT ignored (a background job) stays so.
    signal.signal(signal.SIGINT, _interrupted_while_starting)

# gRPC's core logs to stderr past Python's logging, INFO and up unless told, and read this
# once, when grpc is imported: a refused TLS handshake, say, printed a line of its own beside
# ours about it. Errors still show; set GRPC_VERBOSITY to see more.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import argparse
import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from toolwatch import __version__
from toolwatch.build_revision import describe
from toolwatch.cli_check_config import add_check_config
from toolwatch.cli_replay import add_replay
from toolwatch.cli_sources import (
    SERVE_DEFAULTS_WARNING,
    add_config_option,
    add_override_flags,
    another_address,
    config_file,
    read_sources,
)
from toolwatch.cli_tail import add_tail
from toolwatch.cli_usage import EXAMPLES, CommandParser, add_command
from toolwatch.config import ConfigError
from toolwatch.listeners import ListenError, ListenersError, StartError
from toolwatch.references.golden_file import ReferenceFileError
from toolwatch.replay import EXIT_USAGE
from toolwatch.serving import serve
from toolwatch.tail_exits import EXIT_INTERRUPTED

__all__ = ["main"]

EXIT_RUNTIME = 3  # 0, 1 (a gate failed) and 2 are replay's (toolwatch.replay)
#: The output was a pipe whose reader left: 128 + SIGPIPE, what a shell reports for a command
#: that signal ended.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``toolwatch`` console script."""
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # KeyboardInterrupt, below
    parser = _parser()
    args = parser.parse_args(argv)
    level = _log_level()
    if level is None:
        return EXIT_USAGE
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.run(args))
    except (ConfigError, ReferenceFileError, StartError) as exc:
        return _not_run(args, exc)
    except KeyboardInterrupt:
        # Ctrl-C (replay, check-config; serve and tail handle it themselves): end quietly,
        # with the code a shell gives a command SIGINT ended, not a traceback.
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Whoever read the output stopped (`| head`): end quietly, as a command killed by
        # SIGPIPE does. Python would write the buffer out again at exit, and fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _log_level() -> str | None:
    """``TOOLWATCH_LOG_LEVEL`` (default ``INFO``), upper-cased; ``None`` once said on
    stderr that it is not a level."""
    level = (os.environ.get("TOOLWATCH_LOG_LEVEL") or "INFO").strip().upper()
    if level not in logging.getLevelNamesMapping() or level == "NOTSET":
        allowed = ", ".join(_LOG_LEVELS)
        print(
            f"toolwatch: configuration error\nTOOLWATCH_LOG_LEVEL: {level!r} is not one of "
            f"{allowed}",
            file=sys.stderr,
        )
        return None
    return level


def _not_run(args: argparse.Namespace, exc: Exception) -> int:
    """Says on stderr why the command did not run (a configuration error, a golden-case
    file, an address taken, a start-up failure) and returns its exit code."""
    if isinstance(exc, ConfigError):
        print(f"toolwatch: configuration error\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(exc, ReferenceFileError):  # the golden-case file the configuration names
        origin = config_file(args)
        named = f" (named in {origin})" if origin else ""
        print(f"toolwatch: configuration error in golden.cases_file{named}\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(exc, ListenError):
        print(f"toolwatch: {exc}\n{another_address(exc.listener)}", file=sys.stderr)
        return EXIT_RUNTIME
    if isinstance(exc, ListenersError):  # several ports taken (a second serve): each, with its flag
        for error in exc.errors:
            print(f"toolwatch: {error}\n{another_address(error.listener)}", file=sys.stderr)
        return EXIT_RUNTIME
    print(f"toolwatch: {exc}", file=sys.stderr)  # a StartError
    return EXIT_RUNTIME


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")  # and logging's WARN, FATAL


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="toolwatch",
        description="Watch AI agents' tool calls in OpenTelemetry traces; alert on regressions.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=describe(__version__))
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_serve(commands)
    add_check_config(commands)
    add_replay(commands)
    add_tail(commands)
    return parser


def _add_serve(commands: Any) -> None:
    serve = add_command(commands, "serve")
    add_config_option(serve)
    add_override_flags(serve)
    serve.set_defaults(run=_serve)


def _serve(args: argparse.Namespace) -> int:
    _remember_signals()  # main() called with its own argv
    try:
        sources = read_sources(args)
        config = sources.load_checked()  # before anything starts
        if sources.path is None:  # the image's default command, a bare `toolwatch serve`
            logging.getLogger("toolwatch").warning(SERVE_DEFAULTS_WARNING)
        return asyncio.run(
            serve(
                config,
                sources.load_reloaded,
                hung_up=lambda: _START_SIGNALS.hung_up,
                terminated=lambda: _START_SIGNALS.terminated,
                interactive=sys.stdin is not None and sys.stdin.isatty(),
                defaults=sources.path is None,
            )
        )
    finally:  # serve is done, or never started: the signals act as they did before
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _START_SIGNALS.hung_up = _START_SIGNALS.terminated = False


if __name__ == "__main__":
    sys.exit(main())
