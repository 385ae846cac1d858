"""``bench.server_instructions`` reads one callgrind profile's total, whichever line holds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.server_instructions import total_instructions


@pytest.mark.parametrize("line", ["summary: 3892940730", "totals: 3892940730"])
def test_the_total_is_read_from_either_line(tmp_path: Path, line: str) -> None:
    profile = tmp_path / "callgrind.out"
    profile.write_text(f"# callgrind format\nversion: 1\nevents: Ir\n{line}\nfl=x\n")

    assert total_instructions(profile) == 3_892_940_730


def test_a_profile_without_a_total_is_an_error_naming_it(tmp_path: Path) -> None:
    profile = tmp_path / "callgrind.out"
    profile.write_text("# callgrind format\nversion: 1\nevents: Ir\n")

    with pytest.raises(RuntimeError, match=r"callgrind\.out"):
        total_instructions(profile)
