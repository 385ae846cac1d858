"""Refusal signals the recognizers read: finish reasons, and OpenInference's raw output."""

from __future__ import annotations

import json

import pytest

from toolwatch.conventions import genai, openinference, recognize
from toolwatch.conventions.attrs import REFUSAL_REASONS, OutputBuilder, finish_reason_list


@pytest.mark.parametrize(
    "reason", ["content_filter", "content-filter", "content_filtered", "safety", "refusal"]
)
def test_refusal_finish_reasons(reason: str) -> None:
    assert reason in REFUSAL_REASONS


@pytest.mark.parametrize("reason", ["stop", "end_turn", "tool_call", "tool_use", "length"])
def test_ordinary_finish_reasons_are_not_refusals(reason: str) -> None:
    assert reason not in REFUSAL_REASONS


def _raw(value: object) -> dict[str, str]:
    return {"output.value": json.dumps(value)}


def test_responses_refusal_item_gives_its_text() -> None:
    raw = {"output": [{"type": "message", "content": [{"type": "refusal", "refusal": "No."}]}]}
    assert openinference.raw_refusal(_raw(raw)) == "No."


def test_responses_refusal_item_without_text_is_still_a_refusal() -> None:
    raw = {"output": [{"type": "message", "content": [{"type": "refusal"}]}]}
    assert openinference.raw_refusal(_raw(raw)) == "refusal"


def test_responses_output_text_is_no_refusal() -> None:
    raw = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "Hi"}]}]}
    assert openinference.raw_refusal(_raw(raw)) is None


def test_chat_completions_refusal_in_a_later_choice() -> None:
    raw = {"choices": [{"message": {"refusal": None}}, {"message": {"refusal": "Cannot."}}]}
    assert openinference.raw_refusal(_raw(raw)) == "Cannot."


@pytest.mark.parametrize(
    "value",
    [
        None,
        42,
        "plain text mentioning refusal",
        '{"output": [{"content": [{"type": "refusal", "refusal": "cut off',  # truncated
        '["refusal": "x"]',
        json.dumps({"output": "not a list", "type": "refusal"}),
    ],
)
def test_no_refusal_from_values_that_do_not_hold_one(value: object) -> None:
    assert openinference.raw_refusal({"output.value": value}) is None


def test_raw_refusal_wins_over_the_text_it_was_mapped_to() -> None:
    raw = {"output": [{"type": "message", "content": [{"type": "refusal", "refusal": "No."}]}]}
    attrs = {
        **_raw(raw),
        "llm.output_messages.0.message.content": "No.",
        "llm.output_messages.1.message.content": "Anything else?",
    }
    summary = openinference.output_summary(attrs)
    assert summary is not None
    assert (summary.refusal, summary.texts) == ("No.", ("Anything else?",))


def _summary(text: str) -> tuple[tuple[str, ...], str | None]:
    builder = OutputBuilder()
    genai.add_output_messages(
        builder, json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}])
    )
    summary = builder.build()
    assert summary is not None
    return summary.texts, summary.refusal


# As OTel contrib openai-agents-v2 0.1.0 writes a refused Responses message: its Python repr.
_REFUSED_REPR = (
    "ResponseOutputMessage(id='msg_002', content=[ResponseOutputRefusal(refusal=\"I'm sorry,"
    " but I can't help with that request.\", type='refusal')], role='assistant',"
    " status='completed', type='message', phase=None)"
)


def test_a_refusal_item_in_a_repr_text_part_is_a_refusal_with_its_text() -> None:
    assert _summary(_REFUSED_REPR) == ((), "I'm sorry, but I can't help with that request.")
    single = "ResponseOutputRefusal(refusal='No.', type='refusal')"
    assert _summary(single) == ((), "No.")
    # The literal read as Python reads it: escaped quotes and newlines.
    escaped = repr('I can\'t say "that".\nSorry.')
    assert _summary(f"ResponseOutputRefusal(refusal={escaped}, type='refusal')") == (
        (),
        'I can\'t say "that".\nSorry.',
    )


def test_a_repr_refusal_cut_at_the_value_limit_is_still_a_refusal() -> None:
    assert _summary(_REFUSED_REPR[:90]) == ((), "refusal")


@pytest.mark.parametrize(
    "text",
    [
        "ResponseOutputText(annotations=[], text='Refunded.', type='output_text')",
        "The SDK class ResponseOutputRefusal holds a refusal.",  # no repr: the name alone
        # An answer about the SDK that quotes a repr is still an answer.
        "A refusal reads ResponseOutputRefusal(refusal='No.', type='refusal') in the trace.",
        "ResponseOutputText(text='ResponseOutputRefusal(refusal= is the class', type='x')",
        "Your refund of $20 is on its way.",
    ],
)
def test_other_text_parts_stay_text(text: str) -> None:
    assert _summary(text) == ((text,), None)


@pytest.mark.parametrize(
    "reason",
    [
        "prohibited_content",  # Gemini, lower-cased by google-genai's instrumentation and ADK
        "blocklist",
        "spii",
        "recitation",
        "image_safety",
        "guardrail_intervened",  # Bedrock guardrails (Strands)
    ],
)
def test_blocked_candidates_and_guardrails_are_refusals(reason: str) -> None:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.response.finish_reasons": [reason]}
    _, _, fields = recognize("chat gemini-2.5-flash", 0, attrs, None)
    assert fields["refusal"] == reason


def test_a_prompt_blocked_before_any_candidate_is_a_refusal() -> None:
    """google-genai's instrumentation: no candidate, no finish reason, error.type
    BLOCKED_<reason>."""
    attrs = {
        "gen_ai.operation.name": "generate_content",
        "gen_ai.response.finish_reasons": [],
        "error.type": "BLOCKED_SAFETY",
    }
    _, _, fields = recognize("generate_content gemini-2.5-flash", 0, attrs, None)
    assert fields["refusal"] == "blocked_safety"


@pytest.mark.parametrize("error", ["BLOCKED_", "TimeoutError", "blocked"])
def test_other_model_errors_are_no_refusal(error: str) -> None:
    attrs = {"gen_ai.operation.name": "chat", "error.type": error}
    assert recognize("chat m", 2, attrs, None).fields["refusal"] is None


@pytest.mark.parametrize(
    ("value", "reasons"),
    [
        ("[content_filter]", ("content_filter",)),  # Azure SDK for Java, AWS ADOT Java
        ("[stop, tool_calls]", ("stop", "tool_calls")),
        ('["content_filter"]', ("content_filter",)),
        ("['length']", ("length",)),
        ("[]", ()),
        ("stop,tool_calls", ("stop", "tool_calls")),
    ],
)
def test_finish_reasons_in_every_spelling(value: str, reasons: tuple[str, ...]) -> None:
    assert finish_reason_list(value) == reasons
