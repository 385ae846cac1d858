"""``python -m toolwatch``: the ``toolwatch`` command, as the console script runs it.

It imports ``toolwatch.cli`` alone, as the console script does: that module's first lines
catch SIGHUP before anything slow is imported (its comments say why), so ``python -m
toolwatch serve`` starts as safely as ``toolwatch serve``.
"""

from __future__ import annotations

import sys

from toolwatch.cli import main

if __name__ == "__main__":
    sys.exit(main())
