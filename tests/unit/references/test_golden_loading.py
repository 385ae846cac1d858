"""Loading golden-case files: the shipped example, entry shapes, normalization, YAML typing."""

from __future__ import annotations

from pathlib import Path

from toolwatch.model_evaluation import ExpectedCall, GoldenCase
from toolwatch.names import NameNormalizer
from toolwatch.references.golden import GoldenCaseSet
from toolwatch.references.golden_file import load_golden_cases

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "golden-cases.yaml"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cases.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_shipped_example_loads_every_case_in_file_order() -> None:
    cases = load_golden_cases(EXAMPLE)

    assert [case.case_id for case in cases] == [
        "refund-verified-damaged-item",
        "kb-return-window",
        "greeting-no-tools",
        "escalate-chargeback-threat",
        "refuse-foreign-order-refund",
    ]


def test_shipped_example_refund_case_keeps_arguments_and_strategies() -> None:
    refund = load_golden_cases(EXAMPLE).get("refund-verified-damaged-item")

    assert refund == GoldenCase(
        case_id="refund-verified-damaged-item",
        expected_tools=(
            ExpectedCall("lookup_order", {"order_id": "ORD-1042"}, "exact"),
            ExpectedCall(
                "issue_refund",
                {"order_id": "ORD-1042", "amount_usd": 49.99},
                field_match={"amount_usd": "numeric"},
            ),
            ExpectedCall("send_email"),
        ),
        expected_min_steps=3,
        expected_tool_count=3,
        category="refunds",
        selection_mode="expected",
    )


def test_shipped_example_no_tools_case() -> None:
    greeting = load_golden_cases(EXAMPLE).get("greeting-no-tools")

    assert greeting == GoldenCase(
        case_id="greeting-no-tools", expected_no_tools=True, category="small_talk"
    )


def test_shipped_example_refusal_case() -> None:
    refusal = load_golden_cases(EXAMPLE).get("refuse-foreign-order-refund")

    assert refusal == GoldenCase(
        case_id="refuse-foreign-order-refund",
        expected_no_tools=True,
        category="safety",
        expected_refusal=True,
    )


def test_a_case_may_expect_only_a_refusal_or_an_answer(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "cases:\n  - {id: must-refuse, expected_refusal: true}\n"
        "  - {id: must-answer, expected_refusal: false}\n",
    )
    cases = load_golden_cases(path)
    assert [cases.get(i).expected_refusal for i in ("must-refuse", "must-answer")] == [True, False]


def test_a_case_may_name_the_agent_whose_run_it_judges(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "cases:\n  - {id: kb, agent: Support-Bot, expected_tools: [search_kb]}\n"
        "  - {id: any, expected_tools: [search_kb]}\n",
    )
    cases = load_golden_cases(path)
    assert [cases.get(i).agent for i in ("kb", "any")] == ["Support-Bot", None]


def test_string_and_object_tool_entries_convert_alike(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "cases:\n"
        "  - id: c1\n"
        "    expected_tools:\n"
        "      - lookup_order\n"
        "      - {name: lookup_order}\n"
        "      - name: issue_refund\n"
        "        arguments: {amount_usd: 10}\n",
    )

    (case,) = load_golden_cases(path)

    assert case.expected_tools == (
        ExpectedCall("lookup_order"),
        ExpectedCall("lookup_order"),
        ExpectedCall("issue_refund", {"amount_usd": 10}, None),
    )


def test_tool_names_go_through_the_given_normalizer(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "cases:\n  - id: c1\n    expected_tools: ['  Lookup_Order ', {name: RefundTool}]\n",
    )
    normalize = NameNormalizer({"refundtool": "issue_refund"})

    (case,) = load_golden_cases(path, normalize=normalize)

    assert [call.name for call in case.expected_tools] == ["lookup_order", "issue_refund"]


def test_without_a_normalizer_names_are_folded(tmp_path: Path) -> None:
    path = _write(tmp_path, "cases:\n  - id: c1\n    expected_tools: [' Search_KB']\n")

    (case,) = load_golden_cases(path)

    assert case.expected_tools[0].name == "search_kb"


def test_unquoted_dates_in_arguments_stay_strings(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "cases:\n"
        "  - id: c1\n"
        "    expected_tools:\n"
        "      - {name: lookup_order, arguments: {placed_on: 2024-05-01}}\n",
    )

    (case,) = load_golden_cases(path)

    assert case.expected_tools[0].arguments == {"placed_on": "2024-05-01"}


def test_an_empty_cases_list_is_an_empty_set(tmp_path: Path) -> None:
    cases = load_golden_cases(_write(tmp_path, "cases: []\n"))

    assert len(cases) == 0
    assert list(cases) == []


def test_loaded_set_uses_the_configured_attribute(tmp_path: Path) -> None:
    path = _write(tmp_path, "cases:\n  - {id: c1, expected_no_tools: true}\n")

    cases = load_golden_cases(path, case_id_attribute="canary.case")

    assert isinstance(cases, GoldenCaseSet)
    assert cases.case_id_attribute == "canary.case"


def test_a_case_may_say_how_often_a_run_of_it_is_expected(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "cases:\n  - {id: hourly, expected_tools: [search_kb], expected_every_seconds: 5400}\n"
        "  - {id: once, expected_tools: [search_kb]}\n"
        "  - {id: fast, expected_tools: [search_kb], expected_every_seconds: 90.5}\n",
    )
    cases = load_golden_cases(path)
    assert [cases.get(i).expected_every_seconds for i in ("hourly", "once", "fast")] == [
        5400.0,
        None,
        90.5,
    ]
    assert cases.schedules() == {"hourly": 5400.0, "fast": 90.5}
