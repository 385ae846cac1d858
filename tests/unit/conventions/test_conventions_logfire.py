"""Pydantic Logfire's ``events`` attribute: a model call's output (``conventions.logfire``)."""

from __future__ import annotations

import json
from typing import Any

from toolwatch.conventions import logfire
from toolwatch.model import RequestedCall


def _choice(message: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"event.name": "gen_ai.choice", "index": 0, "message": message, **fields}


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_trailing_gen_ai_choice_events_are_the_output() -> None:
    # Older logfire.instrument_openai_agents() and pydantic-ai format v1: the output is
    # gen_ai.choice events, the assistant message inside "message".
    events = [
        {"event.name": "gen_ai.user.message", "role": "user", "content": "Go."},
        _choice({"role": "assistant", "tool_calls": [_call("c1", "random_number")]}),
        _choice(
            {"role": "assistant", "tool_calls": [_call("c2", "transfer_to_agent2")]},
            finish_reason="tool_calls",
        ),
    ]
    summary = logfire.output_summary({"events": json.dumps(events)})
    assert summary is not None
    assert summary.tool_calls == (
        RequestedCall("random_number", "c1", "{}", 0),
        RequestedCall("transfer_to_agent2", "c2", "{}", 1),
    )
    assert summary.finish_reasons == ("tool_calls",)


def test_a_gen_ai_choice_answer_after_a_tool_message_is_the_text() -> None:
    events = [
        {"event.name": "gen_ai.tool.message", "role": "tool", "id": "c1", "content": "4"},
        _choice({"role": "assistant", "content": "The number is 4."}, finish_reason="stop"),
    ]
    summary = logfire.output_summary({"events": json.dumps(events)})
    assert summary is not None
    assert (summary.texts, summary.tool_calls, summary.finish_reasons) == (
        ("The number is 4.",),
        (),
        ("stop",),
    )
