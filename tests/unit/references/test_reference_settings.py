"""Reference settings: defaults, validation messages, and the keys ingest must capture."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from toolwatch.config import Config, ConfigError, load_config
from toolwatch.references.settings import GoldenSettings, ShadowSettings


def _messages(exc: pytest.ExceptionInfo[ValidationError]) -> list[tuple[str, str]]:
    return [
        (".".join(str(p) for p in error["loc"]), error["msg"])
        for error in exc.value.errors(include_url=False)
    ]


def test_defaults_need_no_reference_keys() -> None:
    config = Config()

    assert config.golden.cases_file is None
    assert config.shadow.enabled is False
    assert config.reference_keys() == frozenset()


def test_golden_cases_need_the_case_id_key() -> None:
    config = Config.model_validate({"golden": {"cases_file": "cases.yaml"}})

    assert config.reference_keys() == frozenset({"toolwatch.case_id"})
    assert config.decode_options().reference_keys == config.reference_keys()


def test_shadow_needs_pair_key_and_role() -> None:
    config = Config.model_validate(
        {
            "golden": {"cases_file": "cases.yaml", "case_id_attribute": "canary.case"},
            "shadow": {"enabled": True},
        }
    )

    assert config.reference_keys() == frozenset(
        {"canary.case", "toolwatch.shadow.pair_id", "toolwatch.shadow.role"}
    )


def test_shadow_defaults() -> None:
    shadow = ShadowSettings()

    assert (shadow.source_value, shadow.target_value) == ("source", "target")
    assert shadow.pair_timeout_seconds == 60
    assert shadow.max_waiting == 10_000


def test_unknown_field_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        ShadowSettings.model_validate({"enabled": True, "pair_timeout": 5})

    assert _messages(caught) == [("pair_timeout", "Extra inputs are not permitted")]


def test_attribute_keys_cannot_contain_whitespace() -> None:
    with pytest.raises(ValidationError) as caught:
        GoldenSettings(case_id_attribute="case id")

    assert _messages(caught) == [
        (
            "case_id_attribute",
            "Value error, 'case id' is not a span attribute key: it contains whitespace",
        )
    ]


def test_empty_attribute_key_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        ShadowSettings(role_attribute="")

    assert _messages(caught) == [
        ("role_attribute", "Value error, must be a non-empty span attribute key")
    ]


def test_timeout_must_be_positive_and_finite() -> None:
    with pytest.raises(ValidationError) as caught:
        ShadowSettings.model_validate({"pair_timeout_seconds": 0})
    with pytest.raises(ValidationError) as infinite:
        ShadowSettings.model_validate({"pair_timeout_seconds": float("inf")})

    assert _messages(caught) == [("pair_timeout_seconds", "Input should be greater than 0")]
    assert _messages(infinite) == [("pair_timeout_seconds", "Input should be a finite number")]


def test_max_waiting_must_be_positive() -> None:
    with pytest.raises(ValidationError) as caught:
        ShadowSettings.model_validate({"max_waiting": 0})

    assert _messages(caught) == [("max_waiting", "Input should be greater than 0")]


def test_roles_must_differ_ignoring_case() -> None:
    with pytest.raises(ValidationError) as caught:
        ShadowSettings(source_value="Prod", target_value="prod")

    assert _messages(caught) == [
        (
            "",
            "Value error, source_value 'Prod' and target_value 'prod' name the same role"
            " (roles are compared case-insensitively)",
        )
    ]


def test_pair_key_and_role_must_be_different_attributes() -> None:
    with pytest.raises(ValidationError) as caught:
        ShadowSettings(pair_key_attribute="shadow", role_attribute="shadow")

    assert _messages(caught) == [
        (
            "",
            "Value error, pair_key_attribute and role_attribute are both 'shadow';"
            " they must be different attributes",
        )
    ]


def test_case_id_cannot_double_as_a_shadow_attribute() -> None:
    overrides = {
        "golden.cases_file": "cases.yaml",
        "golden.case_id_attribute": "run.key",
        "shadow.enabled": True,
        "shadow.pair_key_attribute": "run.key",
    }
    with pytest.raises(ConfigError) as caught:
        load_config(None, overrides)

    assert (
        "golden.case_id_attribute 'run.key' is also a shadow attribute;"
        " use a different attribute for each" in str(caught.value)
    )


def test_a_role_is_named_trimmed_and_case_insensitively() -> None:
    shadow = ShadowSettings(enabled=True, source_value="Prod ", target_value="canary")

    assert [shadow.role_of(v) for v in ("prod", " PROD", "Canary", "other")] == [
        "source",
        "source",
        "target",
        None,
    ]
