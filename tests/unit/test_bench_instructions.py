"""``bench.instructions`` reads callgrind's profiles: one total per stage, in order, and one
profile's total (``bench.server_instructions`` reads whole server processes with it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.instructions import _parts, profile_total


def _write_part(prefix: Path, n: int, header: str) -> None:
    Path(f"{prefix}.{n}").write_text(
        f"# callgrind format\nversion: 1\ncmd: python\npart: {n}\nevents: Ir\n{header}\nfl=x\n"
    )


def test_parts_are_read_in_order_whichever_total_line_callgrind_wrote(tmp_path: Path) -> None:
    prefix = tmp_path / "callgrind.out"
    _write_part(prefix, 1, "summary: 1200")
    _write_part(prefix, 2, "totals: 345")
    _write_part(prefix, 3, "summary: 0")

    assert _parts(prefix, 3) == [1200, 345, 0]


def test_a_part_without_totals_is_an_error_naming_it(tmp_path: Path) -> None:
    prefix = tmp_path / "callgrind.out"
    _write_part(prefix, 1, "summary: 10")
    _write_part(prefix, 2, "events: Ir")

    with pytest.raises(RuntimeError, match=r"callgrind\.out\.2"):
        _parts(prefix, 2)


@pytest.mark.parametrize("line", ["summary: 3892940730", "totals: 3892940730"])
def test_a_profile_total_is_read_from_either_line(tmp_path: Path, line: str) -> None:
    profile = tmp_path / "callgrind.out"
    profile.write_text(f"# callgrind format\nversion: 1\nevents: Ir\n{line}\nfl=x\n")

    assert profile_total(profile) == 3_892_940_730


def test_a_profile_without_a_total_is_an_error_naming_it(tmp_path: Path) -> None:
    profile = tmp_path / "callgrind.out"
    profile.write_text("# callgrind format\nversion: 1\nevents: Ir\n")

    with pytest.raises(RuntimeError, match=r"callgrind\.out"):
        profile_total(profile)
