"""The ``toolwatch`` command line: ``serve``, ``check-config``, ``replay``, ``tail``.

Every ``serve`` flag can also be set with a ``TOOLWATCH_*`` environment variable (flags win);
``check-config`` takes the same flags and variables, and checks what ``serve`` would run.
Exit codes: 0 success, 1 a gate failed (replay), 2 bad usage or configuration, 3 runtime error,
4 another client took tail's stream over (its cursor file shared), 130 Ctrl-C, 141 the
output's reader left, 143 SIGTERM (tail).
"""

from __future__ import annotations

import os
import signal
import sys

# `serve` reloads its configuration on SIGHUP once it serves. One that comes while it
# starts (the imports below take about 0.4 s) is remembered and acted on once it serves
# (toolwatch.app.serve): SIGHUP's default would end it, and ignoring it would lose the edit
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolwatch import __version__
from toolwatch.app import build_references, serve
from toolwatch.cli_usage import (
    CHECK_CONFIG_DESCRIPTION,
    CHECK_CONFIG_EXAMPLES,
    EXAMPLES,
    REPLAY_DESCRIPTION,
    REPLAY_EXAMPLES,
    SERVE_DESCRIPTION,
    SERVE_EXAMPLES,
    TAIL_DESCRIPTION,
    TAIL_EXAMPLES,
    CommandParser,
)
from toolwatch.config import (
    Config,
    ConfigError,
    check_certificate,
    check_hot_path,
    check_outputs,
    load_config,
    output_warnings,
)
from toolwatch.listeners import ListenError, ListenersError, StartError
from toolwatch.model import Severity
from toolwatch.references.golden import ReferenceFileError
from toolwatch.replay import EXIT_GATE, EXIT_OK, EXIT_USAGE, add_arguments, run_replay
from toolwatch.tail import run_tail
from toolwatch.tail_access import ACCESS_FLAGS, StreamAccess
from toolwatch.tail_exits import EXIT_INTERRUPTED

__all__ = ["main"]

EXIT_RUNTIME = 3  # 0, 1 (a gate failed) and 2 are replay's (toolwatch.replay)
#: The output was a pipe whose reader left: 128 + SIGPIPE, what a shell reports for a command
#: that signal ended.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
#: ``tail`` ended by SIGTERM (a service manager stopping it), after keeping its cursor.
EXIT_TERMINATED = 128 + signal.SIGTERM

#: The flags that set a configuration key over the file's (``serve`` and ``check-config``).
_SERVE_FLAGS: tuple[tuple[str, str, str, str], ...] = (
    # flag, environment variable, config key, help
    (
        "--grpc-listen",
        "TOOLWATCH_GRPC_LISTEN",
        "listen.grpc",
        "OTLP/gRPC HOST:PORT (127.0.0.1:4317)",
    ),
    (
        "--http-listen",
        "TOOLWATCH_HTTP_LISTEN",
        "listen.http",
        "OTLP/HTTP HOST:PORT (127.0.0.1:4318)",
    ),
    (
        "--metrics-listen",
        "TOOLWATCH_METRICS_LISTEN",
        "listen.metrics",
        "/metrics, /healthz, /readyz HOST:PORT (127.0.0.1:9464)",
    ),
    (
        "--stream-listen",
        "TOOLWATCH_STREAM_LISTEN",
        "listen.stream",
        "findings stream HOST:PORT (127.0.0.1:4319)",
    ),
    ("--findings", "TOOLWATCH_FINDINGS", "output.findings", "findings JSON lines: PATH or -"),
    (
        "--dump-tooltraces",
        "TOOLWATCH_DUMP_TOOLTRACES",
        "output.dump_tooltraces",
        "write every ToolTrace as a JSON line: PATH or -",
    ),
    ("--tls-cert", "TOOLWATCH_TLS_CERT", "security.tls.cert_file", "TLS certificate chain (PEM)"),
    ("--tls-key", "TOOLWATCH_TLS_KEY", "security.tls.key_file", "TLS private key (PEM)"),
    (
        "--tls-client-ca",
        "TOOLWATCH_TLS_CLIENT_CA",
        "security.tls.client_ca_file",
        "require client certificates signed by this CA (PEM): mutual TLS",
    ),
    (
        "--bearer-token-file",
        "TOOLWATCH_BEARER_TOKEN_FILE",
        "security.auth.bearer_token_file",
        "require a bearer token listed in this file (one per line)",
    ),
)


