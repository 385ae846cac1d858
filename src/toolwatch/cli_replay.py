"""``toolwatch replay`` on the command line: its configuration (no TLS or token files read:
replay binds no listener), and what it says after its report of what judged it. The replay
itself is ``toolwatch.replay``'s.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from toolwatch.cli_sources import add_config_option, config_file, config_origin
from toolwatch.cli_usage import add_command
from toolwatch.config import Config, load_config
from toolwatch.replay import EXIT_GATE, EXIT_OK, add_arguments, run_replay

__all__ = ["REPLAY_DEFAULTS_NOTE", "add_replay"]


def add_replay(commands: Any) -> None:
    """``toolwatch replay``'s parser: ``--config`` and replay's own options."""
    replay = add_command(commands, "replay")
    add_config_option(replay)
    add_arguments(replay)
    replay.set_defaults(run=_replay)


#: After a report judged by the built-in defaults: without a policy nothing is dangerous, so a
#: ``--max-findings DANGEROUS_ACTION_DRIFT=0`` gate with ``--config`` forgotten passes anything.
REPLAY_DEFAULTS_NOTE = (
    "toolwatch replay: no configuration file (--config or TOOLWATCH_CONFIG): judged by the"
    " built-in defaults, which have no policy and no golden cases"
)


def _replay(args: argparse.Namespace) -> int:
    # Replay binds no listener: the TLS and token files are the pod's Secrets, not CI's.
    path, origin = config_file(args), config_origin(args)
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
