"""Spans captured from real instrumentation libraries become the ToolTraces their scripts
describe.

Each fixture in ``tests/fixtures/otlp/`` (see ``tools/capture/README.md``) is sent as it was
captured, one OTLP/JSON ``ExportTraceServiceRequest`` per line, to a real server's
``POST /v1/traces`` through a real HTTP client. The ToolTraces it dumps are compared field
by field with the fixture's hand-written ``.expected.json``:

* runs: one per expected run, in start order; ``agent`` when the expectation names one;
* calls: tool names in order; ``arguments`` when captured (``null`` = not captured);
  ``status``; ``parallel`` (see ``check_parallel``); ``nested_in`` (the call's
  ``parent_call_id`` is the call id, else the span id, of the outer call named); the
  call's ``agent`` when the expectation names one;
* ``refusal``; ``final_text_contains`` as a substring of ``final_text``; ``null`` means the
  script gives no answer (a refusal, an aborted run), so no ``final_text`` may be reported.

Expected files say what the script did; where the spans cannot show it, the expectation
was written to what is observable (see each file's ``notes``). ``KNOWN_GAPS`` lists what is
still in the script but recorded by no structured span field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import RunningServer
from tests.integration.evaluation_support import findings_log
from tests.integration.ingest_support import post_json
from toolwatch.ingest.decode_types import DecodeOptions
from toolwatch.ingest.otlp_json import decode_otlp_json
from toolwatch.model import SpanRole

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "otlp"
_EXPECTED_SUFFIX = ".expected.json"

#: Fixtures whose expectation holds information no structured span field carries.
KNOWN_GAPS: dict[str, str] = {}


def _fixture_names() -> list[str]:
    return sorted(
        p.name.removesuffix(".json")
        for p in FIXTURES.glob("*.json")
        if not p.name.endswith(_EXPECTED_SUFFIX)
    )


def _params() -> list[Any]:
    params = []
    for name in _fixture_names():
        gap = KNOWN_GAPS.get(name)
        marks = [pytest.mark.xfail(strict=True, reason=gap)] if gap else []
        params.append(pytest.param(name, id=name, marks=marks))
    return params


def send_fixture(server: RunningServer, name: str) -> list[str]:
    """Send every request line of fixture ``name``; the trace ids it holds."""
    trace_ids: set[str] = set()
    for line in (FIXTURES / f"{name}.json").read_bytes().splitlines():
        if not line.strip():
            continue
        status, answer = post_json(server, line)
        assert status == 200
        assert int(answer.get("partialSuccess", {}).get("rejectedSpans", 0)) == 0, answer
        trace_ids.update(_trace_ids(json.loads(line)))
    return sorted(trace_ids)


def _trace_ids(request: dict[str, Any]) -> set[str]:
    return {
        span["traceId"].lower()
        for resource in request.get("resourceSpans", ())
        for scope in resource.get("scopeSpans", ())
        for span in scope.get("spans", ())
    }


def check_parallel(calls: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """Calls marked parallel share one non-null ``parallel_group``; a call marked not
    parallel shares its group (if it has one) with no other call of the run."""
    groups = [c["parallel_group"] for c in calls]
    marked = {g for g, e in zip(groups, expected, strict=True) if e["parallel"]}
    if marked:
        assert len(marked) == 1 and None not in marked, groups
    for i, (group, want) in enumerate(zip(groups, expected, strict=True)):
        if not want["parallel"]:
            assert group is None or groups.count(group) == 1, (i, groups)


def check_nesting(calls: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """``nested_in`` names the outer call; the nested call's parent is that call's id (or
    its span id when the producer gave the call no id). Top-level calls have no parent."""
    for call, want in zip(calls, expected, strict=True):
        outer_name = want["nested_in"]
        if outer_name is None:
            assert call["parent_call_id"] is None, call
            continue
        outers = [c for c in calls if c["tool_name"] == outer_name and c is not call]
        assert len(outers) == 1, outers
        outer_ids = {outers[0]["call_id"], outers[0]["span_id"]} - {None}
        assert call["parent_call_id"] in outer_ids, (call, outers[0])


def check_calls(calls: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert [c["tool_name"] for c in calls] == [e["tool"] for e in expected]
    for call, want in zip(calls, expected, strict=True):
        if want["arguments"] is not None:
            assert call["arguments"] == want["arguments"], call
            assert call["arguments_error"] is None, call
        assert call["status"] == want["status"], call
        assert call["handoff"] is want.get("handoff", False), call
        if "agent" in want:
            assert call["agent"] == want["agent"], call
    assert [c["sequence_index"] for c in calls] == list(range(len(calls)))
    check_parallel(calls, expected)
    check_nesting(calls, expected)


def check_run(trace: dict[str, Any], want: dict[str, Any]) -> None:
    if want["agent"] is not None:
        assert trace["agent"] == want["agent"]
    check_calls(trace["calls"], want["calls"])
    assert trace["error_count"] == sum(c["status"] == "error" for c in want["calls"])
    assert trace["refusal"] is want["refusal"], trace["refusal_reason"]
    if want["final_text_contains"] is None:
        assert trace["final_text"] is None
    else:
        assert trace["final_text"] is not None
        assert want["final_text_contains"] in trace["final_text"]


@pytest.mark.parametrize("name", _params())
def test_fixture_rebuilds_expected_tooltraces(
    start_server: Callable[..., RunningServer], name: str
) -> None:
    expected = json.loads((FIXTURES / f"{name}{_EXPECTED_SUFFIX}").read_text())
    server = start_server()

    trace_ids = send_fixture(server, name)
    server.settle()

    traces = sorted(server.tooltraces(), key=lambda t: (t["start_ns"], t["run_span_id"] or ""))
    assert len(traces) == len(expected["runs"]), [
        (t["agent"], [c["tool_name"] for c in t["calls"]]) for t in traces
    ]
    for trace, want in zip(traces, expected["runs"], strict=True):
        assert trace["trace_id"] in trace_ids
        assert trace["complete"] is True
        check_run(trace, want)


@pytest.mark.parametrize("name", [n for n in _fixture_names() if n.endswith("agent_as_tool")])
def test_a_run_names_the_agent_it_used_as_a_tool(
    start_server: Callable[..., RunningServer], name: str
) -> None:
    """Every instrumentation's agent-as-tool capture: the concierge's run lists the refund
    desk agent it ran, so a policy rule scoped to that agent applies to the run."""
    server = start_server()
    send_fixture(server, name)
    server.settle()
    assert [t["agents"] for t in server.tooltraces()] == [["concierge", "refund_desk_agent"]]


@pytest.mark.parametrize("name", [n for n in _fixture_names() if n.endswith("agent_as_tool")])
def test_the_nested_agents_call_is_the_nested_agents(
    start_server: Callable[..., RunningServer], tmp_path: Path, name: str
) -> None:
    """Every instrumentation's agent-as-tool capture: lookup_order is refund_desk_agent's
    call, not the concierge's, so ``allowed_tools`` scoped to each agent finds nothing.
    OpenLLMetry's LangChain instrumentation writes the nested agent's span as an empty
    sibling of the span holding its work, both under the tool span: the call went to the
    nearest agent above it, the concierge (a TOOL_SELECTION_DRIFT on a call it never made;
    with a dangerous tool in the nested agent, a DANGEROUS_ACTION_DRIFT)."""
    policy = (
        "policy:\n"
        "  allowed_tools:\n"
        "    concierge: [refund_desk]\n"
        "    refund_desk_agent: [lookup_order]\n"
    )
    trace = _one_clean_run(start_server, tmp_path, name, policy)
    assert [(c["tool_name"], c["agent"]) for c in trace["calls"]] == [
        ("refund_desk", "concierge"),
        ("lookup_order", "refund_desk_agent"),
    ]


#: issue_refund's order bound to an earlier lookup_order's.
_VERIFIED_POLICY = (
    "policy:\n"
    "  dangerous_tools: [issue_refund]\n"
    "  verification_tools: [lookup_order]\n"
    "  bindings:\n"
    "    issue_refund.order_id: lookup_order.order_id\n"
)


def _one_verified_run(
    start_server: Callable[..., RunningServer], tmp_path: Path, name: str
) -> dict[str, Any]:
    """The fixture's one ToolTrace, under a policy binding issue_refund's order to an
    earlier lookup_order's; it raised no finding."""
    return _one_clean_run(start_server, tmp_path, name, _VERIFIED_POLICY)


