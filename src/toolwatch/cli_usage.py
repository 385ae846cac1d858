"""What the ``toolwatch`` command line tells its user about itself: each command's
description and examples (``--help``), and an option it does not know refused with a hint
(``refusal``): the option of its own that was meant, or the command that takes it.

Help texts keep argparse's ``RawDescriptionHelpFormatter`` layout: descriptions and
examples are printed as written, wrapped here to 80 columns; argparse wraps the options
to the terminal.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "CHECK_CONFIG_DESCRIPTION",
    "CHECK_CONFIG_EXAMPLES",
    "EXAMPLES",
    "REPLAY_DESCRIPTION",
    "REPLAY_EXAMPLES",
    "SERVE_DESCRIPTION",
    "SERVE_EXAMPLES",
    "TAIL_DESCRIPTION",
    "TAIL_EXAMPLES",
    "CommandParser",
    "add_command",
    "closest",
    "options_given",
    "refusal",
]

SERVE_DESCRIPTION = """\
Receive OTLP traces (gRPC and HTTP), rebuild each agent run's tool calls and
evaluate every run by the policy, golden cases and evaluators the configuration
file sets; write the findings as JSON lines (stdout unless --findings), count
them on /metrics and send them to tail's findings stream. Every flag can be set
with its TOOLWATCH_* variable instead (a flag wins), both over the file. SIGTERM
or Ctrl-C drains what is buffered and exits 0; SIGHUP reloads the file's policy,
golden cases and evaluators, and reopens the output files (logrotate).
docs/commands.md says more."""

SERVE_EXAMPLES = """\
examples:
  toolwatch serve                        loopback, no policy, findings on stdout
  toolwatch serve --config examples/toolwatch.yaml \\
                  --dump-tooltraces tooltraces.jsonl
  toolwatch serve --grpc-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \\
                  --metrics-listen 127.0.0.1:0 \\
                  --stream-listen 127.0.0.1:0                         free ports
  TOOLWATCH_CONFIG=/etc/toolwatch.yaml toolwatch serve --findings findings.jsonl
"""

CHECK_CONFIG_DESCRIPTION = """\
Validate the configuration serve would run with, as serve does before it binds
its listeners (which check-config never does): CONFIG_FILE (else --config FILE,
else TOOLWATCH_CONFIG, else the built-in defaults), with the keys serve's flags
and TOOLWATCH_* variables set over it (a flag wins over its variable). Give it
serve's command line and environment. The "ok" line names the keys a flag or
variable set; an error names where its value came from (the file, a flag or a
variable), the field and the reason. Exit 0 ok, 2 refused."""

CHECK_CONFIG_EXAMPLES = """\
examples:
  toolwatch check-config examples/toolwatch.yaml
  toolwatch check-config --config examples/toolwatch.yaml \\
                         --grpc-listen 0.0.0.0:4317                     as serve
  TOOLWATCH_CONFIG=/etc/toolwatch.yaml toolwatch check-config   as the pod would
"""

REPLAY_DESCRIPTION = """\
Evaluate recorded traces offline with serve's pipeline: OTLP/JSON lines as the
Collector's file exporter writes them, or ToolTrace lines from serve's
--dump-tooltraces, gzipped or not. Prints each evaluator's mean score, the
golden cases' results and the findings by category (--format json: one JSON
object, the findings listed). Gates make it exit 1 when one fails, so a prompt
or model change can be gated in CI: --min-score on a mean score, --max-findings
on a count of findings. Without --config (or TOOLWATCH_CONFIG) it judges by the
built-in defaults, which have no policy.
Exit 0 passed, 1 a gate failed, 2 bad usage or input."""

REPLAY_EXAMPLES = """\
examples:
  toolwatch replay --config examples/toolwatch.yaml \\
                   examples/unverified-refund.otlp.json
  toolwatch replay --config toolwatch.yaml canary.otlp.jsonl \\
                   --min-score composite=0.9 \\
                   --max-findings DANGEROUS_ACTION_DRIFT=0             a CI gate
  zcat traces.otlp.jsonl.gz | toolwatch replay --config toolwatch.yaml -
  toolwatch replay --config toolwatch.yaml \\
                   --stream capture-*.jsonl.gz                   a large capture
  toolwatch replay --format json tooltraces.jsonl > report.json
