"""Configuration of the references stage: golden cases and shadow pairs (DESIGN §6).

These are the ``golden:`` and ``shadow:`` sections of the configuration file. They are
validated once at start-up; an invalid value raises ``pydantic.ValidationError`` whose
messages name the field and the reason (the config loader adds the file path).

Each section also says which span attributes ingest must copy into
``ToolTrace.reference_keys`` (``reference_keys()``): the case id for golden cases, the pair
key and role for shadow pairs. Nothing here reads files; ``cases_file`` is checked when
``references.golden_file.load_golden_cases`` reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, Field, model_validator

from toolwatch.sections import WEEK_SECONDS, FilePath, Seconds
from toolwatch.sections import Section as _Section

__all__ = [
    "DEFAULT_CASE_ID_ATTRIBUTE",
    "DEFAULT_PAIR_KEY_ATTRIBUTE",
    "DEFAULT_ROLE_ATTRIBUTE",
    "GoldenSettings",
    "ShadowSettings",
    "fold_role",
]

DEFAULT_CASE_ID_ATTRIBUTE = "toolwatch.case_id"
DEFAULT_PAIR_KEY_ATTRIBUTE = "toolwatch.shadow.pair_id"
DEFAULT_ROLE_ATTRIBUTE = "toolwatch.shadow.role"


def _attribute_key(value: str) -> str:
    """An OpenTelemetry attribute key: non-empty, no surrounding or inner whitespace."""
    if not value:
        raise ValueError("must be a non-empty span attribute key")
    if any(ch.isspace() for ch in value):
        raise ValueError(f"{value!r} is not a span attribute key: it contains whitespace")
    return value


def _role_value(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a non-empty attribute value")
    return value


_AttributeKey = Annotated[str, AfterValidator(_attribute_key)]
_RoleValue = Annotated[str, AfterValidator(_role_value)]


class GoldenSettings(_Section):
    """Golden cases (the *expected* reference): a YAML file of cases, matched to live runs
    whose span (or resource) attribute ``case_id_attribute`` carries a case id. Off when
    ``cases_file`` is ``None``."""

    cases_file: FilePath | None = Field(default=None, description="YAML file of golden cases")
    case_id_attribute: _AttributeKey = Field(
        default=DEFAULT_CASE_ID_ATTRIBUTE, description="span attribute carrying the case id"
    )

    def reference_keys(self) -> frozenset[str]:
        """Attribute keys ingest must capture for golden matching (none when off)."""
        return frozenset({self.case_id_attribute}) if self.cases_file is not None else frozenset()


def fold_role(value: str) -> str:
    """A shadow role as compared: trimmed, case-folded (``Prod `` names ``prod``)."""
    return value.strip().casefold()


class ShadowSettings(_Section):
    """Shadow pairs (the *source* reference): runs sharing the ``pair_key_attribute`` value
    are joined by ``role_attribute`` (``source_value`` / ``target_value``, compared
    case-insensitively). A half waits at most ``pair_timeout_seconds`` (at most a week); at most
    ``max_waiting`` halves, holding at most ``max_waiting_bytes``, wait at once (the oldest
    is dropped beyond that)."""

    enabled: bool = False
    pair_key_attribute: _AttributeKey = DEFAULT_PAIR_KEY_ATTRIBUTE
    role_attribute: _AttributeKey = DEFAULT_ROLE_ATTRIBUTE
    source_value: _RoleValue = "source"
    target_value: _RoleValue = "target"
    pair_timeout_seconds: Seconds = Field(
        default=60.0,
        gt=0,
        le=WEEK_SECONDS,
        allow_inf_nan=False,
        description="how long a half waits",
    )
    max_waiting: int = Field(default=10_000, gt=0, description="bound on halves waiting at once")
    max_waiting_bytes: int = Field(
        default=64 * 2**20, gt=0, description="bound on what the waiting halves hold"
    )

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        if self.pair_key_attribute == self.role_attribute:
            raise ValueError(
                f"pair_key_attribute and role_attribute are both {self.role_attribute!r};"
                " they must be different attributes"
            )
        if fold_role(self.source_value) == fold_role(self.target_value):
            raise ValueError(
                f"source_value {self.source_value!r} and target_value {self.target_value!r}"
                " name the same role (roles are compared case-insensitively)"
            )
        return self

    def role_of(self, value: str) -> Literal["source", "target"] | None:
        """The half a run's ``role_attribute`` value names, compared as ``fold_role`` does."""
        folded = fold_role(value)
        if folded == fold_role(self.source_value):
            return "source"
        return "target" if folded == fold_role(self.target_value) else None

    def is_target(self, reference_keys: Mapping[str, str]) -> bool:
        """Whether a run with these ``ToolTrace.reference_keys`` is a shadow target: the
        candidate model's copy of a request (its actions are not production's). Its role
        says so, with or without a pair key: a candidate sets its role once (a resource
        attribute) and the key per request, which a hop may lose; without one it pairs
        with nothing, but is still no production run."""
        role = reference_keys.get(self.role_attribute) if self.enabled else None
        return role is not None and self.role_of(role) == "target"

    def is_source(self, reference_keys: Mapping[str, str]) -> bool:
        """Whether a run with these ``ToolTrace.reference_keys`` is a shadow source: the
        serving model's run of a request a candidate also serves."""
        return self._half(reference_keys) == "source"

    def _half(self, reference_keys: Mapping[str, str]) -> str | None:
        if not self.enabled or not reference_keys.get(self.pair_key_attribute):
            return None
        role = reference_keys.get(self.role_attribute)
        return None if role is None else self.role_of(role)

    def reference_keys(self) -> frozenset[str]:
        """Attribute keys ingest must capture for shadow joining (none when disabled)."""
        if not self.enabled:
            return frozenset()
        return frozenset({self.pair_key_attribute, self.role_attribute})
