"""The review tests import the assembly tests' helpers (assembly_support, stall_support)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "unit" / "assembly"))
