"""``bench.instructions`` reads callgrind's profile parts: one total per stage, in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.instructions import _parts


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
