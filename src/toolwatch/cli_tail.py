"""``toolwatch tail`` on the command line: its options (the stream's address and access
defaulting to ``TOOLWATCH_*`` variables), and its run, which SIGTERM ends as Ctrl-C does.
Subscribing and printing are ``toolwatch.tail``'s.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from toolwatch.cli_sources import env_path, env_value
from toolwatch.cli_usage import add_command
from toolwatch.model import Severity
from toolwatch.tail import run_tail
from toolwatch.tail_access import ACCESS_FLAGS, StreamAccess
from toolwatch.tail_exits import EXIT_INTERRUPTED
from toolwatch.tail_stop import TailStop

__all__ = ["EXIT_TERMINATED", "add_tail"]

#: ``tail`` ended by SIGTERM (a service manager stopping it), after keeping its cursor.
EXIT_TERMINATED = 128 + signal.SIGTERM


def add_tail(commands: Any) -> None:
    """``toolwatch tail``'s parser: which findings, how printed, how to reach the stream."""
    tail = add_command(commands, "tail")
    tail.add_argument(
        "--target",
        default=env_value("TOOLWATCH_STREAM") or "127.0.0.1:4319",
        help="the findings stream HOST:PORT (127.0.0.1:4319); env TOOLWATCH_STREAM",
    )
    _add_filters(tail)
    _add_output(tail)
    from_env = _add_access(tail)
    tail.set_defaults(run=_tail, access_from_env=from_env)


def _add_filters(tail: Any) -> None:
    """Which findings ``tail`` prints: of which categories, agents, least severity."""
    tail.add_argument(
        "--category",
        action="append",
        default=[],
        metavar="CATEGORY",
        help="only findings of CATEGORY (DANGEROUS_ACTION_DRIFT, say: the README lists them);"
        " repeatable, for any of several. What pages: --category DANGEROUS_ACTION_DRIFT"
        " --category MISSING_VERIFICATION_STEP",
    )
    tail.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="AGENT",
        help="only findings on AGENT's runs, and on its own calls in others' runs; repeatable,"
        " for any of several",
    )
    severities = [str(s) for s in Severity]
    tail.add_argument(
        "--min-severity",
        default="low",
        choices=severities,
        help="only findings at least this severe (low: all). Severity is how far a score"
        " fell, not whether it pages: a high MISSING_VERIFICATION_STEP pages, a critical"
        " ARGUMENT_VALUE_DRIFT is a ticket; follow the pages with --category",
    )


def _add_output(tail: Any) -> None:
    """How ``tail`` prints (JSON, colour) and follows the stream (reconnecting, a cursor
    file)."""
    tail.add_argument("--json", action="store_true", help="one JSON object per line")
    tail.add_argument(
        "--reconnect",
        action="store_true",
        help="follow the stream across lost connections, server restarts and token rotations,"
        " resuming where it left off (findings the server still holds are not lost)",
    )
    tail.add_argument(
        "--cursor-file",
        type=Path,
        metavar="FILE",
        help="keep where tail is in the stream in FILE, so the next run resumes there (findings"
        " the server still holds are not lost between runs); one tail per file: two sharing"
        " one resume with one token and take the stream from each other",
    )
    tail.add_argument(
        "--color",
        choices=["auto", "always", "never"],
        default="auto",
        help="colour severities and categories (auto: on a terminal unless NO_COLOR is set)",
    )


def _add_access(tail: Any) -> dict[str, tuple[Path, str]]:
    """How ``tail`` reaches the stream: TLS and its files, a bearer token. Returns the
    access flags whose default is a ``TOOLWATCH_*`` variable's, with the variable."""
    tail.add_argument("--tls", action="store_true", help="use TLS with the system's CA roots")
    from_env = {}
    for flag, (env, help_text) in ACCESS_FLAGS.items():
        default = env_path(env)
        if default is not None:
            from_env[flag] = (default, env)
        tail.add_argument(flag, type=Path, default=default, help=f"{help_text}; env {env}")
    return from_env


def _tail(args: argparse.Namespace) -> int:
    """``toolwatch tail``. SIGTERM ends it as Ctrl-C does (its cursor file kept up to the
    last finding printed), with the exit code of a command that signal ended. Neither raises
    inside gRPC's code (``toolwatch.tail_stop``: that aborted tail, once in a while); a
    Ctrl-C ignored (a background job) stays so."""
    terminated = False

    with TailStop() as stop:

        def end(signum: int, frame: FrameType | None) -> None:
            nonlocal terminated
            terminated = terminated or signum == signal.SIGTERM
            stop.request(frame)

        previous = signal.signal(signal.SIGTERM, end)
        interrupt = signal.getsignal(signal.SIGINT)
        if interrupt is signal.default_int_handler:
            signal.signal(signal.SIGINT, end)
        try:
            code = _run_tail(args, stop)
        except KeyboardInterrupt:  # one that came as run_tail returned
            code = EXIT_INTERRUPTED
        finally:
            signal.signal(signal.SIGTERM, previous)
            if interrupt is signal.default_int_handler:
                signal.signal(signal.SIGINT, interrupt)
    return EXIT_TERMINATED if terminated else code


def _run_tail(args: argparse.Namespace, stop: TailStop) -> int:
    color = {"auto": None, "always": True, "never": False}[args.color]
    return run_tail(
        target=args.target,
        categories=args.category,
        min_severity=args.min_severity,
        agents=args.agent,
        as_json=args.json,
        color=color,
        out=sys.stdout,
        reconnect=args.reconnect,
        cursor_file=args.cursor_file,
        stop=stop,
        access=StreamAccess(
            tls=args.tls,
            ca_file=args.tls_ca,
            cert_file=args.tls_cert,
            key_file=args.tls_key,
            bearer_token_file=args.bearer_token_file,
            # a flag on the command line replaces its variable's default, another object
            from_env={
                flag: env
                for flag, (default, env) in args.access_from_env.items()
                if getattr(args, flag.removeprefix("--").replace("-", "_")) is default
            },
        ),
    )
