"""The App's configuration reload on SIGHUP (``ConfigReload``, a part of
``toolwatch.app.App``): what a reload applies (``RELOADED_SECTIONS``, ``RELOADED_OUTPUT``),
what it keeps until a restart and how its warning names that, and findings redacted again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from toolwatch.config import Config
from toolwatch.engine import Engine
from toolwatch.engine_setup import (
    build_references,
    conversation_scope,
    evaluation_pipeline,
    findings_redaction,
    known_tools,
)
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.namespace_watch import NamespaceWatch
from toolwatch.outputs import Outputs
from toolwatch.references.golden import GoldenCaseSet
from toolwatch.sections import changed_keys
from toolwatch.sinks.findings import Redaction
from toolwatch.sinks.prometheus import PrometheusMetrics
from toolwatch.sinks.stream.broker import FindingsBroker

__all__ = ["RELOADED_OUTPUT", "RELOADED_SECTIONS", "ConfigReload", "log_reload_failure"]

log = logging.getLogger("toolwatch")

#: What a configuration reload (SIGHUP) applies: what runs are judged by. The other sections
#: set up listeners, buffers, outputs and label sets, and take a restart.
RELOADED_SECTIONS = ("policy", "golden", "evaluators")
#: The fields of ``output`` a reload applies too: which argument values findings may show.
RELOADED_OUTPUT = ("show_argument_values", "show_fields")


#: Why a reload keeps a section it applies otherwise, told after its settings that changed.
_KEPT_BECAUSE = {
    "golden": "its cases would be found by an attribute the receivers do not copy: they copy"
    " those configured at start-up",
}


def log_reload_failure(error: Exception) -> None:
    """Log why a reload failed, a record per line of ``error`` (a ``ConfigError`` names each
    of its errors on a line of its own): log pipelines split records at line breaks, and a
    line after the first would have no timestamp, level or logger, and be read as another
    process's. The first says the running configuration stays; each other names the reload."""
    first, *rest = str(error).splitlines() or [type(error).__name__]
    log.error("configuration reload failed; the running configuration stays: %s", first)
    for line in rest:
        if line.strip():
            log.error("configuration reload failed: %s", line.strip())


def _kept_keys(loaded: Config, kept: dict[str, Any]) -> dict[str, list[str]]:
    """Each one of ``kept`` (a section or a setting a reload does not apply, with its
    running value) with its settings whose values ``loaded`` changes, dotted as a file
    names them (``sections.changed_keys``)."""
    return {
        name: changed_keys(name, getattr(loaded, name), running) for name, running in kept.items()
    }


def _kept_settings(loaded: Config, kept: dict[str, Any]) -> str:
    """The settings a reload does not apply, as its warning names them (``_kept_keys``),
    and why for a section it applies otherwise (``output.stream_queue_size``,
    ``golden.cases_file (its cases would be ...)``)."""
    named = []
    for name, keys in _kept_keys(loaded, kept).items():
        because = _KEPT_BECAUSE.get(name)
        named.append(f"{', '.join(keys)} ({because})" if because else ", ".join(keys))
    return ", ".join(named)


def _whole(loaded: Config, kept: dict[str, Any]) -> Config:
    """What would run: ``loaded`` with the ``kept`` sections' running values, checked as a
    whole. Raises ``ValueError`` naming the running values a cross-section check involves."""
    config = loaded.model_copy(update=kept)  # each section was validated on its own
    try:
        config.check_across_sections()
    except ValueError as exc:  # named as the warning of a reload that works names them
        running = [key for keys in _kept_keys(loaded, kept).values() for key in keys]
        value = "the running value" if len(running) == 1 else "the running values"
        raise ValueError(f"{exc} ({', '.join(running)}: {value} until a restart)") from None
    return config


