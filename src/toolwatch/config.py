"""Configuration: one validated object, built once at start-up, passed down as plain values.

Sources, lowest precedence first: built-in defaults, the YAML file (``--config``), then
``TOOLWATCH_*`` environment variables and command-line flags (the CLI merges those two).
Every error names the file, the field path and the reason, and stops start-up.

The sections of other stages are defined next to their stage (``evaluation.settings``,
``references.settings``); this module composes them and owns the server-level sections.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from toolwatch.assembly.buffer import AssemblyLimits
from toolwatch.evaluation.settings import EvaluatorsSettings, PolicySettings
from toolwatch.references.settings import GoldenSettings, ShadowSettings

__all__ = [
    "AssemblySettings",
    "Config",
    "ConfigError",
    "IngestSettings",
    "ListenSettings",
    "MetricsSettings",
    "OutputSettings",
    "load_config",
    "parse_listen_address",
]

_MIB = 2**20


class ConfigError(ValueError):
    """Invalid configuration. The message names the source, the field path and the reason."""


def parse_listen_address(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` for IPv6). Port 0 asks the OS for a free port."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{value!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        ipaddress.IPv6Address(host)
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{value!r}: port must be a number from 0 to 65535")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    """True for loopback addresses and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ListenSettings(_Section):
    """Listener addresses. Defaults are loopback: safe for a sidecar."""

    grpc: str = "127.0.0.1:4317"
    http: str = "127.0.0.1:4318"
    metrics: str = "127.0.0.1:9464"
    stream: str = "127.0.0.1:4319"

    @field_validator("grpc", "http", "metrics", "stream")
    @classmethod
    def _address(cls, value: str) -> str:
        parse_listen_address(value)
        return value


class IngestSettings(_Section):
    max_request_bytes: int = Field(16 * _MIB, gt=0, description="cap after decompression")
    max_value_bytes: int = Field(65_536, gt=0, description="longer attribute values are cut")
    retry_after_seconds: float = Field(1.0, gt=0, le=300)


class AssemblySettings(_Section):
    completion_wait_seconds: float = Field(2.0, gt=0)
    max_trace_age_seconds: float = Field(60.0, gt=0)
    late_span_window_seconds: float = Field(300.0, ge=0)
    max_traces: int = Field(10_000, gt=0)
    max_spans_per_trace: int = Field(5_000, gt=0)
    max_buffered_spans: int = Field(200_000, gt=0)
    max_buffered_bytes: int = Field(256 * _MIB, gt=0)
    max_remembered_traces: int = Field(100_000, ge=0)
    overflow: Literal["backpressure", "evict_oldest"] = "backpressure"
    tick_seconds: float = Field(0.05, gt=0, le=10, description="how often completion is checked")

    def limits(self) -> AssemblyLimits:
        return AssemblyLimits(
            completion_wait_ns=_ns(self.completion_wait_seconds),
            max_trace_age_ns=_ns(self.max_trace_age_seconds),
            late_span_window_ns=_ns(self.late_span_window_seconds),
            max_traces=self.max_traces,
            max_spans_per_trace=self.max_spans_per_trace,
            max_buffered_spans=self.max_buffered_spans,
            max_buffered_bytes=self.max_buffered_bytes,
            max_remembered_traces=self.max_remembered_traces,
            overflow=self.overflow,
        )


class OutputSettings(_Section):
    """Where findings and ToolTraces go. ``-`` is standard output; ``None`` is off."""

    findings: str | None = "-"
    dump_tooltraces: str | None = None
    show_argument_values: bool = False
    show_fields: tuple[str, ...] = ()


class MetricsSettings(_Section):
    label_value_cap: int = Field(100, gt=0, le=10_000)
    agents: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()


class Config(_Section):
    """The whole configuration. ``Config()`` is the built-in default."""

    listen: ListenSettings = ListenSettings()
    ingest: IngestSettings = IngestSettings()
    assembly: AssemblySettings = AssemblySettings()
    policy: PolicySettings = PolicySettings()
    evaluators: EvaluatorsSettings = EvaluatorsSettings()
    golden: GoldenSettings = GoldenSettings()
    shadow: ShadowSettings = ShadowSettings()
    output: OutputSettings = OutputSettings()
    metrics: MetricsSettings = MetricsSettings()
    shutdown_grace_seconds: float = Field(10.0, gt=0, le=600)

    @model_validator(mode="after")
    def _references_agree(self) -> Config:
        # One attribute cannot be both a case id and a shadow key (see ReferenceSettings).
        shared = self.golden.reference_keys() & self.shadow.reference_keys()
        if shared:
            raise ValueError(f"golden and shadow both use the attribute {min(shared)!r}")
        return self


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


def load_config(path: Path | None, overrides: dict[str, Any] | None = None) -> Config:
    """Read ``path`` (YAML), apply ``overrides`` (dotted keys, e.g. ``listen.grpc``), and
    validate. Raises ``ConfigError`` naming the file, the field path and the reason."""
    source = str(path) if path else "defaults"
    data = _read_yaml(path) if path else {}
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    if path is not None:
        _resolve_relative(data, path.parent)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, exc)) from None


def _resolve_relative(data: dict[str, Any], base: Path) -> None:
    """Paths inside the file are relative to the file, not to the working directory."""
    golden = data.get("golden")
    if isinstance(golden, dict) and isinstance(golden.get("cases_file"), str):
        cases = Path(golden["cases_file"])
        golden["cases_file"] = str(cases if cases.is_absolute() else base / cases)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[leaf] = value


def _format_errors(source: str, exc: ValidationError) -> str:
    lines = [f"{source}: {exc.error_count()} configuration error(s)"]
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        shown = repr(error.get("input"))
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        lines.append(f"  {source}: {where}: {error['msg']} (got {shown})")
    return "\n".join(lines)
