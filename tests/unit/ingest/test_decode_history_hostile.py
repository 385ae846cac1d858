"""review2 (outside dd985a3, found while reviewing it). Was: ``read_history`` raised
``TypeError`` on a history whose ``type`` is no string, and ingest called it outside the
recognizers' ``try`` (``decode._Decoder._span``), so with ``missing_spans_from_history`` on
(``gateway.yaml``) one such model span failed its whole request. Now: a part typed otherwise
is no call, an item typed otherwise leaves the history unread, and a reader's failure
costs the evidence (unread), never the span nor its request."""

from __future__ import annotations

import json

import pytest

from tests.unit.ingest.ingest_support import decode, span
from toolwatch.conventions.history import read_history
from toolwatch.ingest.decode_types import DecodeOptions

USER = {"role": "user", "parts": [{"type": "text", "content": "Refund my order A-1."}]}
ODD_MESSAGES = [
    # a model message's part typed by a list: ``part.get("type") in _CALL_TYPES``
    [USER, {"role": "assistant", "parts": [{"type": ["tool_call"], "id": "c1"}]},
     {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1"}]}],
    # an item with no role typed by an object: ``ITEM_ROLES.get(message.get("type"))``
    [USER, {"type": {"function_call": True}}],  # unread
]  # fmt: skip


@pytest.mark.parametrize(
    ("messages", "read"), list(zip(ODD_MESSAGES, [(1, ()), (-1, ())], strict=True))
)
def test_a_history_of_odd_types_is_read_not_raised(messages: list[object], read: object) -> None:
    """The first: one turn, its part no call; the second: an item of no known type, unread."""
    assert read_history({"gen_ai.input.messages": json.dumps(messages)}, None) == read
    assert read_history({"gen_ai.input.messages": messages}, None) == read  # decoded whole


def test_one_odd_model_span_does_not_fail_the_request_its_neighbours_came_in() -> None:
    """A request of two model spans, one whose history holds a part typed ``["tool_call"]``.
    Histories off, both are kept. On (the gateway's setting), ``decode_protobuf`` raises
    ``TypeError``: no ``DecodeError``, so the HTTP receiver answers 500 (not retryable under
    OTLP/HTTP) and the gRPC one fails the call: every span of the batch is lost, the runs
    they belong to then judged from what is left. Now: both spans kept, the odd part read as
    no call."""
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    good = span("chat gpt-4o", {**attrs, "gen_ai.input.messages": json.dumps([USER])})
    odd = span("chat gpt-4o", {**attrs, "gen_ai.input.messages": json.dumps(ODD_MESSAGES[0])})
    assert len(decode(good, odd, options=DecodeOptions()).spans) == 2  # control: off
    batch = decode(good, odd, options=DecodeOptions(read_histories=True))
    assert [(s.prior_turns, s.prior_call_ids) for s in batch.spans] == [(0, ()), (1, ())]