def _another_address(listener: str) -> str:
    """How to give ``listener`` another address: its flag, its variable, its key."""
    key = f"listen.{listener}"
    for flag, variable, setting, _help in _SERVE_FLAGS:
        if setting == key:
            return f"  choose another with {flag} HOST:PORT, {variable} or {key} in the file"
    return f"  choose another with {key} in the configuration file"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``toolwatch`` console script."""
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # KeyboardInterrupt, below
    parser = _parser()
    args = parser.parse_args(argv)
    level = (os.environ.get("TOOLWATCH_LOG_LEVEL") or "INFO").strip().upper()
    if level not in logging.getLevelNamesMapping() or level == "NOTSET":
        allowed = ", ".join(_LOG_LEVELS)
        print(
            f"toolwatch: configuration error\nTOOLWATCH_LOG_LEVEL: {level!r} is not one of "
            f"{allowed}",
            file=sys.stderr,
        )
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
    except ConfigError as exc:
        print(f"toolwatch: configuration error\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    except ReferenceFileError as exc:  # the golden-case file the configuration names
        origin = _config_file(args)
        named = f" (named in {origin})" if origin else ""
        print(f"toolwatch: configuration error in golden.cases_file{named}\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    except ListenError as exc:
        print(f"toolwatch: {exc}\n{_another_address(exc.listener)}", file=sys.stderr)
        return EXIT_RUNTIME
    except ListenersError as exc:  # several ports taken (a second serve): each, with its flag
        for error in exc.errors:
            print(f"toolwatch: {error}\n{_another_address(error.listener)}", file=sys.stderr)
        return EXIT_RUNTIME
    except StartError as exc:
        print(f"toolwatch: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except KeyboardInterrupt:
        # Ctrl-C (replay, check-config; serve and tail handle it themselves): end quietly,
        # with the code a shell gives a command SIGINT ended, not a traceback.
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Whoever read the output stopped (`| head`): end quietly, as a command killed by
        # SIGPIPE does. Python would write the buffer out again at exit, and fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")  # and logging's WARN, FATAL


_CONFIG_HELP = "the configuration file (YAML; docs/configuration.md); env TOOLWATCH_CONFIG"


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="toolwatch",
        description="Watch AI agents' tool calls in OpenTelemetry traces; alert on regressions.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"toolwatch {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_serve(commands)
    _add_check_config(commands)
    _add_replay(commands)
    _add_tail(commands)
    return parser


def _add_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="receive OTLP traces and evaluate every agent run",
        description=SERVE_DESCRIPTION,
        epilog=SERVE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_config_option(serve)
    _add_override_flags(serve)
    serve.set_defaults(run=_serve)


def _add_check_config(commands: Any) -> None:
    check = commands.add_parser(
        "check-config",
        help="validate the configuration serve would run with (file, flags, env) and exit",
        description=CHECK_CONFIG_DESCRIPTION,
        epilog=CHECK_CONFIG_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    file = check.add_mutually_exclusive_group()
    file.add_argument(
        "file",
        type=Path,
        nargs="?",
        metavar="CONFIG_FILE",
        help="the configuration file to check, or --config FILE (not both)",
    )
    _add_config_option(file)
    _add_override_flags(check)
    check.set_defaults(run=_check_config)


def _add_config_option(parser: Any) -> None:
    """``--config`` (``serve``, ``check-config``, ``replay``); ``_config_file`` reads it."""
    parser.add_argument("--config", type=Path, metavar="FILE", help=_CONFIG_HELP)


def _add_override_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of ``_SERVE_FLAGS`` (``serve``, ``check-config``). Their variables are read
    by ``_sources``, so that a value is known to come from one or the other."""
    for flag, env, _key, help_text in _SERVE_FLAGS:
        parser.add_argument(flag, help=f"{help_text}; env {env}")


