"""The sections of the server's own stages: ``ingest:`` (request and value limits, the
scanner), ``assembly:`` (completion waits, buffer bounds), ``output:`` (findings, ToolTrace
dump, findings stream) and ``metrics:`` (label caps).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from toolwatch.assembly.limits import LOST_PARENT_WAIT_NS, MAX_REFUSAL_NS, AssemblyLimits
from toolwatch.ingest.scan import Decoder
from toolwatch.sections import WEEK_SECONDS, Seconds, seconds_to_ns
from toolwatch.sections import Section as _Section

__all__ = [
    "AssemblySettings",
    "IngestSettings",
    "MetricsSettings",
    "OutputSettings",
]


_MIB = 2**20
#: gRPC takes its channel options (``grpc.max_receive_message_length``) as C ints.
_MAX_REQUEST_BYTES = 2**31 - 1
#: About 33 bytes each at most (``toolwatch.assembly.remembered``): 1.65 GB; 15,000,000 is
#: a replica's most spans a second (50,000), each a trace of its own, for 300 s.
_MAX_REMEMBERED_TRACES = 50_000_000


class IngestSettings(_Section):
    # OTLP: "It is RECOMMENDED to use 20 MiB as the default limit", after decompression.
    max_request_bytes: int = Field(
        20 * _MIB, gt=0, le=_MAX_REQUEST_BYTES, description="cap after decompression"
    )
    # A value is part of a request; the compiled scanner takes the cap as a C ssize_t.
    max_value_bytes: int = Field(
        65_536, gt=0, le=_MAX_REQUEST_BYTES, description="longer attribute values are cut"
    )
    # SDKs keep 128 attributes of every kind per span by default; one with more than this of
    # the attributes conventions read (a model output's flattened tool calls) is rejected,
    # counted: converting them all would hold memory out of proportion to the request.
    max_span_attributes: int = Field(
        1024, gt=0, le=1_000_000, description="a span with more attributes read is rejected"
    )
    retry_after_seconds: float = Field(1.0, gt=0, le=300)
    # Bodies in flight stay under this times max_request_bytes (toolwatch.ingest.slots); more
    # concurrent requests are answered as overloaded, before their bodies are read.
    max_concurrent_requests: int = Field(
        16, gt=0, le=10_000, description="requests read or handled at once, both receivers"
    )
    read_timeout_seconds: float = Field(
        30.0, gt=0, le=600, description="a body not received by then frees its slot (retryable)"
    )
    # aiohttp's own default is an hour: a client that opens a connection and never finishes
    # its headers (slowloris) held a socket that long. 120 s outlasts the scrape interval and
    # the Collector's idle connections (closed at 90 s, idle_conn_timeout), so the client
    # closes an idle one first: no export is sent on a connection the server is closing.
    idle_timeout_seconds: float = Field(
        120.0,
        gt=0,
        le=3600,
        description="an HTTP connection (OTLP or metrics) with no request, a gRPC one with no"
        " call, or a connection's handshake not finished (at most 60 s), for this long is"
        " closed",
    )
    # Each open connection holds a file descriptor: unbounded, anyone who can reach a
    # listener could take every one the process has (EMFILE), and with them the other
    # listeners, the outputs and the security files' reloads (toolwatch.connection_gate).
    max_connections: int = Field(
        512,
        ge=1,
        le=1_000_000,
        description="open connections on each listener at once; more are closed when accepted",
    )
    # A client certificate is checked at the handshake only, and exporters keep a connection
    # for days: closed at this age, every client handshakes again within it, against the
    # client CA served then (toolwatch.connection_age).
    max_connection_age_seconds: float = Field(
        300.0,
        ge=1,
        le=86_400,
        description="an OTLP or metrics connection this old is closed after its next answer"
        " (gRPC: GOAWAY, in-flight calls given read_timeout_seconds to finish)",
    )
    # gRPC's bandwidth-delay probing grows HTTP/2 windows ahead of reads, so calls waiting for
    # a slot would still have their bodies buffered by gRPC (measured: 100 x 10 MiB held 1 GiB
    # with 16 slots). Off, a waiting call holds one 64 KiB window; a body being read still
    # gets the window it needs (10 MiB at 50 ms RTT: 0.64 s against 0.1-0.2 s with it on).
    grpc_bdp_probe: bool = Field(
        False, description="grow gRPC windows ahead of reads (WAN senders; unbounds memory)"
    )
    decoder: Decoder = Field(
        "auto", description="OTLP scanner: auto (compiled if built), compiled, reference"
    )


class AssemblySettings(_Section):
    completion_wait_seconds: Seconds = Field(2.0, gt=0, le=WEEK_SECONDS)
    max_trace_age_seconds: Seconds = Field(300.0, gt=0, le=WEEK_SECONDS)
    local_parent_wait_seconds: Seconds | None = Field(None, gt=0, le=WEEK_SECONDS)
    lost_parent_wait_seconds: Seconds = Field(LOST_PARENT_WAIT_NS / 1e9, gt=0, le=WEEK_SECONDS)
    late_span_window_seconds: Seconds = Field(300.0, ge=0, le=WEEK_SECONDS)  # 0: off
    max_traces: int = Field(10_000, gt=0)
    max_spans_per_trace: int = Field(5_000, gt=0)
    max_buffered_spans: int = Field(200_000, gt=0)
    max_buffered_bytes: int = Field(256 * _MIB, gt=0)
    max_remembered_traces: int = Field(2_000_000, ge=0, le=_MAX_REMEMBERED_TRACES)
    overflow: Literal["backpressure", "evict_oldest"] = "backpressure"
    # Under backpressure: how long a full buffer refuses requests before it takes them by
    # evicting (assembly.refusals); None: never.
    max_refusal_seconds: Seconds | None = Field(MAX_REFUSAL_NS / 1e9, gt=0, le=WEEK_SECONDS)
    # A run whose model spans' input histories show earlier model calls the run does not
    # hold (and, where they name those calls' tool-call ids, one it does not know) is judged
    # incomplete, missing_spans (assembly.missing); off (the default): judged as it came.
    # For a gateway tier, whose rollouts split runs across replicas.
    missing_spans_from_history: bool = False
    tick_seconds: float = Field(0.01, gt=0, le=10, description="how often completion is checked")

    @model_validator(mode="after")
    def _runs_can_complete(self) -> AssemblySettings:
        # A run is complete once quiet for the wait, and judged incomplete at the age: a wait
        # as long as the age would flag every run incomplete (policy checks only).
        if self.completion_wait_seconds >= self.max_trace_age_seconds:
            raise ValueError(
                f"completion_wait_seconds ({self.completion_wait_seconds:g}) must be shorter "
                f"than max_trace_age_seconds ({self.max_trace_age_seconds:g}): a run still "
                "waiting at that age is evaluated as incomplete, so no run would complete"
            )
        # The same of the wait for a local parent: counted from the trace's last span, it
        # ends after the age, counted from its first (anchoring.py, _Trace.due_ns).
        wait = self.local_parent_wait_seconds
        if wait is not None and wait >= self.max_trace_age_seconds:
            raise ValueError(
                f"local_parent_wait_seconds ({wait:g}) must be shorter than "
                f"max_trace_age_seconds ({self.max_trace_age_seconds:g}): it counts from a "
                "trace's last span, so the trace reaches that age first and is evaluated as "
                "incomplete; the wait would never apply"
            )
        # A trace whose parent was lost in export is judged complete this long after the
        # wait: at or past the age it would be judged incomplete instead (the default is
        # left alone when only the age is set short, as in a test rig).
        lost = self.completion_wait_seconds + self.lost_parent_wait_seconds
        if (
            "lost_parent_wait_seconds" in self.model_fields_set
            and lost >= self.max_trace_age_seconds
        ):
            raise ValueError(
                f"completion_wait_seconds + lost_parent_wait_seconds ({lost:g}) must be shorter"
                f" than max_trace_age_seconds ({self.max_trace_age_seconds:g}): a run that lost"
                " a parent in export would reach that age first and be evaluated as incomplete"
            )
        return self

    @model_validator(mode="after")
    def _refusal_can_end(self) -> AssemblySettings:
        # Checked when set (the default follows longer waits, _max_refusal_ns), also under
        # evict_oldest, where it does nothing: a file that sets it is right whichever
        # overflow an override picks. Shorter than the wait, a burst of ended runs would be
        # judged early (evicted) before their wait let them go. So the default is at least
        # completion_wait + lost_parent_wait: a run left running in the background after its
        # request waits both (_Trace.ran_on), and a default of 5 s evicted such runs just
        # before their 7 s let them go. Set, it may be shorter than both: a run that ran on
        # is then evicted while it waits, as the setting says.
        if "max_refusal_seconds" not in self.model_fields_set:
            return self
        limit = self.max_refusal_seconds
        if limit is not None and limit < self.completion_wait_seconds:
            raise ValueError(
                f"max_refusal_seconds ({limit:g}) must be at least completion_wait_seconds "
                f"({self.completion_wait_seconds:g}): a full buffer makes room as the runs it "
                "holds end and their wait passes, and would evict them before it could"
            )
        return self

    def _max_refusal_ns(self) -> int:
        """``max_refusal_seconds`` in ns (0: refuse until a request fits); left unset, at
        least ``completion_wait_seconds + lost_parent_wait_seconds`` (``_refusal_can_end``)."""
        limit = self.max_refusal_seconds
        if limit is None:
            return 0
        if "max_refusal_seconds" not in self.model_fields_set:
            limit = max(limit, self.completion_wait_seconds + self.lost_parent_wait_seconds)
        return seconds_to_ns(limit)

    @model_validator(mode="after")
    def _trace_cap_can_apply(self) -> AssemblySettings:
        # The per-trace cap is what keeps one runaway trace (an agent looping on a tool) from
        # filling the buffer, refusing every other sender's spans (backpressure) or evicting
        # every other run until it is evaluated.
        if self.max_spans_per_trace >= self.max_buffered_spans:
            raise ValueError(
                f"max_spans_per_trace ({self.max_spans_per_trace}) must be smaller than "
                f"max_buffered_spans ({self.max_buffered_spans}): one trace at the cap would "
                "fill the whole buffer, so the cap would never keep a runaway trace from "
                "crowding out every other run; lower max_spans_per_trace"
            )
        return self

    def limits(self) -> AssemblyLimits:
        return AssemblyLimits(
            completion_wait_ns=seconds_to_ns(self.completion_wait_seconds),
            max_trace_age_ns=seconds_to_ns(self.max_trace_age_seconds),
            local_parent_wait_ns=(
                0
                if self.local_parent_wait_seconds is None
                else seconds_to_ns(self.local_parent_wait_seconds)
            ),
            lost_parent_wait_ns=seconds_to_ns(self.lost_parent_wait_seconds),
            late_span_window_ns=seconds_to_ns(self.late_span_window_seconds),
            max_traces=self.max_traces,
            max_spans_per_trace=self.max_spans_per_trace,
            max_buffered_spans=self.max_buffered_spans,
            max_buffered_bytes=self.max_buffered_bytes,
            max_remembered_traces=self.max_remembered_traces,
            overflow=self.overflow,
            max_refusal_ns=self._max_refusal_ns(),
            tick_ns=max(1, seconds_to_ns(self.tick_seconds)),
            missing_spans_from_history=self.missing_spans_from_history,
        )


class OutputSettings(_Section):
    """Where findings and ToolTraces go. ``-`` is standard output; ``None`` is off."""

    findings: str | None = "-"
    dump_tooltraces: str | None = None
    show_argument_values: bool = False
    show_fields: tuple[str, ...] = ()
    stream_max_subscribers: int = Field(
        64, gt=0, le=10_000, description="findings-stream subscriptions open at once"
    )
    # A subscriber's findings not yet written (about 1 KB each): a burst beyond them is lost
    # to it, counted and told (Finding.missed_before, missed_after); 64 subscribers x 1,000
    # hold ~64 MB.
    stream_queue_size: int = Field(
        1000, gt=0, le=100_000, description="findings queued per stream subscriber"
    )
    # The last findings published, held for subscribers that resume after a lost connection,
    # whatever the number of subscribers: about 0.5 KB each as sent (redacted; names cut at
    # 128 characters), and the tags of 16 times as many (at most 65,536; about 160 bytes
    # each, names kept as digests). A client away longer loses the older, and is told; one
    # that resumed reads from them until it has caught up, so they bound it, not its queue.
    stream_replay_size: int = Field(
        1000, ge=0, le=100_000, description="findings held for stream subscribers that resume"
    )

    @field_validator("show_fields")
    @classmethod
    def _field_paths(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        for entry in entries:
            if not all(part.strip() for part in entry.split(".")):
                raise ValueError(
                    f"{entry!r} is no field path: write 'field', 'field.inner' or 'tool.field'"
                )
        return entries


class MetricsSettings(_Section):
    label_value_cap: int = Field(100, gt=0, le=10_000)
    agent_tool_pair_cap: int = Field(1000, gt=0, le=100_000)
    agents: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