def _one_clean_run(
    start_server: Callable[..., RunningServer], tmp_path: Path, name: str, policy: str
) -> dict[str, Any]:
    """The fixture's one ToolTrace under ``policy`` (YAML); it raised no finding."""
    config = tmp_path / "policy.yaml"
    config.write_text(policy)
    server = start_server(config)
    send_fixture(server, name)
    server.settle()
    (trace,) = server.tooltraces()
    assert findings_log(server) == []
    return trace


@pytest.mark.parametrize("name", [n for n in _fixture_names() if n.endswith("__handoff")])
def test_a_handoff_is_one_run_verified_across_both_agents(
    start_server: Callable[..., RunningServer], tmp_path: Path, name: str
) -> None:
    """Every exporter of the OpenAI Agents SDK: the triage agent looks the order up, hands
    off, and the refund agent refunds it. One run, led by the triage agent: the bound
    verification holds across the handoff, so nothing pages; the refund agent's calls keep
    its name (allowed_tools per agent still apply)."""
    trace = _one_verified_run(start_server, tmp_path, name)
    assert trace["agents"] == ["triage_agent", "refund_agent"]
    refund = [c for c in trace["calls"] if c["tool_name"] == "issue_refund"]
    assert [c["agent"] for c in refund] == ["refund_agent"]


