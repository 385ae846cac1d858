"""docs/instrumenting.md's statements of what toolwatch does with a hand-built agent's spans,
checked one by one.

Each test instruments an agent as the doc tells a reader to (the OpenTelemetry SDK, a batch
span processor and the OTLP/gRPC exporter, spans nested with ``start_as_current_span``, the
attributes of the doc's tables), sends to a real server on loopback port 0 (``start_server``,
the example policy ``examples/toolwatch.yaml``, its clock injected) and asserts what the doc
says; its docstring quotes the statement. The example itself, run as a process:
``test_instrumenting_doc``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    Tracer,
)

from tests.integration.conftest import RunningServer
from toolwatch.model import Category, ReferenceKind

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "examples" / "toolwatch.yaml"  # the doc's: the quick start's policy
CASE = "refund-verified-damaged-item"  # examples/golden-cases.yaml: one issue_refund, no agent
MAX_TRACE_AGE = 300.0  # the example policy's assembly.max_trace_age_seconds
LOST_PARENT = 2.0 + 5.0  # its completion_wait_seconds, and lost_parent_wait_seconds' default


@dataclass(frozen=True)
class Request:
    """A call the model asks for: one ``tool_call`` part of ``gen_ai.output.messages``."""

    call_id: str
    name: str
    arguments: dict[str, Any]


LOOKUP = Request("call_1", "lookup_order", {"order_id": "A-1001"})
REFUND = Request("call_2", "issue_refund", {"order_id": "A-1001", "amount_usd": 25.0})
ANSWER = "Order A-1001 is refunded: $25.00."


class Instrumented:
    """An agent's process as the doc sets it up: ``service.name`` on the resource, a batch
    span processor, the OTLP/gRPC exporter to the server; ``finish`` is the doc's
    ``provider.shutdown()``, which exports what is batched."""

    def __init__(self, server: RunningServer, resource: dict[str, str] | None = None) -> None:
        attributes = {"service.name": "refund-agent", **(resource or {})}
        self.provider = TracerProvider(resource=Resource.create(attributes))
        exporter = OTLPSpanExporter(endpoint=f"http://{server.address('grpc')}", timeout=10)
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer: Tracer = self.provider.get_tracer("test_instrumenting_doc_claims")

    def finish(self) -> None:
        self.provider.shutdown()


AGENT_ATTRIBUTES = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.agent.name": "refund-bot",
    "gen_ai.conversation.id": "conv-42",
}


@contextmanager
def invoke_agent(tracer: Tracer, case_id: str | None = None) -> Iterator[None]:
    attributes = dict(AGENT_ATTRIBUTES)
    if case_id is not None:
        attributes["toolwatch.case_id"] = case_id
    with tracer.start_as_current_span(
        "invoke_agent refund-bot", kind=SpanKind.INTERNAL, attributes=attributes
    ):
        yield


def chat(
    tracer: Tracer, requests: Sequence[Request] = (), text: str | None = None, content: bool = True
) -> None:
    """One model call, its output as the doc's model-span table has it (``content``: its
    ``gen_ai.output.messages`` recorded)."""
    with tracer.start_as_current_span(
        "chat gpt-4o",
        kind=SpanKind.CLIENT,
        attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
    ) as span:
        reason = "tool_call" if requests else "stop"
        span.set_attribute("gen_ai.response.finish_reasons", [reason])
        if content:
            parts: list[dict[str, Any]] = [
                {"type": "tool_call", "id": r.call_id, "name": r.name, "arguments": r.arguments}
                for r in requests
            ]
            if text is not None:
                parts.append({"type": "text", "content": text})
            message = {"role": "assistant", "parts": parts, "finish_reason": reason}
            span.set_attribute("gen_ai.output.messages", json.dumps([message]))


def execute_tool(
    tracer: Tracer,
    request: Request,
    *,
    content: bool = True,
    error: str | None = None,
    arguments_text: str | None = None,
    call_id: str | None = None,
) -> None:
    """One tool execution, as the doc's tool-span table has it. ``arguments_text``: what the
    span records as ``gen_ai.tool.call.arguments`` instead of the request's JSON;
    ``call_id``: its ``gen_ai.tool.call.id`` instead of the model's id for the call."""
    with tracer.start_as_current_span(
        f"execute_tool {request.name}",
        kind=SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": request.name,
            "gen_ai.tool.call.id": call_id or request.call_id,
        },
    ) as span:
        if content:
            recorded = arguments_text
            if recorded is None:
                recorded = json.dumps(request.arguments)
            span.set_attribute("gen_ai.tool.call.arguments", recorded)
        if error is not None:
            span.set_status(StatusCode.ERROR, error)
            span.set_attribute("error.type", error)
        elif content:
            span.set_attribute("gen_ai.tool.call.result", json.dumps({"ok": True}))