"""

TAIL_DESCRIPTION = """\
Print the findings of a running serve as it finds them, from its findings
stream: one line each (coloured on a terminal), or one JSON object each with
--json. --category, --agent and --min-severity choose which. --reconnect follows
the stream across lost connections and server restarts, and --cursor-file lets
the next run resume where this one stopped: either way no finding the server
still holds is lost. Exit 0 when the server ends the stream, 130 at Ctrl-C, 143
at SIGTERM; docs/commands.md has the rest."""

TAIL_EXAMPLES = """\
examples:
  toolwatch tail                                      the local serve's findings
  toolwatch tail --category DANGEROUS_ACTION_DRIFT --min-severity high
  toolwatch tail --agent support-bot --json | jq .explanation
  toolwatch tail --target toolwatch.internal:4319 --tls-ca ca.pem \\
                 --bearer-token-file token --reconnect --cursor-file tail.cursor
"""


def _examples(block: str, *chosen: int) -> list[str]:
    """The examples of a command's ``examples:`` block numbered ``chosen`` (from 0), each
    with its continuation lines: an example's first line is indented two spaces, the
    lines continuing it more."""
    lines = block.splitlines()
    starts = [at for at, line in enumerate(lines) if re.match(r"  \S", line)]
    ends = [*starts[1:], len(lines)]
    return ["\n".join(lines[starts[n] : ends[n]]) + "\n" for n in chosen]


#: The top level's: some of each command's own.
EXAMPLES = "".join(
    [
        "examples:\n",
        *_examples(SERVE_EXAMPLES, 0, 1, 2),
        *_examples(CHECK_CONFIG_EXAMPLES, 0, 1),
        *_examples(REPLAY_EXAMPLES, 1),
        *_examples(TAIL_EXAMPLES, 1),
    ]
)


#: Each command's line in the top level's list of commands, its description and examples.
_USAGE = {
    "serve": (
        "receive OTLP traces and evaluate every agent run",
        SERVE_DESCRIPTION,
        SERVE_EXAMPLES,
    ),
    "check-config": (
        "validate the configuration serve would run with (file, flags, env) and exit",
        CHECK_CONFIG_DESCRIPTION,
        CHECK_CONFIG_EXAMPLES,
    ),
    "replay": (
        "evaluate recorded traces offline and gate on the results",
        REPLAY_DESCRIPTION,
        REPLAY_EXAMPLES,
    ),
    "tail": ("print live findings from a running server", TAIL_DESCRIPTION, TAIL_EXAMPLES),
}


def add_command(commands: Any, name: str) -> CommandParser:
    """Command ``name``'s parser, added to ``commands`` (``add_subparsers``), with its line
    in the top level's list, its description and its examples (``_USAGE``), these printed
    as written."""
    summary, description, examples = _USAGE[name]
    parser: CommandParser = commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog=examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, whose commands (``add_subparsers``) are of this class too, each
    knowing the parser it is a command of; an argument it does not know is refused by the
    command it was given to, in its usage, with a hint for each option of them (``refusal``).
    argparse's own refusal comes from the top-level parser, with no hint: ``toolwatch serve
    --confg x`` printed ``toolwatch``'s usage, not ``serve``'s."""

    def __init__(self, *args: Any, parent: CommandParser | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._parent = parent

    def add_subparsers(self, **kwargs: Any) -> Any:
        """argparse's, whose commands are ``CommandParser``s that know this one (``parent``)."""
        kwargs.setdefault("parser_class", functools.partial(CommandParser, parent=self))
        return super().add_subparsers(**kwargs)

    def parse_known_args(  # type: ignore[override]  # typeshed's overloads, one used here
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """``parse_known_args``, but an argument left unknown is an error (exit 2): argparse
        parses a command's arguments with it, and gives what it leaves to the top level."""
        given = sys.argv[1:] if args is None else list(args)
        parsed, unknown = super().parse_known_args(given, namespace)
        if unknown:
            options = options_given(given, unknown)
            self.error(
                refusal(unknown, options, list(self._option_string_actions), self._elsewhere())
            )
        return parsed, unknown

    def _elsewhere(self) -> dict[str, list[str]]:
        """The options of the other parsers of the command line that this one does not take,
        each with where it goes, as ``refusal`` names them."""
        top = self
        while top._parent is not None:
            top = top._parent
        elsewhere: dict[str, list[str]] = {}
        for parser in [top, *top._commands()]:
            where = (
                f"`{parser.prog}` itself, before the command"
                if parser is top
                else f"`{parser.prog}`"
            )
            for option in parser._option_string_actions:
                if parser is not self and option not in self._option_string_actions:
                    elsewhere.setdefault(option, []).append(where)
        return elsewhere

    def _commands(self) -> list[CommandParser]:
        """This parser's commands' parsers, once each (an alias names one again)."""
        return list(
            dict.fromkeys(
                parser
                for action in self._actions
                if isinstance(action, argparse._SubParsersAction)
                for parser in action.choices.values()
            )
        )


def options_given(arguments: Sequence[str], unknown: Sequence[str]) -> list[str]:
    """Those of ``unknown`` (what argparse left of ``arguments``, in their order) that were
    given as options: like one (``-`` is standard input), and before ``arguments``' first
    ``--``, after which every argument is a positional one (POSIX's convention, argparse's
    rule). Each is taken for the last of ``arguments`` it can be: one that may have come
    after ``--`` is not taken for an option."""
    end = arguments.index("--") if "--" in arguments else len(arguments)
    at = len(arguments)
    given = []
    for argument in reversed(unknown):
        found = _last_index(arguments[:at], argument)
        if found is None:  # not one of them: nothing to tell of it
            continue
        at = found
        if at < end and argument.startswith("-") and argument != "-":
            given.append(argument)
    return given[::-1]


def _last_index(arguments: Sequence[str], argument: str) -> int | None:
    found = [at for at, given in enumerate(arguments) if given == argument]
    return found[-1] if found else None


def refusal(
    unknown: Sequence[str],
    options_given: Sequence[str],
    options: Sequence[str],
    elsewhere: Mapping[str, Sequence[str]],
) -> str:
    """argparse's message for ``unknown`` (``unrecognized arguments: ...``), then a line for
    each of ``options_given`` (those of them given as options) with a hint: where it goes
    when it is an option of another parser (``elsewhere``: each option there with where it
    goes), the option of ``options`` close enough to be the one meant. Once each."""
    hints = dict.fromkeys(
        hint
        for given in options_given
        for hint in [_hint(given.split("=", 1)[0], options, elsewhere)]
        if hint is not None
    )
    return "\n  ".join([f"unrecognized arguments: {' '.join(unknown)}", *hints])


def _hint(
    option: str, options: Sequence[str], elsewhere: Mapping[str, Sequence[str]]
) -> str | None:
    """What ``refusal`` tells of ``option``, if anything."""
    where = elsewhere.get(option)
    meant = closest(option, options)
    if where and meant:
        return f"{option} is an option of {_listed(where)}; did you mean {meant}?"
    if where:
        return f"{option} is an option of {_listed(where)}"
    if meant:
        return f"{option}: did you mean {meant}?"
    return None


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


#: Letters of an option's name for each typo ``closest`` allows in it, rounded to the
#: nearest: one in ``--jsn``, two in ``--tls-ca``, none in ``-j``.
_LETTERS_PER_TYPO = 4


def closest(option: str, options: Sequence[str]) -> str | None:
    """The one of ``options`` whose name (without its dashes) ``option``'s is a few typos
    from: a letter left out, one too many, another or two swapped, one typo for each four
    letters (``_LETTERS_PER_TYPO``). Of two as close, the first. ``None`` when none is:
    ``--tls-ca`` (``tail``'s) is no ``--tls-cert``, nor ``--findings`` (``serve``'s) a
    ``--max-findings``."""
    name = option.lstrip("-")
    allowed = (len(name) + _LETTERS_PER_TYPO // 2) // _LETTERS_PER_TYPO
    typos = {known: _typos(name, known.lstrip("-")) for known in options}
    within = [known for known in options if typos[known] <= allowed]
    return min(within, key=typos.__getitem__, default=None)


def _typos(typed: str, meant: str) -> int:
    """How many letters left out, added, replaced or swapped with the next make ``meant``
    ``typed`` (the optimal string alignment distance)."""
    before: list[int] = []
    previous = list(range(len(meant) + 1))
    for i, letter in enumerate(typed, 1):
        current = [i]
        for j, known in enumerate(meant, 1):
            typos = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (letter != known))
            if i > 1 and j > 1 and letter == meant[j - 2] and typed[i - 2] == known:
                typos = min(typos, before[j - 2] + 1)
            current.append(typos)
        before, previous = previous, current
    return previous[-1]
