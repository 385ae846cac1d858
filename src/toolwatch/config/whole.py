"""``Config``, the whole configuration composing every section with the checks that read
several, and the start-up checks of what it names beyond validation: output files
``serve`` could not open or others may read, an expired TLS certificate.

An output path may name one of the process's own descriptors: ``/dev/stderr`` (a socket
under systemd: the journal's stream), ``/dev/fd/N``. Linux opens them by name through
``/proc``; one that is not open, or a ``/proc`` not mounted, fails with ENOENT, "No such
file or directory", which says neither. ``unopenable_descriptor`` says which, for these
checks and for ``output_files`` when ``serve`` opens the path: it reads the path's text
alone (which descriptor a path holds is told by ``output_files``, from the descriptor's
identity), so a link to such a name fails as the system says.
"""

from __future__ import annotations

import datetime
import errno
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from toolwatch import compiled_state
from toolwatch.config.errors import ConfigError, _origin, _source
from toolwatch.config.judging import judging_warnings
from toolwatch.config.listen import ListenSettings, is_loopback, parse_listen_address
from toolwatch.config.security import SecuritySettings
from toolwatch.config.stages import (
    AssemblySettings,
    IngestSettings,
    MetricsSettings,
    OutputSettings,
)
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.settings import ComparingSettings, EvaluatorsSettings
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.ingest.scan import COMPILED_UNAVAILABLE
from toolwatch.references.settings import GoldenSettings, ShadowSettings
from toolwatch.sections import Section as _Section

__all__ = [
    "ALERTED_RELOAD_SECONDS",
    "Config",
    "check_certificate",
    "check_outputs",
    "descriptor_name",
    "output_warnings",
    "private_file_warning",
    "unopenable_descriptor",
]


#: ToolwatchSecurityFilesNotReloaded sees a failing file only if it is looked at every 5m.
ALERTED_RELOAD_SECONDS = 240

