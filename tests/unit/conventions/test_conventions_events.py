"""Model and agent output carried by span events (``toolwatch.conventions.events``)."""

from __future__ import annotations

import json

import pytest

from toolwatch.conventions.attrs import SpanEvent
from toolwatch.conventions.events import output_events
from toolwatch.model import RequestedCall


@pytest.mark.parametrize(
    "answer",
    [
        "The order ships today.",
        '{"status": "shipped", "order_id": "A-1"}',
        '["A-1", "A-2"]',
        '[{"order_id": "A-1"}]\n',
    ],
)
def test_strands_agent_answer_that_is_json_stays_the_answer(answer: str) -> None:
    # Strands' invoke_agent span: gen_ai.choice message = str(AgentResult), plain text.
    event = SpanEvent("gen_ai.choice", {"message": answer, "finish_reason": "end_turn"})
    summary = output_events([event])
    assert summary is not None
    assert (summary.texts, summary.tool_calls) == ((answer,), ())


def test_strands_content_blocks_and_an_empty_reply_are_still_read_as_blocks() -> None:
    blocks = '[{"text": "Looking."}, {"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}}]'
    summary = output_events([SpanEvent("gen_ai.choice", {"message": blocks})])
    assert summary is not None
    call = RequestedCall("f", "t1", {}, 0)
    assert (summary.texts, summary.tool_calls) == (("Looking.",), (call,))

    empty = SpanEvent("gen_ai.choice", {"message": "[]", "finish_reason": "content_filtered"})
    summary = output_events([empty])
    assert summary is not None
    assert (summary.texts, summary.finish_reasons) == ((), ("content_filtered",))


def test_genai_1_26_completion_event_gives_the_calls_text_and_finish_reason() -> None:
    # GenAI v1.26-1.27: gen_ai.content.completion, gen_ai.completion = OpenAI-style messages.
    function = {"name": "get_weather", "arguments": '{"location": "Paris"}'}
    call = {"id": "c1", "type": "function", "function": function}
    messages = [
        {"role": "assistant", "content": "Checking.", "finish_reason": "tool_calls"},
        {"role": "assistant", "tool_calls": [call]},
    ]
    event = SpanEvent("gen_ai.content.completion", {"gen_ai.completion": json.dumps(messages)})
    summary = output_events([event])
    assert summary is not None
    assert summary.tool_calls == (RequestedCall("get_weather", "c1", '{"location": "Paris"}', 0),)
    assert (summary.texts, summary.finish_reasons) == (("Checking.",), ("tool_calls",))
