"""What the ``toolwatch`` command line tells its user about itself: each command's description
and examples (``--help``), and an option it does not know refused with the closest it does.

Help texts keep argparse's ``RawDescriptionHelpFormatter`` layout: descriptions and examples
are printed as written, wrapped here to 80 columns.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
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
    "unrecognized",
]

SERVE_DESCRIPTION = """\
Receive OTLP traces (gRPC and HTTP), rebuild each agent run's tool calls and evaluate
every run by the policy, golden cases and evaluators the configuration file sets; write
the findings as JSON lines (stdout unless --findings), count them on /metrics and send
them to tail's findings stream. Every flag can be set with its TOOLWATCH_* variable
instead (a flag wins), both over the file. SIGTERM or Ctrl-C drains what is buffered and
exits 0; SIGHUP reloads the file's policy, golden cases and evaluators, and reopens the
output files (logrotate). docs/commands.md says more."""

SERVE_EXAMPLES = """\
examples:
  toolwatch serve                                   loopback, no policy, findings on stdout
  toolwatch serve --config examples/toolwatch.yaml --dump-tooltraces tooltraces.jsonl
  toolwatch serve --grpc-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \\
                  --metrics-listen 127.0.0.1:0 --stream-listen 127.0.0.1:0   free ports
  TOOLWATCH_CONFIG=/etc/toolwatch.yaml toolwatch serve --findings findings.jsonl
"""

CHECK_CONFIG_DESCRIPTION = """\
Validate the configuration serve would run with, as serve does before it binds its
listeners (which check-config never does): FILE (else --config, else TOOLWATCH_CONFIG,
else the built-in defaults), with the keys serve's flags and TOOLWATCH_* variables set
over it (a flag wins over its variable). Give it serve's command line and environment.
The "ok" line names the keys a flag or variable set; an error names where its value came
from (the file, a flag or a variable), the field and the reason. Exit 0 ok, 2 refused."""

CHECK_CONFIG_EXAMPLES = """\
examples:
  toolwatch check-config examples/toolwatch.yaml
  toolwatch check-config --config examples/toolwatch.yaml --grpc-listen 0.0.0.0:4317   as serve
  TOOLWATCH_CONFIG=/etc/toolwatch.yaml toolwatch check-config        what the pod would run
"""

REPLAY_DESCRIPTION = """\
Evaluate recorded traces offline with serve's pipeline: OTLP/JSON lines as the
Collector's file exporter writes them, or ToolTrace lines from serve's --dump-tooltraces,
gzipped or not. Prints each evaluator's mean score, the golden cases' results and the
findings by category (--format json: one JSON object, the findings listed). Gates make it
exit 1 when one fails, so a prompt or model change can be gated in CI: --min-score on a
mean score, --max-findings on a count of findings. Without --config (or
TOOLWATCH_CONFIG) it judges by the built-in defaults, which have no policy.
Exit 0 passed, 1 a gate failed, 2 bad usage or input."""

REPLAY_EXAMPLES = """\
examples:
  toolwatch replay --config examples/toolwatch.yaml examples/unverified-refund.otlp.json
  toolwatch replay --config toolwatch.yaml canary.otlp.jsonl --min-score composite=0.9 \\
                   --max-findings DANGEROUS_ACTION_DRIFT=0                    a CI gate
  zcat traces.otlp.jsonl.gz | toolwatch replay --config toolwatch.yaml -
  toolwatch replay --config toolwatch.yaml --stream capture-*.jsonl.gz     a large capture
  toolwatch replay --format json tooltraces.jsonl > report.json
"""

TAIL_DESCRIPTION = """\
Print the findings of a running serve as it finds them, from its findings stream: one
line each (coloured on a terminal), or one JSON object each with --json. --category,
--agent and --min-severity choose which. --reconnect follows the stream across lost
connections and server restarts, and --cursor-file lets the next run resume where this
one stopped: either way no finding the server still holds is lost. Exit 0 when the
server ends the stream, 130 at Ctrl-C, 143 at SIGTERM; docs/commands.md has the rest."""

TAIL_EXAMPLES = """\
examples:
  toolwatch tail                                          the local serve's findings
  toolwatch tail --category DANGEROUS_ACTION_DRIFT --min-severity high
  toolwatch tail --agent support-bot --json | jq .explanation
  toolwatch tail --target toolwatch.internal:4319 --tls-ca ca.pem \\
                 --bearer-token-file token --reconnect --cursor-file tail.cursor
"""

#: The top level's: every command's.
EXAMPLES = """\
examples:
  toolwatch serve                                   loopback, no policy, findings on stdout
  toolwatch serve --config examples/toolwatch.yaml --dump-tooltraces tooltraces.jsonl
  toolwatch serve --grpc-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \\
                  --metrics-listen 127.0.0.1:0 --stream-listen 127.0.0.1:0   free ports
  toolwatch check-config examples/toolwatch.yaml
  toolwatch check-config --config examples/toolwatch.yaml --grpc-listen 0.0.0.0:4317   as serve
  toolwatch replay --config examples/toolwatch.yaml traces.otlp.jsonl --min-score tool_selection=0.9
  toolwatch tail --category DANGEROUS_ACTION_DRIFT --min-severity high
"""


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, whose commands (``add_subparsers``) are of this class too; an
    option it does not know is refused by the command it was given to, in its usage, with
    the closest option that command knows (``unrecognized``). argparse's own refusal comes
    from the top-level parser, naming none: ``toolwatch serve --confg x`` printed
    ``toolwatch``'s usage, not ``serve``'s."""

    def parse_known_args(  # type: ignore[override]  # typeshed's overloads, one used here
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """``parse_known_args``, but an argument left unknown is an error (exit 2): argparse
        parses a command's arguments with it, and gives what it leaves to the top level."""
        parsed, unknown = super().parse_known_args(args, namespace)
        if unknown:
            self.error(unrecognized(unknown, list(self._option_string_actions)))
        return parsed, unknown


def unrecognized(arguments: Sequence[str], options: Sequence[str]) -> str:
    """argparse's message for ``arguments`` (``unrecognized arguments: ...``), and for each
    of them that looks like a mistyped option, the closest of ``options``."""
    message = f"unrecognized arguments: {' '.join(arguments)}"
    meant = [
        close[0]
        for given in arguments
        if given.startswith("-") and given != "-"  # not standard input
        for close in [difflib.get_close_matches(given.split("=", 1)[0], options, n=1)]
        if close
    ]
    return f"{message} (did you mean {', '.join(meant)}?)" if meant else message
