"""``python -m bench.pin CPU -- COMMAND...``: run COMMAND on one CPU.

The affinity is set before ``exec``, so every thread the command starts (gRPC's pollers
included) inherits it.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main"]


def main(argv: list[str]) -> None:
    cpu, separator, *command = argv
    if separator != "--" or not command:
        raise SystemExit("usage: python -m bench.pin CPU -- COMMAND...")
    os.sched_setaffinity(0, {int(cpu)})
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