@pytest.mark.parametrize("name", [n for n in _fixture_names() if n.endswith("__transfer")])
def test_an_adk_transfer_is_one_run_verified_across_both_agents(
    start_server: Callable[..., RunningServer], tmp_path: Path, name: str
) -> None:
    """Every Google ADK exporter: triage_agent looks the order up and calls ADK's
    transfer_to_agent (the agent in its agent_name argument), and refund_agent, started as
    its sibling, refunds it. One run, led by triage_agent: the bound verification holds
    across the transfer, so nothing pages (read as "transfer to an agent named agent", the
    transfer joined no one, and refund_agent's run paged MISSING_VERIFICATION_STEP)."""
    trace = _one_verified_run(start_server, tmp_path, name)
    assert trace["agents"] == ["triage_agent", "refund_agent"]
    assert [(c["tool_name"], c["agent"], c["handoff"]) for c in trace["calls"]] == [
        ("lookup_order", "triage_agent", False),
        ("transfer_to_agent", "triage_agent", True),
        ("issue_refund", "refund_agent", False),
    ]


@pytest.mark.parametrize("name", [n for n in _fixture_names() if n.endswith("__agent_tool")])
def test_an_adk_agent_tools_call_is_the_nested_agents(
    start_server: Callable[..., RunningServer], tmp_path: Path, name: str
) -> None:
    """Every Google ADK exporter: the concierge calls refund_desk_agent through an
    AgentTool (the tool is named as the agent); its lookup_order is the nested agent's, so
    ``allowed_tools`` scoped to each agent finds nothing."""
    policy = (
        "policy:\n"
        "  allowed_tools:\n"
        "    concierge: [refund_desk_agent]\n"
        "    refund_desk_agent: [lookup_order]\n"
    )
    trace = _one_clean_run(start_server, tmp_path, name, policy)
    assert trace["agents"] == ["concierge", "refund_desk_agent"]
    assert [(c["tool_name"], c["agent"]) for c in trace["calls"]] == [
        ("refund_desk_agent", "concierge"),
        ("lookup_order", "refund_desk_agent"),
    ]


