"""``toolwatch check-config`` on the command line: the configuration ``serve`` would run
with, from the same file, flags and variables (``toolwatch.cli_sources``), checked as
``serve`` checks it before binding its listeners, its warnings printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from toolwatch.cli_sources import (
    SERVE_DEFAULTS_WARNING,
    add_config_option,
    add_override_flags,
    read_sources,
)
from toolwatch.cli_usage import add_command
from toolwatch.config import output_warnings
from toolwatch.engine_setup import build_references
from toolwatch.process_tuning import open_files_warning
from toolwatch.replay import EXIT_OK

__all__ = ["add_check_config"]


def add_check_config(commands: Any) -> None:
    """``toolwatch check-config``'s parser: serve's flags, and the file as CONFIG_FILE or
    ``--config``."""
    check = add_command(commands, "check-config")
    file = check.add_mutually_exclusive_group()
    file.add_argument(
        "file",
        type=Path,
        nargs="?",
        metavar="CONFIG_FILE",
        help="the configuration file to check, or --config FILE (not both)",
    )
    add_config_option(file)
    add_override_flags(check)
    check.set_defaults(run=_check_config)


def _check_config(args: argparse.Namespace) -> int:
    """``toolwatch check-config``: what ``serve`` checks before it binds its listeners."""
    sources = read_sources(args)
    config = sources.load_checked()
    golden, _shadow = build_references(config)
    # serve's warning of a start without a file too: a deploy pipeline whose TOOLWATCH_CONFIG
    # went missing would otherwise read `defaults: ok` for a server that finds nothing.
    unnamed = [SERVE_DEFAULTS_WARNING] if sources.path is None else []
    said = config.warnings(defaults=sources.path is None)
    # The hard limit check-config runs under: serve's when started the same way.
    files = open_files_warning(config.ingest.max_connections)
    for warning in [*unnamed, *said, *output_warnings(config), *([files] if files else [])]:
        print(f"{sources.name}: warning: {warning}", file=sys.stderr)
    cases = f", {len(golden)} golden case(s)" if golden is not None else ""
    given = ", ".join(f"{key} from {origin}" for key, origin in sources.origins.items())
    print(f"{sources.name}: ok{cases}" + (f"; overrides: {given}" if given else ""))
    return EXIT_OK
