"""A small local fake of the OpenAI API that plays the scripts in ``scripts.py``.

It serves, on 127.0.0.1 and a free port, what the agent SDKs call:

* ``POST /v1/responses`` -- the Responses API, the OpenAI Agents SDK default, non-streaming
  and streaming (SSE events, ``response.created`` to ``response.completed``, text and
  function-call arguments in delta fragments);
* ``POST /v1/chat/completions`` -- Chat Completions, non-streaming and streaming (SSE with
  ``data: {chunk}`` lines and ``data: [DONE]``), because Strands' OpenAI provider always
  streams;
* ``POST /v1beta/models/{model}:generateContent`` -- the Gemini API, what the ``google-genai``
  client calls (``root_url`` as its ``base_url``). A refusal is Gemini's safety block: a
  candidate with ``finishReason: SAFETY`` and no content. A tool result is a
  ``functionResponse`` part, or, for a Google ADK agent that took a conversation over
  (``transfer_to_agent``), an earlier agent's result that ADK quotes as user text.

Response bodies follow the public OpenAI API reference closely enough for the official
``openai`` client to parse them. Ids are deterministic, so that re-captured fixtures differ
only in timestamps and span ids, and unique across the whole process: every server of a
capture process (one per scenario) draws from one counter, as the real API never repeats
an id. An instrumentation that keeps state by response id across scenarios (OpenLLMetry's
openai one caches responses by id at module level) must not find a later scenario's
``resp_001`` to be an earlier one's. Anything unexpected is
answered with HTTP 400 and an OpenAI-style error body, so a run fails fast instead of
hanging.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tools.capture.scripts import Refusal, Text, ToolCalls, Turn, find_scenario

__all__ = ["FakeModelServer"]

MODEL = "gpt-4o-mini-2024-07-18"
GEMINI_MODEL = "gemini-2.5-flash"
CREATED = 1_767_225_600  # fixed so response bodies are reproducible

#: The process's id counter, shared by every server (see the module docstring).
_IDS = itertools.count(1)
_IDS_LOCK = threading.Lock()


class FakeModelServer:
    """The fake server, run in a daemon thread. Use as a context manager."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give an OpenAI client (ends in ``/v1``)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def root_url(self) -> str:
        """The server's root, for clients that add their own API version (google-genai)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def next_id(self, prefix: str) -> str:
        """A new id, ``{prefix}_{n:03d}``, ``n`` counted across the whole process."""
        with _IDS_LOCK:
            return f"{prefix}_{next(_IDS):03d}"

    def __enter__(self) -> FakeModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def _handler_for(server: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the capture prints its own summary."""

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            server.requests.append((self.path, body))
            try:
                if self.path.endswith("/responses"):
                    response = _responses(server, body)
                    if body.get("stream"):
                        self._send_events(_response_events(response))
                    else:
                        self._send_json(response)
                elif self.path.endswith("/chat/completions"):
                    self._chat(body)
                elif self.path.endswith(":generateContent"):
                    self._send_json(_gemini(server, body))
                else:
                    self._send_error(404, f"no route {self.path}")
            except (KeyError, ValueError) as error:
                self._send_error(400, str(error))

        def _chat(self, body: dict[str, Any]) -> None:
            completion = _chat_completion(server, body)
            if not body.get("stream"):
                self._send_json(completion)
                return
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._send_events(_chunks(completion, include_usage), done=True)

        def _send_events(self, events: Iterator[dict[str, Any]], done: bool = False) -> None:
            """Server-sent events, one ``data:`` line each (with its ``event:`` name when it
            has a ``type``, as the Responses API sends them); ``done``: end with ``[DONE]``,
            as Chat Completions does."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in events:
                name = f"event: {event['type']}\n" if "type" in event else ""
                self.wfile.write(f"{name}data: {json.dumps(event)}\n\n".encode())
            if done:
                self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

        def _send_json(self, payload: dict[str, Any], status: int = 200) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send_error(self, status: int, message: str) -> None:
            error = {"message": message, "type": "invalid_request_error", "code": None}
            self._send_json({"error": error}, status)

        def do_GET(self) -> None:
            self._send_error(404, f"no route {self.path}")

    return Handler


# --- request reading -----------------------------------------------------------------------


def _text_of(content: Any) -> str:
    """The text of a message ``content``: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _first_user_text(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        if message.get("role") == "user":
            return _text_of(message.get("content"))
    raise KeyError("request has no user message")


def _responses_turn(body: dict[str, Any]) -> Turn:
    items = body["input"]
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    results = sum(1 for item in items if item.get("type") == "function_call_output")
    scenario = find_scenario(_first_user_text(items))
    if scenario.delay_s:
        time.sleep(scenario.delay_s)  # this handler's own thread: a slow model
    return scenario.turn_after(results)[1]


def _chat_turn(body: dict[str, Any]) -> Turn:
    messages = body["messages"]
    results = sum(1 for message in messages if message.get("role") == "tool")
    return find_scenario(_first_user_text(messages)).turn_after(results)[1]


def _usage_numbers(body: dict[str, Any]) -> tuple[int, int]:
    """Deterministic token counts: input grows with the request, output is fixed."""
    return 20 + len(json.dumps(body)) // 40, 12


# --- Responses API -------------------------------------------------------------------------


def _responses(server: FakeModelServer, body: dict[str, Any]) -> dict[str, Any]:
    turn = _responses_turn(body)
    input_tokens, output_tokens = _usage_numbers(body)
    return {
        "id": server.next_id("resp"),
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "model": MODEL,
        "output": _responses_output(server, turn),
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "instructions": body.get("instructions"),
        "metadata": {},
        "temperature": 1.0,
        "top_p": 1.0,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "error": None,
        "incomplete_details": None,
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
    }


def _responses_output(server: FakeModelServer, turn: Turn) -> list[dict[str, Any]]:
    if isinstance(turn, ToolCalls):
        return [
            {
                "type": "function_call",
                "id": server.next_id("fc"),
                "call_id": server.next_id("call"),
                "name": name,
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
            for name, arguments in turn.calls
        ]
    content: dict[str, Any]
    if isinstance(turn, Refusal):
        content = {"type": "refusal", "refusal": turn.text}
    else:
        content = {"type": "output_text", "text": turn.text, "annotations": []}
    message_id = server.next_id("msg")
    return [
        {
            "type": "message",
            "id": message_id,
            "role": "assistant",
            "status": "completed",
            "content": [content],
        }
    ]


def _response_events(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The streaming form of ``response``: created, each output item added, its text or
    arguments in delta fragments, done, then completed with the whole response."""
    numbers = itertools.count()

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": f"response.{kind}", "sequence_number": next(numbers), **fields}

    started = {**response, "status": "in_progress", "output": [], "usage": None}
    yield event("created", response=started)
    yield event("in_progress", response=started)
    for index, item in enumerate(response["output"]):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "function_call":
            yield event("output_item.added", output_index=index, item={**item, "arguments": ""})
            for piece in _pieces(item["arguments"]):
                yield event("function_call_arguments.delta", **where, delta=piece)
            yield event("function_call_arguments.done", **where, arguments=item["arguments"])
        else:
            yield event("output_item.added", output_index=index, item={**item, "content": []})
            for part_index, part in enumerate(item["content"]):
                at = {**where, "content_index": part_index}
                refusal = part["type"] == "refusal"
                text = part["refusal"] if refusal else part["text"]
                empty = {**part, "refusal": ""} if refusal else {**part, "text": ""}
                yield event("content_part.added", **at, part=empty)
                kind = "refusal" if refusal else "output_text"
                extra: dict[str, Any] = {} if refusal else {"logprobs": []}
                for piece in _pieces(text):
                    yield event(f"{kind}.delta", **at, delta=piece, **extra)
                finished = {"refusal": text} if refusal else {"text": text}
                yield event(f"{kind}.done", **at, **finished, **extra)
                yield event("content_part.done", **at, part=part)
        yield event("output_item.done", output_index=index, item=item)
    yield event("completed", response=response)


# --- Chat Completions ----------------------------------------------------------------------


def _chat_completion(server: FakeModelServer, body: dict[str, Any]) -> dict[str, Any]:
    turn = _chat_turn(body)
    prompt_tokens, completion_tokens = _usage_numbers(body)
    message, finish_reason = _chat_message(server, turn)
    return {
        "id": server.next_id("chatcmpl"),
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "system_fingerprint": "fp_fake",
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _chat_message(server: FakeModelServer, turn: Turn) -> tuple[dict[str, Any], str]:
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    if isinstance(turn, ToolCalls):
        message["tool_calls"] = [
            {
                "id": server.next_id("call"),
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for name, arguments in turn.calls
        ]
        return message, "tool_calls"
    if isinstance(turn, Refusal):
        message["refusal"] = turn.text
        return message, "content_filter"
    assert isinstance(turn, Text)
    message["content"] = turn.text
    return message, "stop"


def _chunks(completion: dict[str, Any], include_usage: bool) -> Iterator[dict[str, Any]]:
    """The streaming form of ``completion``: role, content/tool-call deltas, finish, usage."""
    choice = completion["choices"][0]
    message = choice["message"]
    head = {key: completion[key] for key in ("id", "created", "model", "system_fingerprint")}
    head["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(message["content"] or ""):
        yield chunk({"content": piece})
    for piece in _pieces(message["refusal"] or ""):
        yield chunk({"refusal": piece})
    for index, call in enumerate(message.get("tool_calls", [])):
        # As OpenAI streams a call: its id and name first, then its arguments in fragments.
        function = {"name": call["function"]["name"], "arguments": ""}
        yield chunk({"tool_calls": [{"index": index, **call, "function": function}]})
        for piece in _pieces(call["function"]["arguments"]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield {**head, "choices": [], "usage": completion["usage"]}


def _pieces(text: str, size: int = 8) -> Iterator[str]:
    """``text`` in the short fragments a streamed response delivers it in."""
    for start in range(0, len(text), size):
        yield text[start : start + size]


# --- Gemini API ----------------------------------------------------------------------------


#: Google ADK hands an agent the earlier agents' turns as quoted user text, a tool's result
#: as ``[<agent>] `<tool>` tool returned result:`` (``flows/llm_flows/contents.py``).
_QUOTED_RESULT = re.compile(r"^\[[^\]]+\] `[^`]+` tool returned result:")


def _is_tool_result(part: dict[str, Any]) -> bool:
    """A Gemini ``functionResponse`` part, or another ADK agent's result quoted as text."""
    return "functionResponse" in part or bool(_QUOTED_RESULT.match(str(part.get("text", ""))))


def _gemini_turn(body: dict[str, Any]) -> Turn:
    contents = body["contents"]
    first = next(c for c in contents if c.get("role", "user") == "user")
    text = " ".join(str(part.get("text", "")) for part in first.get("parts", []))
    results = sum(1 for c in contents for part in c.get("parts", []) if _is_tool_result(part))
    return find_scenario(text).turn_after(results)[1]


def _gemini(server: FakeModelServer, body: dict[str, Any]) -> dict[str, Any]:
    turn = _gemini_turn(body)
    prompt_tokens, output_tokens = _usage_numbers(body)
    candidate: dict[str, Any] = {"index": 0, "finishReason": "STOP"}
    if isinstance(turn, ToolCalls):
        parts = [{"functionCall": {"name": n, "args": args}} for n, args in turn.calls]
        candidate["content"] = {"role": "model", "parts": parts}
    elif isinstance(turn, Refusal):
        candidate["finishReason"] = "SAFETY"
        candidate["safetyRatings"] = [
            {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}
        ]
    else:
        candidate["content"] = {"role": "model", "parts": [{"text": turn.text}]}
    return {
        "candidates": [candidate],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": prompt_tokens + output_tokens,
        },
        "modelVersion": GEMINI_MODEL,
        "responseId": server.next_id("gemini"),
    }