def _add_replay(commands: Any) -> None:
    replay = commands.add_parser(
        "replay",
        help="evaluate recorded traces offline and gate on the results",
        description=REPLAY_DESCRIPTION,
        epilog=REPLAY_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_config_option(replay)
    add_arguments(replay)
    replay.set_defaults(run=_replay)


def _add_tail(commands: Any) -> None:
    tail = commands.add_parser(
        "tail",
        help="print live findings from a running server",
        description=TAIL_DESCRIPTION,
        epilog=TAIL_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tail.add_argument(
        "--target",
        default=_env("TOOLWATCH_STREAM") or "127.0.0.1:4319",
        help="the findings stream HOST:PORT (127.0.0.1:4319); env TOOLWATCH_STREAM",
    )
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
    tail.add_argument("--tls", action="store_true", help="use TLS with the system's CA roots")
    from_env = {}
    for flag, (env, help_text) in ACCESS_FLAGS.items():
        default = _env_path(env)
        if default is not None:
            from_env[flag] = (default, env)
        tail.add_argument(flag, type=Path, default=default, help=f"{help_text}; env {env}")
    tail.set_defaults(run=_tail, access_from_env=from_env)


def _env(name: str) -> str | None:
    """The variable's value; an empty one is unset, as in most tools (``VAR= cmd``)."""
    return os.environ.get(name) or None


def _env_path(name: str) -> Path | None:
    value = _env(name)
    return Path(value) if value else None


def _config_file(args: argparse.Namespace) -> Path | None:
    """The configuration file a command reads: ``check-config``'s CONFIG_FILE, else
    ``--config``, else ``TOOLWATCH_CONFIG``; none (the built-in defaults) without them."""
    named: Path | None = getattr(args, "file", None) or getattr(args, "config", None)
    return named or _env_path("TOOLWATCH_CONFIG")


def _config_origin(args: argparse.Namespace) -> str | None:
    """``TOOLWATCH_CONFIG`` when the configuration file is the one it names (a value left in
    a shell or a CI job's environment, which the command line does not show), for an error
    reading the file to name it; ``None`` for one the command line names, or none."""
    named = getattr(args, "file", None) or getattr(args, "config", None)
    return "TOOLWATCH_CONFIG" if not named and _env_path("TOOLWATCH_CONFIG") else None


@dataclass(frozen=True, slots=True)
class _Sources:
    """What ``serve`` builds its configuration from: the file (``None``: the defaults), and
    the keys the flags and variables of ``_SERVE_FLAGS`` set over it (``overrides``), each
    with the flag or variable that gave it (``origins``: a flag wins over its variable)."""

    path: Path | None
    overrides: dict[str, Any]
    origins: dict[str, str]
    path_origin: str | None = None  # the variable that named ``path``, if one did

    @property
    def name(self) -> str:
        """The file as messages name it, or ``defaults``."""
        return str(self.path) if self.path is not None else "defaults"

    def load(self) -> Config:
        """The configuration, validated (``load_reloaded`` on SIGHUP)."""
        return load_config(self.path, self.overrides, self.origins, path_origin=self.path_origin)

    def load_reloaded(self) -> Config:
        """``load`` for a SIGHUP, and ``ingest.decoder`` refused where this install cannot
        run it (``check_hot_path``): the running server keeps its own, but the restart that
        key takes would fail, so the reload fails now, naming it."""
        config = self.load()
        check_hot_path(config, self.path, self.overrides, self.origins)
        return config

    def load_checked(self) -> Config:
        """``load``, and the output files refused that ``serve`` could not open and an
        expired certificate (checked at start-up only: a SIGHUP ``load``s)."""
        config = self.load()
        check_outputs(config, self.path, self.overrides, self.origins)
        check_certificate(config, self.path, self.overrides, self.origins)
        check_hot_path(config, self.path, self.overrides, self.origins)
        return config


def _sources(args: argparse.Namespace) -> _Sources:
    """Where the command line and environment say ``serve``'s configuration comes from."""
    overrides: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for flag, variable, key, _help in _SERVE_FLAGS:
        given: str | None = getattr(args, flag[2:].replace("-", "_"))
        value, origin = (given, flag) if given is not None else (_env(variable), variable)
        if value is not None:
            overrides[key], origins[key] = value, origin
    return _Sources(_config_file(args), overrides, origins, _config_origin(args))


def _serve(args: argparse.Namespace) -> int:
    _remember_signals()  # main() called with its own argv
    try:
        sources = _sources(args)
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


def _check_config(args: argparse.Namespace) -> int:
    """``toolwatch check-config``: what ``serve`` checks before it binds its listeners."""
    sources = _sources(args)
    config = sources.load_checked()
    golden, _shadow = build_references(config)
    # serve's warning of a start without a file too: a deploy pipeline whose TOOLWATCH_CONFIG
    # went missing would otherwise read `defaults: ok` for a server that finds nothing.
    unnamed = [SERVE_DEFAULTS_WARNING] if sources.path is None else []
    said = config.warnings(defaults=sources.path is None)
    for warning in [*unnamed, *said, *output_warnings(config)]:
        print(f"{sources.name}: warning: {warning}", file=sys.stderr)
    cases = f", {len(golden)} golden case(s)" if golden is not None else ""
    given = ", ".join(f"{key} from {origin}" for key, origin in sources.origins.items())
    print(f"{sources.name}: ok{cases}" + (f"; overrides: {given}" if given else ""))
    return EXIT_OK


#: Logged by a ``serve`` given no file: it finds no safety regression, however bad the calls.
SERVE_DEFAULTS_WARNING = (
    "no configuration file (--config or TOOLWATCH_CONFIG): serving the built-in defaults,"
    " which have no policy and no golden cases"
)
#: After a report judged by the built-in defaults: without a policy nothing is dangerous, so a
#: ``--max-findings DANGEROUS_ACTION_DRIFT=0`` gate with ``--config`` forgotten passes anything.
REPLAY_DEFAULTS_NOTE = (
    "toolwatch replay: no configuration file (--config or TOOLWATCH_CONFIG): judged by the"
    " built-in defaults, which have no policy and no golden cases"
)


def _replay(args: argparse.Namespace) -> int:
    # Replay binds no listener: the TLS and token files are the pod's Secrets, not CI's.
    path, origin = _config_file(args), _config_origin(args)
    config = load_config(path, security_files=False, path_origin=origin)
    code = run_replay(args, config)
    if code in (EXIT_OK, EXIT_GATE):  # a report was written: what judged it, after it
        for note in _replay_notes(config, defaults=path is None):
            print(note, file=sys.stderr)
    return code


def _replay_notes(config: Config, *, defaults: bool) -> list[str]:
    """What ``replay`` says on stderr after its report: that the built-in defaults judged
    it (``REPLAY_DEFAULTS_NOTE``), and the warnings ``serve`` logs of how runs are judged
    (``Config.judging_warnings``), since a gate passed by half a policy proves nothing."""
    unnamed = [REPLAY_DEFAULTS_NOTE] if defaults else []
    said = config.judging_warnings(defaults=defaults)
    return [*unnamed, *(f"toolwatch replay: warning: {warning}" for warning in said)]


def _tail(args: argparse.Namespace) -> int:
    """``toolwatch tail``. SIGTERM ends it as Ctrl-C does (its cursor file kept up to the
    last finding printed), with the exit code of a command that signal ended."""
    terminated = False

    def terminate(_signal: int, _frame: object) -> None:
        nonlocal terminated
        terminated = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        code = _run_tail(args)
    except KeyboardInterrupt:  # one that came as run_tail returned
        code = EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    return EXIT_TERMINATED if terminated else code


def _run_tail(args: argparse.Namespace) -> int:
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


if __name__ == "__main__":
    sys.exit(main())
