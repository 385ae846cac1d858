"""The Google ADK captures' expectations should say what the scripts did
(``tools/capture/scripts.py``), not what toolwatch happens to rebuild."""

from __future__ import annotations

from collections.abc import Callable

from tests.integration.conftest import RunningServer
from tests.integration.test_real_instrumentation import send_fixture


def test_openinference_adk_parallel_calls_read_as_parallel(
    start_server: Callable[..., RunningServer],
) -> None:
    """The parallel script asks for get_weather(Paris) and get_weather(London) in ONE model
    response. Under OpenInference 1.0.5 that is still recorded: the merged model span keeps
    the first response's ``llm.output_messages.0.message.tool_calls.0`` and ``.1`` (both
    calls, never overwritten), and the last call's history ``llm.input_messages.2`` is that
    one model turn holding both. Main rebuilt them as one parallel group. The branch now
    reads only ``output.value`` (the last, text-only response), loses the group, and
    rewrote the expectation to ``parallel: false`` (``_PARALLEL_UNSEEN``, "nothing records
    that the calls were asked for together"), which the spans contradict. The two calls
    should share one parallel group, as on the native and native_v1 captures."""
    server = start_server()
    send_fixture(server, "google_adk__openinference__parallel")
    server.settle()

    (trace,) = server.tooltraces()
    groups = [(c["tool_name"], c["parallel_group"]) for c in trace["calls"]]
    assert groups == [("get_weather", 0), ("get_weather", 0)]


def test_a_crashed_adk_tool_has_no_result_under_the_legacy_format(
    start_server: Callable[..., RunningServer],
) -> None:
    """tool_crash: charge_card raised, the run aborted, the tool returned nothing. ADK's
    legacy format (schema 1) writes ``gcp.vertex.agent.tool_response``
    ``{"result": "<not specified>"}`` on the crashed span, its stand-in for no value (as its
    ``gen_ai.tool.call.id`` ``<not specified>``, which toolwatch already reads as no id).
    The branch dumps ``{"result": "<not specified>"}`` as the call's result, while the
    same crash under schema 2 and OpenInference has ``result: null``: one script, three
    ToolTraces. The crashed call's result should be null under every exporter."""
    server = start_server()
    send_fixture(server, "google_adk__native_v1__tool_crash")
    server.settle()

    (trace,) = server.tooltraces()
    assert [(c["tool_name"], c["status"], c["result"]) for c in trace["calls"]] == [
        ("charge_card", "error", None)
    ]
