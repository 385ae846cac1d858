"""The stream's contract (proto/toolwatch/v1/findings.proto) names only fields that exist.

A client author reads the proto's comments to learn how to resume: the comments on
``Finding.sequence`` and on ``FindingsService.Subscribe`` tell them to set
``SubscribeRequest.resume_after`` / ``SubscribeRequest.resume_stream_id``, which are reserved
(removed before release, replaced by ``repeated StreamCursor resume``). A client written from
those comments cannot compile, or, in a dynamic language, sets nothing and never resumes.
"""

from __future__ import annotations

import re
from pathlib import Path

from toolwatch._proto.toolwatch.v1 import findings_pb2

ROOT = Path(__file__).resolve().parents[3]
PROTO = ROOT / "proto" / "toolwatch" / "v1" / "findings.proto"

MESSAGES = {
    name: getattr(findings_pb2, name).DESCRIPTOR
    for name in ("Finding", "SubscribeRequest", "StreamCursor", "ToolTrace", "ToolCall")
}


def test_every_message_field_the_proto_comments_name_exists() -> None:
    text = PROTO.read_text(encoding="utf-8")
    referenced = set(re.findall(r"\b(" + "|".join(MESSAGES) + r")\.([a-z_]+)\b", text))
    assert referenced, "the proto names no Message.field at all: the pattern is wrong"
    missing = sorted(
        f"{message}.{field}"
        for message, field in referenced
        if field not in MESSAGES[message].fields_by_name
    )
    assert missing == []


def test_documents_the_proto_points_to_exist() -> None:
    """``Finding.category`` says its values are listed in DESIGN.md §2: no such file."""
    text = PROTO.read_text(encoding="utf-8")
    named = set(re.findall(r"\b([A-Za-z_./-]+\.md)\b", text))
    assert sorted(n for n in named if not (ROOT / n).exists()) == []