def test_openinference_adk_parallel_calls_read_as_parallel(
    start_server: Callable[..., RunningServer],
) -> None:
    """The parallel script asks for get_weather(Paris) and get_weather(London) in one model
    response. OpenInference 1.0.5 writes all of the agent's model calls on one span, whose
    flattened ``llm.output_messages.0.message.tool_calls.0`` and ``.1`` keep both calls (the
    last call answered in text and overwrote neither), and the last call's history
    (``input.value``) holds that one model turn asking for both: the two calls share one
    parallel group, as under ADK's own tracer (native, native_v1).
    Was: only ``output.value`` (the last, text-only response) was read, the group was lost,
    and the expectation said ``parallel: false``. Now: the flattened calls the history
    confirms as one turn are the span's requests; the expectation is the script's."""
    server = start_server()
    send_fixture(server, "google_adk__openinference__parallel")
    server.settle()

    (trace,) = server.tooltraces()
    groups = [(c["tool_name"], c["parallel_group"]) for c in trace["calls"]]
    assert groups == [("get_weather", 0), ("get_weather", 0)]


def test_a_crashed_adk_tool_has_no_result_under_every_tracer(
    start_server: Callable[..., RunningServer],
) -> None:
    """tool_crash: charge_card raised, the run aborted, the tool returned nothing. ADK's
    legacy format (schema 1) writes ``gcp.vertex.agent.tool_response``
    ``{"result": "<not specified>"}`` on the crashed span, its stand-in for no value (as its
    ``gen_ai.tool.call.id`` ``<not specified>``); schema 2 and OpenInference write no result.
    One script, one crashed call under every tracer.
    Was: under schema 1 the call's result was ``{"result": "<not specified>"}``. Now: null,
    as under the other two."""
    server = start_server()
    names = [n for n in _fixture_names() if n.startswith("google_adk__")]
    crashes = sorted(n for n in names if n.endswith("__tool_crash"))
    assert len(crashes) == 3
    for name in crashes:
        send_fixture(server, name)
    server.settle()

    traces = server.tooltraces()
    assert [[(c["tool_name"], c["status"], c["result"]) for c in t["calls"]] for t in traces] == [
        [("charge_card", "error", None)]
    ] * 3


@pytest.mark.parametrize("name", [n for n in _fixture_names() if n.endswith("__refund_crew")])
def test_a_crew_is_one_run_verified_across_its_tasks(
    start_server: Callable[..., RunningServer], tmp_path: Path, name: str
) -> None:
    """Every CrewAI instrumentation: triage_agent's task looks the order up, refund_agent's
    task refunds it. One run for the crew's kickoff, named by the crew: the bound
    verification holds across the tasks, so nothing pages (a run per task paged
    MISSING_VERIFICATION_STEP); each call keeps its task's agent."""
    trace = _one_verified_run(start_server, tmp_path, name)
    assert (trace["agent"], trace["agents"]) == (
        "support_crew",
        ["support_crew", "triage_agent", "refund_agent"],
    )
    assert [(c["tool_name"], c["agent"]) for c in trace["calls"]] == [
        ("lookup_order", "triage_agent"),
        ("issue_refund", "refund_agent"),
    ]


