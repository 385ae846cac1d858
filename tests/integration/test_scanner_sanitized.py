"""The compiled OTLP scanner under AddressSanitizer and UndefinedBehaviorSanitizer.

The differential tests (tests/unit/ingest/test_scan_compiled.py) run the optimized build,
where an out-of-bounds read may go unnoticed; here ``make fuzz``'s script builds the scanner
with the sanitizers and fuzzes it against protobuf for a short while, so a memory error in
``_wire.c`` fails CI. ``make fuzz`` runs the same for longer.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import run_fuzzer


def _sanitizers_available() -> bool:
    if shutil.which("gcc") is None:
        return False
    for library in ("libasan.so", "libubsan.so"):
        found = subprocess.run(
            ["gcc", f"-print-file-name={library}"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if not Path(found).is_file():  # gcc echoes the bare name when it has no such library
            return False
    return True


@pytest.mark.skipif(not _sanitizers_available(), reason="gcc with libasan/libubsan is needed")
def test_fuzzing_the_sanitized_scanner_finds_no_memory_error_and_no_difference() -> None:
    # A number of bodies, not a time: the same work on a busy machine (bounded at 240 s). A
    # floor on what 20 s reached failed under load (a full suite beside other work).
    run = run_fuzzer("run.sh", 240, 7, FUZZ_BODIES="1200")
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-2000:]
    summary = re.search(r"([\d,]+) bodies \(([\d,]+) taken by the compiled scanner\)", run.stdout)
    assert summary is not None, run.stdout
    bodies, taken = (int(n.replace(",", "")) for n in summary.groups())
    # It really fuzzed: each body goes through the scan, the census and the sift, and a
    # dense one through a whole decode and salvage too (3,544 bodies in 15 s measured, 136
    # of them taken by the scan).
    assert bodies == 1_200
    assert taken > 30  # and the compiled scanner really scanned
