"""The ``policy.invariants`` rules: hand-written checks of a run's calls, told apart by
``kind`` (``Invariant``). Validated here; ``toolwatch.evaluation.invariants`` evaluates them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for
from pydantic import ConfigDict, Field, field_validator, model_validator

from toolwatch.evaluation.tool_fields import ToolName
from toolwatch.model import Severity
from toolwatch.names import fold
from toolwatch.sections import Section as _Section

__all__ = [
    "ArgumentsRule",
    "CallCountRule",
    "ForbiddenRule",
    "Invariant",
    "OrderRule",
    "RequiredRule",
]


class _Rule(_Section):
    """Common to every invariant: an optional ``name`` (the finding's label; unique), the
    ``severity`` of a violation (default ``high``: someone wrote this rule down), and the
    ``agents`` it applies to (empty: every agent)."""

    name: str | None = None
    severity: Severity = Severity.HIGH
    agents: tuple[str, ...] = ()


class ForbiddenRule(_Rule):
    """``tool`` must never be called."""

    kind: Literal["forbidden"]
    tool: ToolName


class RequiredRule(_Rule):
    """``tool`` must be called at least once."""

    kind: Literal["required"]
    tool: ToolName


class OrderRule(_Rule):
    """Every call of ``after`` must have an earlier call (lower sequence index) of ``before``;
    a run that never calls ``after`` satisfies it."""

    kind: Literal["order"]
    before: ToolName
    after: ToolName

    @model_validator(mode="after")
    def _distinct(self) -> OrderRule:
        if fold(self.before) == fold(self.after):
            raise ValueError(f"before and after are the same tool {self.before!r}")
        return self


class CallCountRule(_Rule):
    """``tool`` is called between ``min`` and ``max`` times (inclusive; no ``max``: unbounded)."""

    kind: Literal["call_count"]
    tool: ToolName
    min: Annotated[int, Field(ge=0)] = 0
    max: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _bounds(self) -> CallCountRule:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        if self.max is None and self.min == 0:
            raise ValueError("call_count needs min > 0 or a max")
        return self


class ArgumentsRule(_Rule):
    """Every call of ``tool`` has arguments valid against ``schema`` (a JSON Schema; its
    ``$schema`` picks the draft, default the latest)."""

    model_config = ConfigDict(populate_by_name=True)

    kind: Literal["arguments"]
    tool: ToolName
    json_schema: dict[str, Any] = Field(alias="schema")

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        try:
            validator_for(schema).check_schema(schema)
        except SchemaError as error:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise ValueError(f"not a valid JSON Schema at {where}: {error.message}") from None
        except RecursionError:  # jsonschema checks nesting by recursion
            raise ValueError("a JSON Schema nested too deeply to check") from None
        return schema


#: One hand-written rule, told apart by ``kind``.
Invariant = Annotated[
    ForbiddenRule | RequiredRule | OrderRule | CallCountRule | ArgumentsRule,
    Field(discriminator="kind"),
]