class ConfigReload:
    """``App.reload`` and its steps. The attributes annotated here are the App's
    (``App.__init__``); a reload that works replaces ``config``, ``_golden`` and
    ``_redaction``."""

    config: Config
    metrics: PrometheusMetrics
    engine: Engine
    broker: FindingsBroker
    _defaults: bool
    _golden: GoldenCaseSet | None
    _decode_options: DecodeOptions
    _namespaces: NamespaceWatch
    _outputs: Outputs
    _redaction: Redaction
    _stopped: bool
    _outputs_closed: bool

    def reload(self, load: Callable[[], Config]) -> bool:
        """SIGHUP: loads the configuration again (``load``) and applies its policy, golden
        cases (the file read again) and evaluator settings to every run evaluated from now
        on, those already buffered included, and what findings may show (``RELOADED_OUTPUT``)
        to the findings not written or sent yet, and logs the warnings of how runs are now
        judged (``Config.judging_warnings``) as start-up does. Other sections that changed
        are named in a warning and take a restart (``_restart_only``). What would run, the
        new sections with the running rest, is checked as a whole. A configuration or
        golden-case file that does not load is logged, and
        ``toolwatch_config_last_reload_successful`` reads 0 until a reload works: the
        running configuration stays. Returns whether it worked.
        First, whatever the file holds, the findings log and the ToolTrace dump are opened
        again if a log rotation renamed them away (``Outputs.reopen``). Once shutting down
        (``stop``), only that: what is buffered is judged by the configuration that ran at
        SIGTERM, whenever in the grace the signal comes. Once the shutdown has closed the
        outputs (the drain's findings written), nothing: opening them again would leave
        empty files behind. Before, during the grace and the drain, a rotation still gets
        the findings written then at its path."""
        if self._outputs_closed:
            log.info("SIGHUP while shutting down: configuration and outputs left as they are")
            return False
        self._reopen_outputs()
        if self._stopped:
            log.info(
                "SIGHUP while shutting down: the configuration is not reloaded (what is"
                " buffered is judged by the one running at SIGTERM)"
            )
            return False
        try:
            loaded = load()
            kept = self._restart_only(loaded)
            config = _whole(loaded, kept)
            golden = self._golden_cases(config, kept)
            evaluation = evaluation_pipeline(config)
        except Exception as exc:  # ConfigError, ReferenceFileError, OSError, RecursionError...
            log_reload_failure(exc)
            self.metrics.config_reloaded(False)
            return False
        self._apply(config, golden, evaluation)
        self._redact_with(findings_redaction(config))
        if kept:
            log.warning(
                "configuration reloaded without %s, which changed: they take a restart",
                _kept_settings(loaded, kept),
            )
        return True

    def _reopen_outputs(self) -> None:
        """The findings log and the ToolTrace dump opened again (``Outputs.reopen``): a
        failure is logged, never the reload's undoing."""
        try:  # logrotate's HUP, whatever the configuration file says
            self._outputs.reopen()
        except Exception:  # never the reload's undoing
            log.exception("could not open the outputs again")

    def _golden_cases(self, config: Config, kept: dict[str, Any]) -> GoldenCaseSet | None:
        """The golden cases ``config`` judges by: those loaded at start-up when a reload
        keeps ``golden`` (not the file again), else its file read again (raises as
        ``build_references`` does)."""
        if "golden" in kept:  # the cases as loaded, not the file again
            return self._golden
        golden, _ = build_references(config)
        return golden

    def _apply(
        self, config: Config, golden: GoldenCaseSet | None, evaluation: EvaluationPipeline
    ) -> None:
        """``config``, checked whole, judges the runs evaluated from now on: the engine, the
        metrics' label sets and the namespace watch take it; logged, with how runs are now
        judged (its warnings, as at start-up)."""
        self._namespaces.reload(config.policy.guarded_tools())
        normalize = config.policy.normalizer(self._namespaces)
        agents = config.named_agents()
        self.engine.reconfigure(evaluation, normalize, golden, conversation_scope(config), agents)
        self.metrics.config_reloaded(True, known_tools(config, golden), agents)
        self.config, self._golden = config, golden
        log.info(
            "configuration reloaded: %s apply to the runs evaluated from now on",
            ", ".join(RELOADED_SECTIONS),
        )
        for warning in config.judging_warnings(defaults=self._defaults):
            log.warning("%s", warning)  # as at start-up: what is judged may defeat itself

    def _restart_only(self, loaded: Config) -> dict[str, Any]:
        """The sections of ``loaded`` that changed but take a restart, with their running
        values: every section but ``RELOADED_SECTIONS``; ``output`` with its new
        ``RELOADED_OUTPUT`` fields; and ``golden`` when its cases are found by an attribute
        the receivers do not copy (they copy those configured at start-up: cases turned on,
        or another ``case_id_attribute``; turned off, they just match no run)."""
        running = self.config
        kept = {
            name: getattr(running, name)
            for name in type(loaded).model_fields
            if name not in RELOADED_SECTIONS and getattr(loaded, name) != getattr(running, name)
        }
        if "output" in kept:
            shown = {name: getattr(loaded.output, name) for name in RELOADED_OUTPUT}
            output = running.output.model_copy(update=shown)
            if output == loaded.output:
                del kept["output"]  # only what findings may show changed
            else:
                kept["output"] = output
        if not loaded.golden.reference_keys() <= self._decode_options.reference_keys:
            kept["golden"] = running.golden
        return kept

    def _redact_with(self, redaction: Redaction) -> None:
        """Findings written from now on show what ``redaction`` lets them; those the stream
        holds or has queued, not sent yet, are redacted again (a value shown before is
        hidden from then on, also from a client that resumes)."""
        if redaction == self._redaction:
            return
        self._redaction = redaction
        if self._outputs.log is not None:
            self._outputs.log.redact_with(redaction)
        again = self.broker.redact_with(redaction)
        log.info(
            "findings redaction reloaded (output.%s); redacted again, the findings the stream"
            " holds or has queued, not sent yet: %d",
            ", output.".join(RELOADED_OUTPUT),
            again,
        )
