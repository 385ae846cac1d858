"""The golden-case file's schema: what a case may say, checked as the file is read
(``references.golden_file.load_golden_cases``). Every field is typed strictly (YAML typed the
values already), unknown fields are refused, and a case's fields must agree with one another
(``GoldenCaseEntry``); each validator's ``ValueError`` says the value and the reason, which
the loader places at the field's path and YAML line.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, Self, TypeAlias, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from toolwatch.sections import YAML11_BOOLEANS

__all__ = [
    "ExpectedToolEntry",
    "GoldenCaseEntry",
    "GoldenFile",
    "MatchStrategy",
    "SelectionMode",
]


#: Argument strategies of the tool_arguments evaluator (DESIGN §7).
MatchStrategy: TypeAlias = Literal["exact", "subset", "numeric", "contains", "fuzzy"]
#: Modes of the tool_selection evaluator (DESIGN §7).
SelectionMode: TypeAlias = Literal["expected", "expected_set", "exact", "set", "first"]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _trimmed(value: str) -> str:
    """Case ids are compared exactly with the attribute a run carries: no stray spaces."""
    if value != _not_blank(value).strip():
        raise ValueError(f"{value!r} must not start or end with whitespace")
    return value


def _name_only(value: Any) -> Any:
    """``- lookup_order`` is short for ``- name: lookup_order``."""
    return {"name": value} if isinstance(value, str) else value


_STRATEGIES: Final = get_args(MatchStrategy)


def _strategies(value: Any) -> Any:
    """A call's ``match``: one strategy, or one per field."""
    named = " or ".join([", ".join(repr(s) for s in _STRATEGIES[:-1]), repr(_STRATEGIES[-1])])
    if value is None or value in _STRATEGIES:
        return value
    if isinstance(value, dict):
        for field, strategy in value.items():
            if strategy not in _STRATEGIES:
                raise ValueError(f"{field}: must be {named}, got {strategy!r}")
        return value
    raise ValueError(f"must be {named} (or a mapping of fields to them), got {value!r}")


_Text = Annotated[str, AfterValidator(_not_blank)]
_Id = Annotated[str, AfterValidator(_trimmed)]


def _yaml11_boolean(value: Any) -> Any:
    """A case's flag written ``yes``/``no``/``on``/``off`` (text to ``YamlLoader``) is the
    boolean YAML 1.1 read, as before: in a field that takes only booleans it is no text."""
    return YAML11_BOOLEANS.get(value, value) if isinstance(value, str) else value


#: A case's own flag (``expected_no_tools: yes`` still reads as true).
_Flag = Annotated[bool, BeforeValidator(_yaml11_boolean)]


class _Schema(BaseModel):
    # strict: YAML typed the values already; a "2" count is a mistake to report, not coerce.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ExpectedToolEntry(_Schema):
    """One expected call. ``arguments`` ``None`` means any arguments; ``match`` is the default
    argument strategy for its fields (``None``: the evaluator's configured default), or a
    strategy per field (``{reason: contains}``: the fields not named are compared as
    configured)."""

    name: _Text
    arguments: dict[str, Any] | None = None
    match: Annotated[Any, AfterValidator(_strategies)] = None

    @model_validator(mode="after")
    def _matched_fields_given(self) -> Self:
        if not isinstance(self.match, dict):
            return self
        given = self.arguments or {}
        unknown = [field for field in self.match if field not in given]
        if unknown:
            raise ValueError(
                f"match names {unknown[0]!r}, which the call's arguments do not give: a"
                " strategy per field applies to the arguments listed"
            )
        return self


#: The bounds of ``expected_every_seconds``: a canary checked more often than Prometheus
#: evaluates alert rules (about a minute) could never be met; a monthly one with slack.
_MIN_EVERY_SECONDS: Final = 60
_MAX_EVERY_SECONDS: Final = 31 * 86_400


class GoldenCaseEntry(_Schema):
    """One case as written in the file."""

    id: _Id
    expected_tools: list[Annotated[ExpectedToolEntry, BeforeValidator(_name_only)]] = []
    expected_no_tools: _Flag = False
    expected_min_steps: int | None = Field(default=None, ge=1)
    expected_tool_count: int | None = Field(default=None, ge=0)
    category: _Text | None = None
    mode: SelectionMode | None = None
    expected_refusal: _Flag | None = None
    agent: _Text | None = None
    expected_every_seconds: float | None = Field(
        default=None, ge=_MIN_EVERY_SECONDS, le=_MAX_EVERY_SECONDS, allow_inf_nan=False
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.expected_no_tools and self.expected_tools:
            raise ValueError(
                f"expected_no_tools is true but expected_tools lists {len(self.expected_tools)}"
                " tool(s); a case expects either tools or no tools"
            )
        count, tools = self.expected_tool_count, len(self.expected_tools)
        if self.expected_no_tools and count:
            raise ValueError(f"expected_no_tools is true but expected_tool_count is {count}")
        if count is not None and count < tools:
            raise ValueError(
                f"expected_tool_count is {count} but expected_tools lists {tools} call(s):"
                " a good run makes at least those"
            )
        steps = self.expected_min_steps
        if steps is not None and (self.expected_no_tools or count == 0):
            raise ValueError(
                f"expected_min_steps is {steps} but the case expects no tool call: leave"
                " expected_min_steps out"
            )
        if steps is not None and count is not None and steps > count:
            raise ValueError(
                f"expected_min_steps ({steps}) is above expected_tool_count ({count}): a good"
                " run needs no more calls than it makes"
            )
        if self.mode is not None and not self.expected_tools:
            raise ValueError(f"mode {self.mode!r} needs expected_tools to select against")
        if not (self.expected_tools or self.expected_no_tools or self._expects_more()):
            raise ValueError(
                "the case expects nothing: give expected_tools, expected_no_tools,"
                " expected_min_steps, expected_tool_count or expected_refusal"
            )
        return self

    def _expects_more(self) -> bool:
        given = (self.expected_min_steps, self.expected_tool_count, self.expected_refusal)
        return any(value is not None for value in given)


class GoldenFile(_Schema):
    """The whole file: a list of cases."""

    cases: list[GoldenCaseEntry]