#: The OpenTelemetry SDKs' default export timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s): the
#: Python gRPC exporter gives its batch up at once when told to retry later than what is left
#: of it, so a longer ``retry_after_seconds`` turns backpressure into spans lost in the client.
SDK_EXPORT_TIMEOUT_SECONDS = 10.0


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
    security: SecuritySettings = SecuritySettings()
    shutdown_grace_seconds: float = Field(10.0, gt=0, le=600)
    # After the drain, /metrics stays up until it is scraped once more, at most this long, so
    # the findings of the drain reach Prometheus (only if something has scraped it before and
    # the engine counted something since its last scrape).
    shutdown_metrics_linger_seconds: float = Field(15.0, ge=0, le=600)

    @model_validator(mode="after")
    def _sections_agree(self) -> Config:
        self.check_across_sections()
        return self

    def check_across_sections(self) -> None:
        """The checks that read several sections, which validation runs: for a configuration
        put together from two, as a reload does. Raises ``ValueError`` saying what is wrong."""
        self._references_agree()
        self._comparisons_have_their_reference()
        self._shown_fields_name_tools_as_findings_do()
        self.evaluators.tool_arguments.refuse_keys_of_one_target(self.policy.normalizer())

    def _references_agree(self) -> None:
        # One attribute cannot be both a case id and a pair key/role: a canary run would be
        # taken for a shadow half (or the reverse) and compared with the wrong reference.
        shared = self.golden.reference_keys() & self.shadow.reference_keys()
        if shared:
            raise ValueError(
                f"golden.case_id_attribute {min(shared)!r} is also a shadow attribute;"
                " use a different attribute for each"
            )

    def _comparisons_have_their_reference(self) -> None:
        # An evaluator held to a reference that never comes would never run, unsaid.
        missing = {"expected": self.golden.cases_file is None, "source": not self.shadow.enabled}
        setting = {"expected": "golden.cases_file is not set", "source": "shadow is off"}
        for name, evaluator in self.evaluators:
            # safety's policy checks run whatever it compares drift with: not refused.
            if not isinstance(evaluator, ComparingSettings):
                continue
            against = evaluator.against
            if evaluator.enabled and against != "auto" and missing[against]:
                raise ValueError(
                    f"evaluators.{name}.against is {against!r} but {setting[against]}, so it"
                    " would never run: configure that reference, use 'auto', or set"
                    f" evaluators.{name}.enabled: false"
                )

    def _shown_fields_name_tools_as_findings_do(self) -> None:
        # Findings carry normalized tool names: "Issue_Refund.order_id" would never match.
        normalize = self.policy.normalizer()
        named = self.named_tools()
        for entry in self.output.show_fields:
            tool, dot, field = entry.partition(".")
            normal = normalize(tool)
            if dot and tool != normal and normal in named:
                raise ValueError(
                    f"output.show_fields: {entry!r} names tool {tool!r}, which findings call"
                    f" {normal!r}: write {normal + '.' + field!r}"
                )

    def warnings(
        self,
        now: datetime.datetime | None = None,
        addresses: Mapping[str, str] | None = None,
        *,
        defaults: bool = False,
    ) -> list[str]:
        """Settings that are valid but defeat something (``serve`` logs them, ``check-config``
        prints them), with the files as they are at ``now`` (default: the current time).
        ``addresses``: the listeners' (``serve`` gives the bound ones; default: ``listen``'s),
        each warned about when it is reachable beyond loopback without TLS or authentication,
        or with bearer tokens but no TLS to keep them secret. Then ``judging_warnings``
        (``defaults`` as it takes it)."""
        listen = self.listen
        if addresses is None:
            addresses = {
                "grpc": listen.grpc,
                "http": listen.http,
                "metrics": listen.metrics,
                "stream": listen.stream,
            }
        said = []
        for name, address in addresses.items():
            host, _port = parse_listen_address(address)
            problem = self.security.exposure(name)
            if not is_loopback(host) and problem is not None:
                said.append(f"{name} listener {address} is reachable beyond loopback {problem}")
        tls = self.security.tls
        now = now or datetime.datetime.now(datetime.UTC)
        early = tls.not_valid_yet(now) if tls else None
        if early is not None:
            said.append(early)
        said += tls.expiring(now) if tls else []
        for name, part in (("tls", self.security.tls), ("auth", self.security.auth)):
            if part is not None and part.reload_seconds > ALERTED_RELOAD_SECONDS:
                said.append(
                    f"security.{name}.reload_seconds is {part.reload_seconds:g}: a changed file"
                    " that fails to load may not fire ToolwatchSecurityFilesNotReloaded, which"
                    f" needs a look every 5 minutes (at most {ALERTED_RELOAD_SECONDS})"
                )
        retry_after = self.ingest.retry_after_seconds
        if retry_after >= SDK_EXPORT_TIMEOUT_SECONDS:
            said.append(
                f"ingest.retry_after_seconds is {retry_after:g}: an OpenTelemetry SDK exporter"
                f" (export timeout {SDK_EXPORT_TIMEOUT_SECONDS:g} s by default) told to retry that"
                " late drops its batch instead, spans toolwatch never sees; a Collector waits"
                " (retry_on_failure.max_elapsed_time). Keep it under"
                f" {SDK_EXPORT_TIMEOUT_SECONDS:g} where SDKs export to toolwatch directly"
            )
        return said + self._refusal_warnings() + self.judging_warnings(defaults=defaults)

    def _refusal_warnings(self) -> list[str]:
        """Where a full buffer under backpressure refuses longer than SDK exporters retry
        (``assembly.max_refusal_seconds``, ``TraceBuffer.admit``)."""
        assembly = self.assembly
        if assembly.overflow != "backpressure":
            return []
        limit = assembly.limits().max_refusal_ns / 1e9
        if limit and limit < SDK_EXPORT_TIMEOUT_SECONDS:
            return []
        refuses = (
            "is null: a buffer full of runs in flight refuses until they reach"
            " max_trace_age_seconds"
            if not limit
            else f"is {limit:g} (at least completion_wait_seconds; unset, at least"
            " completion_wait_seconds + lost_parent_wait_seconds): a buffer full of runs in"
            " flight refuses that long before it judges its oldest runs early"
        )
        return [
            f"assembly.max_refusal_seconds {refuses}, and an OpenTelemetry SDK exporter (export"
            f" timeout {SDK_EXPORT_TIMEOUT_SECONDS:g} s by default) drops a batch refused that"
            " long, spans toolwatch never sees; a Collector waits"
            " (retry_on_failure.max_elapsed_time). Keep it under"
            f" {SDK_EXPORT_TIMEOUT_SECONDS:g} where SDKs export to toolwatch directly"
        ]

    def judging_warnings(self, *, defaults: bool = False) -> list[str]:
        """The warnings of how runs are judged (``config.judging``): of what a reload
        applies (the policy, golden cases, evaluators), so ``serve`` logs them at each
        reload too, and ``replay``, which judges, prints them. A configuration with nothing
        to judge runs by is not warned of with ``defaults``: this is the built-in defaults,
        no file, which the caller warns of in its own words (``cli_sources.SERVE_DEFAULTS_WARNING``:
        no policy, no golden cases)."""
        return judging_warnings(self, defaults=defaults)

    def named_tools(self) -> frozenset[str]:
        """The tools the policy and ``metrics.tools`` name, normalized as calls are."""
        policy = self.policy
        normalize = policy.normalizer()
        tools = {*self.metrics.tools, *policy.dangerous_tools, *policy.verification_tools}
        tools |= set(policy.repeat_limits)
        tools |= {tool for allowed in policy.allowed_tools.values() for tool in allowed}
        return frozenset(normalize(tool) for tool in tools)

    def named_agents(self) -> frozenset[str]:
        """The agents ``metrics.agents`` and the policy name (``allowed_tools`` keys other
        than ``*``, invariants' ``agents``), as written: kept as label values under the cap."""
        policy = self.policy
        agents = {*self.metrics.agents, *policy.allowed_tools}
        agents |= {agent for rule in policy.invariants for agent in rule.agents}
        return frozenset(agent for agent in agents if agent.strip() and agent != "*")

    def reference_keys(self) -> frozenset[str]:
        """Every attribute key ingest copies into ``SpanRecord.reference_keys``: the golden
        cases' case id, the shadow pairs' key and role (none unless they are configured)."""
        return self.golden.reference_keys() | self.shadow.reference_keys()

    def decode_options(self) -> DecodeOptions:
        """How the receivers and replay decode requests: the ingest limits, and the keys the
        golden cases and shadow pairs are found by."""
        return DecodeOptions(
            reference_keys=self.reference_keys(),
            max_value_bytes=self.ingest.max_value_bytes,
            max_span_attributes=self.ingest.max_span_attributes,
            decoder=self.ingest.decoder,
            read_histories=self.assembly.missing_spans_from_history,
        )