@pytest.mark.parametrize("name", [n for n in _fixture_names() if n.endswith("__crew_hierarchical")])
def test_a_hierarchical_crews_coworker_makes_its_own_calls_inside_the_delegation(
    start_server: Callable[..., RunningServer], tmp_path: Path, name: str
) -> None:
    """Every CrewAI instrumentation: the crew's manager delegates the task to refund_agent,
    which looks the order up and refunds it. The delegation is the manager's call, the
    lookup and the refund are refund_agent's, inside it, so ``allowed_tools`` scoped to
    each agent finds nothing and the refund stays verified. OpenInference writes no span
    for the coworker (its tool spans sit right under the delegation's): its calls went to
    the manager, a TOOL_SELECTION_DRIFT on each. OpenLLMetry writes no tool spans and hangs
    the coworker's agent span under the manager's: its calls were in no call."""
    policy = (
        _VERIFIED_POLICY + "  allowed_tools:\n"
        "    Crew Manager: [delegate_work_to_coworker, delegate work to coworker]\n"
        "    refund_agent: [lookup_order, issue_refund]\n"
    )
    trace = _one_clean_run(start_server, tmp_path, name, policy)
    assert trace["agents"] == ["support_crew", "Crew Manager", "refund_agent"]
    (delegation, *work) = trace["calls"]
    assert delegation["agent"] == "Crew Manager"
    parent = delegation["call_id"] or delegation["span_id"]
    assert [(c["tool_name"], c["agent"], c["parent_call_id"]) for c in work] == [
        ("lookup_order", "refund_agent", parent),
        ("issue_refund", "refund_agent", parent),
    ]


@pytest.mark.parametrize("name", [n for n in _fixture_names() if n.endswith("_guardrail")])
def test_a_refusal_checked_by_a_guardrail_agent_is_still_the_runs(
    start_server: Callable[..., RunningServer], name: str
) -> None:
    """Every exporter of the OpenAI Agents SDK: support_agent refuses, and a guardrail (on
    its output, or on its input beside the model call) runs guardrail_agent, whose model
    call ends after the refusal. Taken as the run's last output, that verdict made the run
    answer: no refusal (a REFUSAL_REGRESSION never paged), the verdict JSON its final
    text. The guardrail agent is a run of its own."""
    server = start_server()
    send_fixture(server, name)
    server.settle()
    traces = server.tooltraces()
    (support,) = [t for t in traces if t["agent"] == "support_agent"]
    assert (support["refusal"], support["final_text"]) == (True, None), support["final_text"]
    assert support["agents"] == ["support_agent"]
    (checker,) = [t for t in traces if t["agent"] == "guardrail_agent"]
    assert (checker["refusal"], checker["agents"]) == (False, ["guardrail_agent"])


def with_resource(line: bytes, attributes: dict[str, str]) -> bytes:
    """The request with ``attributes`` added to each of its resources (a golden case's id,
    as a canary's process sets it)."""
    request = json.loads(line)
    for spans in request["resourceSpans"]:
        resource = spans.setdefault("resource", {}).setdefault("attributes", [])
        resource += [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()]
    return json.dumps(request).encode()


@pytest.mark.parametrize(
    "name", [n for n in _fixture_names() if "__input_guardrail_blocking_" in n]
)
def test_a_blocking_guardrails_verdict_is_no_answer_of_the_agents(
    start_server: Callable[..., RunningServer], tmp_path: Path, name: str
) -> None:
    """Every exporter of the OpenAI Agents SDK: a blocking input guardrail calls the model
    client itself (``{"is_flagged": true, ...}``) and trips before the agent's model is
    called. A canary that must stay refused passes: the run refused, and the verdict is not
    its final text. Under OpenLLMetry no span says the guardrail tripped and the guardrail's
    call hangs off the agent span (the client's span alone, no ``openai.response`` of the
    SDK's instrumentation, which records every turn): read as the agent's, the verdict was
    its answer and the case paged REFUSAL_REGRESSION, critical."""
    (tmp_path / "golden.yaml").write_text(
        "cases:\n  - id: refusal\n    expected_no_tools: true\n    expected_refusal: true\n"
    )
    config = tmp_path / "policy.yaml"
    config.write_text(
        "golden:\n  cases_file: golden.yaml\n  case_id_attribute: toolwatch.case_id\n"
    )
    server = start_server(config)
    for line in (FIXTURES / f"{name}.json").read_bytes().splitlines():
        if line.strip():
            status, answer = post_json(
                server, with_resource(line, {"toolwatch.case_id": "refusal"})
            )
            assert status == 200, answer
    server.settle()
    (trace,) = [t for t in server.tooltraces() if t["agent"] == "support_agent"]
    assert trace["refusal"] is True, trace["refusal_reason"]
    assert trace["final_text"] is None or "is_flagged" not in trace["final_text"]
    findings = findings_log(server)
    assert [f for f in findings if f["category"] == "REFUSAL_REGRESSION"] == [], findings


