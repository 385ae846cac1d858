"""The whole pipeline under coverage-guided fuzzing (atheris): ``make fuzz``'s second half,
for a short while. Any input that makes decoding raise something other than a clear
``DecodeError``, makes the engine or an evaluator fail on some trace, or loses a span from
the accounting stops libFuzzer with the input saved, and fails this test
(``tools/fuzz/pipeline.py`` states the contract). ``make fuzz`` runs the same for longer.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.conftest import run_fuzzer

pytest.importorskip("atheris", reason="atheris has wheels for x86-64 Linux only")


@pytest.mark.parametrize("pure", ["1", "0"], ids=["source", "compiled"])
def test_fuzzing_the_pipeline_breaks_no_contract(tmp_path: Path, pure: str) -> None:
    """From the source (coverage reaches the whole pipeline), and the compiled build (what
    runs in production, where a value of the wrong type would be a TypeError)."""
    # A number of inputs, not a time: the same work on a busy machine (bounded at 120 s)
    run = run_fuzzer(
        "pipeline.sh", 120, 7, FUZZ_DIR=str(tmp_path), TOOLWATCH_PURE_PYTHON=pure, FUZZ_RUNS="2500"
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    if pure == "0" and "hot path: pure Python (not compiled at install;" in output:
        pytest.skip("this install has no compiled hot path (built without a C compiler)")
    built = "toolwatch hot path: compiled by mypyc ("  # what ran: the install's build
    assert (built in output) is (pure == "0"), output[:2000]
    assert not list(tmp_path.glob("crash-*"))
    done = re.search(r"Done (\d+) runs", output)
    assert done is not None, output[-2000:]
    assert int(done.group(1)) >= 2_500  # it really fuzzed: every input, within the bound
    seeds = re.search(r"(\d+) seeds in", output)
    assert seeds is not None and int(seeds.group(1)) > 100  # from the real fixtures