def check_outputs(
    config: Config,
    path: Path | None,
    overrides: dict[str, Any] | None = None,
    origins: dict[str, str] | None = None,
) -> None:
    """Refuse an output file ``serve`` could not open (``serve`` and ``check-config`` call
    this; ``replay`` writes none, so a production configuration replays anywhere).
    ``config`` was loaded from ``path``, ``overrides`` and ``origins`` (``load_config``).
    Raises ``ConfigError`` naming where the value came from, the setting, the path and the
    reason."""
    for name in ("findings", "dump_tooltraces"):
        problem = _unwritable(getattr(config.output, name))
        if problem is not None:
            where = f"output.{name}"
            origin = _origin(where, _source(path), overrides or {}, origins or {})
            raise ConfigError(f"{origin}: {where}: {problem}")


def check_certificate(
    config: Config,
    path: Path | None,
    overrides: dict[str, Any] | None = None,
    origins: dict[str, str] | None = None,
    now: datetime.datetime | None = None,
) -> None:
    """Refuse an expired TLS certificate (``TlsSettings.expired``) at ``now`` (the wall
    clock by default): ``serve`` at start-up and ``check-config`` call this, a reload does not
    (``TlsSettings``). Arguments and ``ConfigError`` as ``check_outputs``."""
    tls = config.security.tls
    problem = tls.expired(now or datetime.datetime.now(datetime.UTC)) if tls else None
    if problem is not None:
        where = "security.tls.cert_file"
        origin = _origin(where, _source(path), overrides or {}, origins or {})
        raise ConfigError(f"{origin}: {where}: {problem}")


def check_hot_path(
    config: Config,
    path: Path | None,
    overrides: dict[str, Any] | None = None,
    origins: dict[str, str] | None = None,
) -> None:
    """Refuse ``ingest.decoder: compiled`` where this install cannot run it
    (``unrunnable_decoder``). ``serve`` and ``check-config`` call this; ``replay`` decodes
    with what the install has, so it takes such a configuration anywhere. Arguments and
    ``ConfigError`` as ``check_outputs``."""
    problem = unrunnable_decoder(config)
    if problem is not None:
        where = "ingest.decoder"
        origin = _origin(where, _source(path), overrides or {}, origins or {})
        raise ConfigError(f"{origin}: {where}: {problem}")


