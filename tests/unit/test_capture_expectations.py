"""The fixtures' expectations are what ``tools/capture`` writes: a hand edit to an
``.expected.json`` would be reverted by the next capture, silently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.capture.expectations import expected_for

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "otlp"
EXPECTED = sorted(FIXTURES.glob("*.expected.json"))


def test_there_are_fixtures_to_check() -> None:
    assert len(EXPECTED) > 100


@pytest.mark.parametrize("path", EXPECTED, ids=[p.name[: -len(".expected.json")] for p in EXPECTED])
def test_each_expected_file_is_what_the_capture_tool_writes(path: Path) -> None:
    framework, instrumentation, scenario = path.name[: -len(".expected.json")].split("__")
    assert json.loads(path.read_text()) == expected_for(framework, instrumentation, scenario)