def refund_run(tracer: Tracer, *extra: Request) -> None:
    """The example's run (a lookup, the refund, the answer), then ``extra`` calls."""
    for request in (LOOKUP, REFUND, *extra):
        chat(tracer, [request])
        execute_tool(tracer, request)
    chat(tracer, text=ANSWER)


def calls_in_order(server: RunningServer) -> list[dict[str, Any]]:
    (tooltrace,) = server.tooltraces()
    return sorted(tooltrace["calls"], key=lambda c: c["sequence_index"])


def outcomes(server: RunningServer) -> dict[str, float]:
    """``toolwatch_tool_traces_total`` by its ``outcome`` label."""
    counted: dict[str, float] = {}
    for metric in server.registry.collect():
        for sample in metric.samples:
            if sample.name == "toolwatch_tool_traces_total":
                outcome = sample.labels["outcome"]
                counted[outcome] = counted.get(outcome, 0.0) + sample.value
    return counted


def found(server: RunningServer, reference: ReferenceKind) -> list[tuple[str, str | None]]:
    """The findings against ``reference``: category and tool."""
    return [
        (f.category.value, f.tool) for f in server.findings.findings if f.reference is reference
    ]


# -- Parent and child: an agent span never ended --------------------------------------------


def lose_the_agent_span(
    agent: Instrumented,
    above: str,
    *extra: Request,
    request_attributes: dict[str, str] | None = None,
) -> None:
    """The example's run in an agent span that is never ended, so never exported (a
    hand-written ``end()`` an exception skipped), ``above`` it: nothing (``root``), another
    service's span (``remote``: a gateway's ``traceparent``), or a request's span of this
    process (``request``, with ``request_attributes``)."""
    tracer = agent.tracer
    request = None
    parent: Context | None = None
    if above == "remote":
        gateway = SpanContext(0x5EED, 0x6A7E, is_remote=True, trace_flags=TraceFlags(1))
        parent = trace.set_span_in_context(NonRecordingSpan(gateway))
    elif above == "request":
        request = tracer.start_span(
            "POST /refunds", kind=SpanKind.SERVER, attributes=request_attributes
        )
        parent = trace.set_span_in_context(request)
    span = tracer.start_span(
        "invoke_agent refund-bot",
        kind=SpanKind.INTERNAL,
        attributes=AGENT_ATTRIBUTES,
        context=parent,
    )
    with trace.use_span(span, end_on_exit=False):
        refund_run(tracer, *extra)
    if request is not None:
        request.end()  # after the run: the request waited for its agent
    agent.finish()