def unrunnable_decoder(config: Config) -> str | None:
    """Why ``config``'s ``ingest.decoder: compiled`` cannot run here: the compiled OTLP
    scanner cannot be used, or the hot path runs as Python (not compiled at install, or
    ``TOOLWATCH_PURE_PYTHON=1``); ``None`` when it can, or another decoder is set."""
    if config.ingest.decoder != "compiled":
        return None
    if COMPILED_UNAVAILABLE:
        return f"'compiled', but the compiled OTLP scanner cannot be used: {COMPILED_UNAVAILABLE}"
    hot_path = compiled_state.state()
    if not hot_path.all_compiled:
        return (
            f"'compiled', but the hot path runs {hot_path.describe()}: about twice the CPU per span"
        )
    return None


def private_file_warning(target: str, setting: str, status: os.stat_result) -> str | None:
    """The warning for ``target``, an output that holds arguments and results unredacted
    (the ToolTrace dump), when ``status`` says it is a regular file others may read (not
    ``/dev/null``): ``serve`` logs it when it opens the file, ``check-config`` prints it
    (``output_warnings``)."""
    mode = status.st_mode & 0o777
    if not stat.S_ISREG(status.st_mode) or not mode & 0o077:
        return None
    return (
        f"{target} ({setting}) may be read by others (mode {mode:o}), and it holds arguments"
        " and results unredacted: chmod 600 it"
    )


def output_warnings(config: Config) -> list[str]:
    """What ``serve`` would warn of when it opens the output files (``private_file_warning``):
    an existing ToolTrace dump others may read. One that does not exist yet is created
    readable by its owner alone."""
    target = config.output.dump_tooltraces
    if target is None or target == "-":
        return []
    try:
        status = os.stat(target)
    except OSError:  # not there yet (or refused by check_outputs)
        return []
    warning = private_file_warning(target, "output.dump_tooltraces", status)
    return [warning] if warning is not None else []


def _unwritable(target: str | None) -> str | None:
    if target is None or target == "-":
        return None
    if not target.strip():
        return "empty path: give a file, - for standard output, or null for off"
    if os.path.basename(target) in ("", ".", ".."):  # Path("new.jsonl/") drops the "/"
        return f"{target} names a directory, not a file"
    unopenable = unopenable_descriptor(target)
    if unopenable is not None:  # not "/dev is not writable": nothing would be created there
        return f"{target}: {unopenable}"
    path = Path(target)
    try:
        if path.is_dir():
            return f"{target} is a directory, not a file"
        folder = path.parent
        if not folder.is_dir():
            return _no_directory(folder)
        writes = path if path.exists() else folder
    except OSError as exc:  # a name too long, a loop of links, ...
        return f"{target}: {exc.strerror or exc}"
    if not os.access(writes, os.W_OK):
        return f"{writes} is not writable"
    return None


#: The names of this process's descriptors, as written (``unopenable_descriptor``): no
#: leading zero (``/proc`` has no ``02``), nor one past ``os.fstat``'s C int.
_DESCRIPTOR_NAME = re.compile(
    r"/dev/std(?P<std>in|out|err)|/(?:dev|proc/self)/fd/(?P<fd>0|[1-9][0-9]{0,8})"
)
_STANDARD = ("in", "out", "err")
_STANDARD_NAMES = ("standard input", "standard output", "standard error")
_PROC_FD = "/proc/self/fd"


def unopenable_descriptor(target: str) -> str | None:
    """Why ``target``, written as the name of one of this process's descriptors
    (``/dev/stdin``, ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``, ``/proc/self/fd/N``),
    cannot be opened: ``/proc`` is not mounted, or the descriptor is not open. ``None`` for
    any other path (a link to one included) and for an open descriptor."""
    named = _DESCRIPTOR_NAME.fullmatch(target)
    if named is None:
        return None
    fd = _STANDARD.index(named["std"]) if named["std"] else int(named["fd"])
    if not os.path.isdir(_PROC_FD):
        return (
            f"the path needs /proc mounted to name {descriptor_name(fd)}, and {_PROC_FD} is"
            " missing (give - for standard output)"
        )
    try:
        os.fstat(fd)
    except OSError as exc:
        return f"{descriptor_name(fd)} is not open" if exc.errno == errno.EBADF else None
    return None


def descriptor_name(fd: int) -> str:
    """``fd`` for messages: ``descriptor 2 (standard error)``, ``descriptor 7``."""
    if fd < len(_STANDARD_NAMES):
        return f"descriptor {fd} ({_STANDARD_NAMES[fd]})"
    return f"descriptor {fd}"


def _no_directory(folder: Path) -> str:
    """Why ``folder``, an output's, is no directory: missing, or under (or itself) a file."""
    for above in (folder, *folder.parents):
        if above.exists():
            if above.is_dir():
                break
            return f"{above} is not a directory"
    return f"directory {folder} does not exist"