def split_after_the_first_agent(line: bytes) -> tuple[bytes, bytes]:
    """The request as two exports, the first ending with the first agent span to end (its
    spans are in end order, as a BatchSpanProcessor sends them): what a batch that fell
    between the handoff and the end of the workflow delivers."""
    records = decode_otlp_json(line, DecodeOptions()).spans
    first_agent = next(r for r in records if r.role is SpanRole.AGENT)
    earlier = {r.span_id.hex() for r in records[: records.index(first_agent) + 1]}

    def keeping(keep: Callable[[dict[str, Any]], bool]) -> bytes:
        request = json.loads(line)
        for resource in request["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                scope["spans"] = [span for span in scope["spans"] if keep(span)]
        return json.dumps(request).encode()

    return keeping(lambda s: s["spanId"] in earlier), keeping(lambda s: s["spanId"] not in earlier)


@pytest.mark.parametrize("name", [n for n in _fixture_names() if n.endswith("__handoff")])
def test_a_handoff_whose_first_agent_arrives_long_before_the_rest_is_one_run(
    start_server: Callable[..., RunningServer], name: str
) -> None:
    """The triage agent's spans arrive, then nothing for longer than completion_wait (the
    refund agent is still working), then the rest. The workflow span above both agents has
    not arrived, and their flags say it is local: the trace waits for it. (It was evaluated
    with the triage agent alone, and the refund agent's spans were dropped as late.)"""
    server = start_server()
    (line,) = (FIXTURES / f"{name}.json").read_bytes().splitlines()
    first, rest = split_after_the_first_agent(line)
    assert post_json(server, first)[0] == 200
    assert server.settle() == 0  # nothing due: the workflow span is on its way
    assert post_json(server, rest)[0] == 200
    server.settle()
    assert [t["agents"] for t in server.tooltraces()] == [["triage_agent", "refund_agent"]]
    assert server.sample("toolwatch_spans_dropped_total", {"reason": "late"}, missing_ok=True) == 0


MCP_TRACED = "openai_agents__openllmetry__refund_mcp_traced"
MCP_SERVER_LATE = "67ba02"  # the server's mcp.server around its issue_refund.tool


def split_at_the_servers_refund(line: bytes) -> tuple[bytes, bytes]:
    """The request as two exports: all but the MCP server's ``mcp.server`` that holds its
    ``issue_refund.tool`` and the server's spans that end with or after it, then those. The
    server is a process of its own with its own BatchSpanProcessor: a batch boundary between
    its tool span (+113.0 ms) and that span's parent (+114.3 ms) sends the parent 5 s later."""
    request = json.loads(line)
    server = [
        span
        for resource in request["resourceSpans"]
        if any(
            a["key"] == "service.name" and a["value"].get("stringValue") == "capture-mcp-server"
            for a in resource["resource"]["attributes"]
        )
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
    (parent,) = [s for s in server if s["spanId"].startswith(MCP_SERVER_LATE)]
    cut = int(parent["endTimeUnixNano"])
    late = {s["spanId"] for s in server if int(s["endTimeUnixNano"]) >= cut}

    def keeping(keep: Callable[[str], bool]) -> bytes:
        part = json.loads(line)
        for resource in part["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                scope["spans"] = [s for s in scope["spans"] if keep(s["spanId"])]
        return json.dumps(part).encode()

    return keeping(lambda i: i not in late), keeping(lambda i: i in late)


def test_an_mcp_servers_tool_span_whose_parent_comes_late_is_a_second_record(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """The server's ``issue_refund.tool`` arrives, its ``mcp.server`` parent only after
    completion_wait. The tool span's flags say that parent is local (the server process's,
    still to be exported): the trace waits one batch delay more for it
    (``LOST_PARENT_WAIT_NS``) though its root has come, and nothing is late. Dropped late
    once, it left the tool span an orphan (placed, as a parent that never comes leaves it,
    within the client's ``issue_refund.tool`` of the same tool: ``test_assembly_calls``),
    which had made a run of its own (no agent, anchored on the workflow root, calls
    [issue_refund]) that paged MISSING_VERIFICATION_STEP and two INVARIANT_VIOLATIONs on a
    refund the run verified."""
    config = tmp_path / "policy.yaml"
    config.write_text(
        _VERIFIED_POLICY + "  invariants:\n"
        "    - {kind: order, before: lookup_order, after: issue_refund, name: lookup-first}\n"
        "    - kind: arguments\n"
        "      name: refund-amount-sane\n"
        "      tool: issue_refund\n"
        "      schema: {type: object, required: [order_id, amount_usd]}\n"
    )
    server = start_server(config)
    (line,) = (FIXTURES / f"{MCP_TRACED}.json").read_bytes().splitlines()
    first, rest = split_at_the_servers_refund(line)
    assert post_json(server, first)[0] == 200
    server.settle()  # completion_wait passes: the server's next batch is 5 s away
    assert post_json(server, rest)[0] == 200
    server.settle()
    assert findings_log(server) == []
    runs = [(t["agent"], [c["tool_name"] for c in t["calls"]]) for t in server.tooltraces()]
    assert runs == [("support_agent", ["lookup_order", "issue_refund"])]
    assert server.sample("toolwatch_spans_dropped_total", {"reason": "late"}, missing_ok=True) == 0


CALLER_SPAN = "00f067aa0ba902b7"  # the calling service's span (the W3C example's id)
REMOTE_PARENT = 0x100 | 0x200  # SpanFlags: whether the parent is remote is known, and it is


def under_a_remote_caller(line: bytes) -> bytes:
    """The request with its root span made the child of a caller's span in another
    service, its flags saying so: what a service called with a ``traceparent`` exports."""
    request = json.loads(line)
    for resource in request["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                if not span.get("parentSpanId"):
                    span["parentSpanId"] = CALLER_SPAN
                    span["flags"] = span.get("flags", 0) & 0xFF | REMOTE_PARENT
    return json.dumps(request).encode()


#: The captures of runs that write no AGENT span: an own loop on the ``openai`` client, and
#: google-genai's automatic function calling.
AGENTLESS_REFUNDS = [
    n
    for n in _fixture_names()
    if n.startswith(("openai_client__", "google_genai__")) and n.endswith("__refund")
]


@pytest.mark.parametrize("name", AGENTLESS_REFUNDS)
def test_a_run_without_an_agent_span_below_a_remote_caller_completes_after_the_wait(
    start_server: Callable[..., RunningServer], name: str
) -> None:
    """A loop on a plain model client writes no AGENT span: its trace was anchored only by
    a root, and below a caller there is none. It waited max_trace_age (300 s), was judged
    timed_out against the policy only, and held a place of max_traces all that time. Now
    the span that encloses its model calls, its parent said remote, anchors it."""
    (want,) = json.loads((FIXTURES / f"{name}{_EXPECTED_SUFFIX}").read_text())["runs"]
    server = start_server()
    for line in (FIXTURES / f"{name}.json").read_bytes().splitlines():
        if line.strip():
            assert post_json(server, under_a_remote_caller(line))[0] == 200
    assert server.settle() == 1  # completion_wait after the last span
    (trace,) = server.tooltraces()
    assert (trace["complete"], trace["incomplete_reason"]) == (True, None)
    check_run(trace, want)


def test_every_fixture_has_an_expectation() -> None:
    names = _fixture_names()
    assert len(names) == 190  # 180 Python captures and 10 of the Vercel AI SDK (TypeScript)
    for name in names:
        assert (FIXTURES / f"{name}{_EXPECTED_SUFFIX}").is_file(), name