@pytest.mark.parametrize("above", ["root", "remote"])
def test_a_lost_root_agent_span_leaves_the_run_to_max_trace_age(
    start_server: Callable[..., RunningServer], above: str
) -> None:
    """Doc, "Parent and child": "The agent span is the trace's root, or its parent is another
    service's (a gateway's `traceparent`): nothing anchors the trace [...]. It waits
    `assembly.max_trace_age_seconds` (300) and is judged incomplete (`timed_out`), against
    the policy only." A canary (the case id on the resource) is not compared with its case."""
    server = start_server(POLICY)
    lose_the_agent_span(Instrumented(server, {"toolwatch.case_id": CASE}), above)

    assert server.settle() == 0
    assert server.settle(MAX_TRACE_AGE - 2.0 - 1.0) == 0
    assert server.settle(1.0) == 1
    (tooltrace,) = server.tooltraces()
    assert (tooltrace["complete"], tooltrace["incomplete_reason"]) == (False, "timed_out")
    assert tooltrace["agent"] is None
    assert [c["tool_name"] for c in calls_in_order(server)] == ["lookup_order", "issue_refund"]
    assert outcomes(server) == {"timed_out": 1.0}
    assert found(server, ReferenceKind.EXPECTED) == []


@pytest.mark.parametrize("above", ["root", "remote"])
def test_local_parent_wait_judges_a_lost_root_agent_span_complete(
    start_server: Callable[..., RunningServer], above: str
) -> None:
    """Doc, "Parent and child": "With `assembly.local_parent_wait_seconds` set, the parent is
    taken as gone once the trace has been quiet that long (at least `completion_wait`), and
    the run is judged then, as complete", without its agent, and a canary of the resource
    against its golden case."""
    server = start_server(POLICY, assembly__local_parent_wait_seconds=30)
    lose_the_agent_span(Instrumented(server, {"toolwatch.case_id": CASE}), above)

    assert server.settle(29.0) == 0
    assert server.settle(1.001) == 1
    (tooltrace,) = server.tooltraces()
    assert (tooltrace["complete"], tooltrace["agent"]) == (True, None)
    assert outcomes(server) == {"complete": 1.0}
    assert ("TOOL_SELECTION_DRIFT", "send_email") in found(server, ReferenceKind.EXPECTED)


@pytest.mark.parametrize("case_on", ["resource", "request"])
def test_a_lost_agent_span_under_the_request_span_is_judged_complete_after_the_lost_parent_wait(
    start_server: Callable[..., RunningServer], case_on: str
) -> None:
    """Doc, "Parent and child": "The agent span sits under a request's span of the same
    process: the request's span, the root, anchors the trace, and the spans that wait for
    their lost parent hold it `assembly.lost_parent_wait_seconds` (5) more than
    `completion_wait`: 7 s after its last span [...], it is judged as a complete run", and
    "its `agent` is `null` [...], its `conversation_id` is `null` [...]. Judged complete, a
    run whose case id is on the resource, or on the request's span, is still a canary: it is
    compared with its golden case"."""
    server = start_server(POLICY)
    case_id = {"toolwatch.case_id": CASE}
    if case_on == "resource":
        lose_the_agent_span(Instrumented(server, case_id), "request")
    else:
        lose_the_agent_span(Instrumented(server), "request", request_attributes=case_id)

    assert server.settle(LOST_PARENT - 0.1) == 0
    assert server.settle(0.101) == 1
    (tooltrace,) = server.tooltraces()
    assert (tooltrace["complete"], tooltrace["incomplete_reason"]) == (True, None)
    assert (tooltrace["agent"], tooltrace["conversation_id"]) == (None, None)
    assert [c["tool_name"] for c in calls_in_order(server)] == ["lookup_order", "issue_refund"]
    assert outcomes(server) == {"complete": 1.0}
    assert {f.case_id for f in server.findings.findings} == {CASE}
    assert ("TOOL_SELECTION_DRIFT", "send_email") in found(server, ReferenceKind.EXPECTED)


