"""The narrow metrics interface the pipeline talks to.

Pipeline code never touches Prometheus: it calls these semantic methods. The Prometheus
implementation lives in ``toolwatch.sinks.prometheus``; ``NoopMetrics`` is for tests and
for offline replay. Implementations must be cheap and must not raise.

Span accounting (the conservation law, DESIGN §4)::

    received = built + rejected + dropped (all reasons) + still buffered

``spans_received`` counts every span in every accepted request; ``spans_refused`` counts
spans of requests answered with a retryable overload status (the client keeps them and
retries, so they are outside the law). Each span then ends in exactly one of
``spans_rejected`` (invalid at ingest), ``spans_dropped`` (valid but never evaluated:
duplicate, late, over a bound, ...), or ``spans_built`` (part of a ToolTrace handed to the
evaluators), unless it is still buffered.

``remembered_traces_evicted`` counts the ids of evaluated traces the buffer forgot before
``assembly.late_span_window_seconds`` passed, because it remembered
``assembly.max_remembered_traces`` of them: a span of such a trace that comes later starts a
second, partial trace instead of being dropped as late.

``conversation_evicted`` counts a conversation whose verifications the conversation scope
(``policy.verification_scope: conversation``) forgot to make room, with the bound of
``CONVERSATION_EVICTION_BOUNDS`` that made room necessary: a later run of it is judged
without what its earlier runs verified (``toolwatch.references.conversations``).

``golden_cases_watched`` names the golden cases whose runs are expected at least every so
many seconds (``expected_every_seconds``), at start-up and after each reload;
``golden_case_judged`` says a complete run was matched to one of them, at that time.
Together they tell a canary that stopped arriving or being matched.

``run_findings`` is given the findings of one evaluation of a run, all at once (``finding``
is then told each of them): a run is evaluated once, and a shadow target once more against
its source, with findings that are all ``ReferenceKind.SOURCE``. It counts the run once in
each (category, evaluator, reference, agent, tool) its findings fall in, however many
findings it has there: ``tool_arguments`` raises one per drifting call and ``loops`` one per
distinct call repeated (or retried) beyond its limit, so ratios of runs (the burst alerts)
must not divide findings by runs.

``auth_failed`` counts requests refused for a missing or wrong bearer token, per listener
(``grpc``, ``http``, ``metrics``, ``stream``); ``connection_refused`` connections an HTTP listener
(``http``, ``metrics``) closed before any request: its TLS handshake failed
(``tls_handshake``), or its ``ingest.max_connections`` were open, each handling a request
(``connection_limit``), or an idle one was closed to make room for a new one at that bound
(``connection_limit_idle``; ``toolwatch.connection_gate``). ``reload_failed`` counts looks at
changed security files that could not be used (``tokens``, ``certificate``), so the previous
ones are still in use: a revoked token still accepted, a renewed certificate not served.
``certificates_served`` gives the dates of the TLS files now served (at start-up and after each
reload that took a new set), so their expiry is alerted on before handshakes fail, relative to
their lifetime. Both may be called from gRPC's threads (certificates reload at a handshake).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Protocol

from toolwatch.certificate_dates import CertificateDates
from toolwatch.model import Traffic
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolTrace

__all__ = [
    "CONVERSATION_EVICTION_BOUNDS",
    "DROP_REASONS",
    "EVICTION_BOUNDS",
    "REJECT_REASONS",
    "REQUEST_OUTCOMES",
    "UNMATCHED_CASE_REASONS",
    "UNPAIRED_REASONS",
    "NoopMetrics",
    "PipelineMetrics",
]

# The label values the pipeline reports, each set closed (they come from the code, not from
# input): an implementation keeps every one of them, whatever its caps on other values.
#: ``spans_rejected``: ids that break OTLP's rules, attributes over a bound or unreadable, a
#: span the decoder could not read at all.
REJECT_REASONS: Final = (
    "invalid_trace_id",
    "invalid_span_id",
    "invalid_parent_span_id",
    "too_many_attributes",
    "malformed_attributes",
    "malformed_span",
)
#: ``spans_dropped`` (``toolwatch.assembly.buffer`` says when each applies).
DROP_REASONS: Final = (
    "duplicate",
    "late",
    "trace_span_limit",
    "span_too_large",
    "buffer_full",
    "not_an_agent_run",
)
#: ``trace_evicted``: the bound that made room necessary.
EVICTION_BOUNDS: Final = ("max_traces", "max_buffered_spans", "max_buffered_bytes")
#: ``conversation_evicted``: ``MAX_CONVERSATIONS`` were remembered, or what they held
#: reached ``policy.conversation_max_bytes``.
CONVERSATION_EVICTION_BOUNDS: Final = ("max_conversations", "conversation_max_bytes")
#: ``shadow_unpaired`` (``toolwatch.references.shadow``).
UNPAIRED_REASONS: Final = ("duplicate", "evicted", "no_role", "shutdown", "timed_out")
#: ``golden_unmatched``: a trace's runs name a golden case id that none of them is matched
#: to: no case has it; it is on a span above several runs and the case names no agent; or
#: the case names an agent none of them is (``toolwatch.references.golden``).
UNMATCHED_CASE_REASONS: Final = ("unknown_case", "several_runs", "agent_not_run")
#: ``request_handled``'s outcome of one export request.
REQUEST_OUTCOMES: Final = ("ok", "invalid", "overloaded", "refused", "timeout", "aborted")


class PipelineMetrics(Protocol):
    """Semantic counters and timings the pipeline reports. Called from the event loop."""

    def spans_received(self, n: int, transport: str) -> None: ...
    def spans_rejected(self, n: int, reason: str) -> None: ...
    def spans_dropped(self, n: int, reason: str) -> None: ...
    def spans_refused(self, n: int, transport: str) -> None: ...
    def spans_built(self, n: int) -> None: ...
    def trace_evicted(self, reason: str) -> None: ...
    def remembered_traces_evicted(self, n: int) -> None: ...
    def conversation_evicted(self, reason: str) -> None: ...
    def request_handled(self, transport: str, outcome: str, seconds: float) -> None: ...
    def tool_trace(self, trace: ToolTrace, reference: str, traffic: Traffic) -> None: ...
    def evaluated(self, evaluator: str, score: float | None, seconds: float) -> None: ...
    def evaluator_failed(self, evaluator: str) -> None: ...
    def finding(
        self, finding: Finding, detection_seconds: float | None, traffic: Traffic
    ) -> None: ...
    def run_findings(self, findings: Sequence[Finding], traffic: Traffic) -> None: ...
    def stream_dropped(self, n: int) -> None: ...
    def shadow_unpaired(self, reason: str) -> None: ...
    def golden_unmatched(self, reason: str) -> None: ...
    def golden_cases_watched(self, every: Mapping[str, float]) -> None: ...
    def golden_case_judged(self, case_id: str) -> None: ...
    def auth_failed(self, listener: str) -> None: ...
    def connection_refused(self, listener: str, reason: str) -> None: ...
    def reload_failed(self, what: str) -> None: ...
    def certificates_served(self, dates: Mapping[str, CertificateDates]) -> None: ...


class NoopMetrics:
    """Discards everything. Satisfies ``PipelineMetrics``."""

    def spans_received(self, n: int, transport: str) -> None:
        pass

    def spans_rejected(self, n: int, reason: str) -> None:
        pass

    def spans_dropped(self, n: int, reason: str) -> None:
        pass

    def spans_refused(self, n: int, transport: str) -> None:
        pass

    def spans_built(self, n: int) -> None:
        pass

    def trace_evicted(self, reason: str) -> None:
        pass

    def remembered_traces_evicted(self, n: int) -> None:
        pass

    def conversation_evicted(self, reason: str) -> None:
        pass

    def request_handled(self, transport: str, outcome: str, seconds: float) -> None:
        pass

    def tool_trace(self, trace: ToolTrace, reference: str, traffic: Traffic) -> None:
        pass

    def evaluated(self, evaluator: str, score: float | None, seconds: float) -> None:
        pass

    def evaluator_failed(self, evaluator: str) -> None:
        pass

    def finding(self, finding: Finding, detection_seconds: float | None, traffic: Traffic) -> None:
        pass

    def run_findings(self, findings: Sequence[Finding], traffic: Traffic) -> None:
        pass

    def stream_dropped(self, n: int) -> None:
        pass

    def shadow_unpaired(self, reason: str) -> None:
        pass

    def golden_unmatched(self, reason: str) -> None:
        pass

    def golden_cases_watched(self, every: Mapping[str, float]) -> None:
        pass

    def golden_case_judged(self, case_id: str) -> None:
        pass

    def auth_failed(self, listener: str) -> None:
        pass

    def connection_refused(self, listener: str, reason: str) -> None:
        pass

    def reload_failed(self, what: str) -> None:
        pass

    def certificates_served(self, dates: Mapping[str, CertificateDates]) -> None:
        pass
