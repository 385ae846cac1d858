"""Golden-case argument values are read as YAML 1.2 and JSON read them, not as YAML 1.1
retypes them (``14:30`` base 60, ``01234`` octal, ``NO`` false)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolwatch.references.golden_file import ReferenceFileError, load_golden_cases


def _arguments(tmp_path: Path, arguments: str, flags: str = "") -> dict[str, Any]:
    path = tmp_path / "cases.yaml"
    path.write_text(
        "cases:\n  - id: callback\n"
        f"{flags}"
        "    expected_tools:\n      - name: book_callback\n"
        f"        arguments: {arguments}\n",
        encoding="utf-8",
    )
    (case,) = list(load_golden_cases(path))
    return dict(case.expected_tools[0].arguments or {})


@pytest.mark.parametrize(
    ("written", "value"),
    [
        ("14:30", "14:30"),  # YAML 1.1: 870
        ("1:02:03", "1:02:03"),
        ("01234", "01234"),  # YAML 1.1: 668
        ("0x1F", "0x1F"),
        ("1_000", "1_000"),
        ("2024-05-01", "2024-05-01"),
        ("12", 12),
        ("-0", 0),
        ("+5", 5),
        ("49.99", 49.99),
        ("1e3", 1000.0),
        ("-.5", -0.5),
        ("true", True),
        ("FALSE", False),
        ("null", None),
        ("'NO'", "NO"),
    ],
)
def test_plain_values_are_read_as_json_reads_them(tmp_path: Path, written: str, value: Any) -> None:
    assert _arguments(tmp_path, f"{{x: {written}}}") == {"x": value}


@pytest.mark.parametrize("word", ["NO", "yes", "On", "off"])
def test_a_yaml_11_boolean_word_in_arguments_is_refused_naming_it(
    tmp_path: Path, word: str
) -> None:
    with pytest.raises(ReferenceFileError) as caught:
        _arguments(tmp_path, f"{{order_id: A1, country: [SE, {word}]}}")
    ((where, reason),) = caught.value.problems
    assert where == "cases[0].expected_tools[0].arguments.country[1]"
    assert reason.startswith(f"case 'callback': {word} is read as ")
    assert "quote the text" in reason and "(line 5," in reason


def test_the_cases_own_flags_keep_yaml_11_booleans(tmp_path: Path) -> None:
    assert _arguments(tmp_path, "{x: 1}", flags="    expected_refusal: no\n") == {"x": 1}


def test_inf_is_still_refused(tmp_path: Path) -> None:
    with pytest.raises(ReferenceFileError, match=r"\.inf is no JSON value"):
        _arguments(tmp_path, "{x: .inf}")