@pytest.mark.parametrize("lost", [False, True], ids=["ended", "lost"])
def test_a_lost_agent_spans_allowed_tools_no_longer_apply(
    start_server: Callable[..., RunningServer], lost: bool
) -> None:
    """Doc, "Parent and child": judged complete without its agent span, "`allowed_tools`
    applies only its `"*"` entry (the agent's own list no longer does)". A ``cancel_order``
    call, outside refund-bot's list: TOOL_SELECTION_DRIFT from the agent's run; nothing from
    the run that lost its agent span (the example policy has no ``"*"``)."""
    server = start_server(POLICY)
    cancel = Request("call_3", "cancel_order", {"order_id": "A-1001"})
    agent = Instrumented(server)
    if lost:
        lose_the_agent_span(agent, "request", cancel)
    else:
        request = agent.tracer.start_as_current_span("POST /refunds", kind=SpanKind.SERVER)
        with request, invoke_agent(agent.tracer):
            refund_run(agent.tracer, cancel)
        agent.finish()

    assert server.settle(LOST_PARENT + 0.001) == 1
    (tooltrace,) = server.tooltraces()
    assert tooltrace["agent"] == (None if lost else "refund-bot")
    expected = [] if lost else [("TOOL_SELECTION_DRIFT", "cancel_order")]
    assert found(server, ReferenceKind.POLICY) == expected


# -- Tool spans ------------------------------------------------------------------------------


def test_one_outputs_calls_are_in_the_models_order_whatever_their_spans_start_times(
    start_server: Callable[..., RunningServer],
) -> None:
    """Doc, "Tool spans": "the calls one model output asked for together are put back in the
    order the model asked for them, in the places they took: the model's order wins over
    their spans' start times [...] (they are one parallel group [...])".

    One output asks for ``lookup_order`` then ``send_email``; the loop runs the email first,
    each span started when its tool starts."""
    server = start_server(POLICY)
    agent = Instrumented(server)
    email = Request("call_2", "send_email", {"to": "c@example.com"})
    with invoke_agent(agent.tracer):
        chat(agent.tracer, [LOOKUP, email])
        execute_tool(agent.tracer, email)  # started first, ended before the lookup starts
        execute_tool(agent.tracer, LOOKUP)
        chat(agent.tracer, text="Order A-1001 is on its way; we emailed you.")
    agent.finish()
    assert server.settle() == 1

    ordered = calls_in_order(server)
    starts = {c["tool_name"]: c["start_ns"] for c in ordered}
    assert starts["send_email"] < starts["lookup_order"]  # as the loop ran them
    assert [c["tool_name"] for c in ordered] == ["lookup_order", "send_email"]
    assert [c["parallel_group"] for c in ordered] == [0, 0]


@pytest.mark.parametrize("recorded", [True, False], ids=["request-recorded", "no-request"])
def test_tool_span_arguments_that_are_no_json_object_give_way_to_the_requests(
    start_server: Callable[..., RunningServer], recorded: bool
) -> None:
    """Doc, "Tool spans", ``gen_ai.tool.call.arguments``: "Where they are no JSON object [...]
    and the request's are one, the request's are the call's, `arguments_error` `null`; only
    where the model's output recorded no arguments object is the span's text kept as it
    came, with `arguments_error` saying why when it is no JSON"."""
    server = start_server(POLICY)
    agent = Instrumented(server)
    with invoke_agent(agent.tracer):
        chat(agent.tracer, [LOOKUP], content=recorded)
        execute_tool(agent.tracer, LOOKUP, arguments_text="order_id=A-1001")
        chat(agent.tracer, text="Order A-1001 was delivered.", content=recorded)
    agent.finish()
    assert server.settle() == 1

    (call,) = calls_in_order(server)
    if recorded:
        assert (call["arguments"], call["arguments_error"]) == (LOOKUP.arguments, None)
    else:
        assert call["arguments"] == "order_id=A-1001"
        assert call["arguments_error"] == "arguments are not valid JSON"


@pytest.mark.parametrize("own_ids", [False, True], ids=["models-ids", "own-ids"])
def test_a_tool_span_with_an_id_of_its_own_makes_each_call_read_twice(
    start_server: Callable[..., RunningServer], own_ids: bool
) -> None:
    """Doc, "Tool spans": "A `gen_ai.tool.call.id` of your own [...] makes each call read
    twice: the model's request, with no span, as a call asked for and never run, and the span
    as a call no model asked for. Every refund then counts twice (a `call_count` maximum of
    one is broken [...]), and where only the model's output records the arguments, [...] a
    verified refund pages `MISSING_VERIFICATION_STEP`."

    The example's run, its arguments in the model's output alone; its tool spans carry the
    model's ids, or ``tool-1`` and ``tool-2``."""
    server = start_server(POLICY)
    agent = Instrumented(server)
    with invoke_agent(agent.tracer):
        for n, request in enumerate((LOOKUP, REFUND), start=1):
            chat(agent.tracer, [request])
            own_id = f"tool-{n}" if own_ids else None
            execute_tool(agent.tracer, request, content=False, call_id=own_id)
        chat(agent.tracer, text=ANSWER)
    agent.finish()
    assert server.settle() == 1

    read = [(c["tool_name"], c["call_id"], c["span_id"] is None) for c in calls_in_order(server)]
    if not own_ids:
        assert read == [("lookup_order", "call_1", False), ("issue_refund", "call_2", False)]
        assert server.findings.findings == []
        return
    assert read == [
        ("lookup_order", "call_1", True),
        ("lookup_order", "tool-1", False),
        ("issue_refund", "call_2", True),
        ("issue_refund", "tool-2", False),
    ]
    assert sorted(found(server, ReferenceKind.POLICY)) == [
        ("INVARIANT_VIOLATION", "issue_refund"),  # one-refund-per-run
        ("MISSING_VERIFICATION_STEP", "issue_refund"),
    ]


# -- When arguments are not recorded ---------------------------------------------------------


@pytest.mark.parametrize("content", [True, False], ids=["arguments", "no-arguments"])
def test_without_arguments_a_failed_call_and_a_later_one_of_its_tool_are_one_action(
    start_server: Callable[..., RunningServer], content: bool
) -> None:
    """Doc, "When arguments are not recorded": "without arguments a later call of its tool
    [...] reads as it made again: a failed refund of order A, then a refund of order B, is one
    refund. The second is not beyond a golden case's one refund (no `DANGEROUS_ACTION_DRIFT`)
    and does not break a `call_count` maximum of one; with arguments they are two."

    A canary of ``refund-verified-damaged-item`` (one ``issue_refund``) looks up two orders
    and refunds both; the refund of A-1001 fails. ``no-arguments``: the example's
    ``--no-content``."""
    server = start_server(POLICY)
    agent = Instrumented(server)
    tracer = agent.tracer
    lookups = (
        Request("call_1", "lookup_order", {"order_id": "A-1001"}),
        Request("call_2", "lookup_order", {"order_id": "B-2002"}),
    )
    refunds = (
        Request("call_3", "issue_refund", {"order_id": "A-1001", "amount_usd": 25.0}),
        Request("call_4", "issue_refund", {"order_id": "B-2002", "amount_usd": 40.0}),
    )
    with invoke_agent(tracer, case_id=CASE):
        for lookup in lookups:
            chat(tracer, [lookup], content=content)
            execute_tool(tracer, lookup, content=content)
        chat(tracer, [refunds[0]], content=content)
        execute_tool(tracer, refunds[0], content=content, error="Timeout")
        chat(tracer, [refunds[1]], content=content)
        execute_tool(tracer, refunds[1], content=content)
        chat(tracer, text="Both orders are refunded.", content=content)
    agent.finish()
    assert server.settle() == 1
    assert [c["arguments"] is None for c in calls_in_order(server)] == [not content] * 4

    counted = [
        (f.category.value, f.tool)
        for f in server.findings.findings
        if f.category in (Category.DANGEROUS_ACTION_DRIFT, Category.INVARIANT_VIOLATION)
    ]
    two_refunds = [
        ("DANGEROUS_ACTION_DRIFT", "issue_refund"),
        ("INVARIANT_VIOLATION", "issue_refund"),
    ]
    assert sorted(counted) == (two_refunds if content else [])
