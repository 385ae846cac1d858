"""Capture Guardrails AI (``guardrails-ai``) guarding an instrumented ``openai`` client's calls.

``python -m tools.capture.capture_guardrails INSTRUMENTATION [SCENARIO...]`` with
INSTRUMENTATION one of:

* ``native`` -- Guardrails' own OpenTelemetry tracing (``guardrails/telemetry/``, guardrails-ai
  0.5.1 and later; captured with 0.11.0 from ``requirements-guardrails.txt``). It has no
  provider argument: it calls ``trace.get_tracer("guardrails-ai", version)`` on the *global*
  tracer provider, so the capture's provider is made the global one. Spans: ``guard``
  (``Guard.__call__``/``parse``/``validate``), ``step`` (``Runner.step``), ``call``
  (``Runner.call``), ``<validator name>.validate``; all but ``call`` carry
  ``openinference.span.kind=GUARDRAIL``, and ``call`` gets it too when an LLM callable runs
  (``trace_llm_call`` writes it on the current span). OpenInference's ``OpenAIInstrumentor``
  adds the client's own LLM span.
* ``openinference`` -- ``openinference-instrumentation-guardrails`` (``GuardrailsInstrumentor``)
  plus OpenInference's ``OpenAIInstrumentor``, both on the capture's provider. The Guardrails
  instrumentor supports only ``guardrails-ai>=0.4.5,<0.5.1`` and does nothing on later
  releases (``_instrument`` returns early, and ``instrument()`` already refuses on the
  dependency check), so this instrumentation runs in a virtualenv of its own with
  guardrails-ai 0.5.0 (``requirements-guardrails-openinference.txt``). There it wraps
  ``Runner.step``, ``PromptCallableBase.__call__`` and
  ``ValidatorServiceBase.after_run_validator``, and hands its tracer to ``Guard.from_*``, which
  0.5.0's own ``step``/``call``/validator spans then use.

The application is a hand-rolled Chat Completions tool loop, as in ``capture_openai_client``,
under one plain application span (``support_agent``). It plays the ``refund`` script
(``lookup_order``, ``issue_refund``, then the answer). Scenarios:

* ``guarded_answer`` -- the app allows two tool rounds, then asks for the answer
  (``tool_choice="none"``) through a ``Guard`` whose local validator
  (``toolwatch/mentions-order``) passes: a guard around the run's last step.
* ``guarded_answer_fails`` -- the same, with a validator (``toolwatch/no-refund-ids``,
  ``on_fail="noop"``) that fails: the guard returns ``validation_passed=False``.
* ``guarded_answer_raises`` -- the same validator with ``on_fail="exception"``: the guard
  raises ``ValidationError``, which the app catches.
* ``guarded_answer_stream`` -- the answer streamed through the guard (``stream=True``; the
  callable makes the request when called and returns the text chunks). guardrails-ai 0.11.0
  writes a streaming guard's ``call`` span without ``guardrails.version`` (only its kind,
  GUARDRAIL, and its ``llm.*`` input).
* ``llm_judge_validator`` -- every model call is plain; the app then checks the answer with
  ``guard.validate(text)``, whose validator (``toolwatch/llm-judge``) asks the model itself
  through the same instrumented client (the ``guardrail_check`` script: a
  ``{"is_flagged": false, ...}`` verdict). Run with ``GUARDRAILS_RUN_SYNC=true``: by default
  guardrails 0.11 runs validators through ``AsyncValidatorService``, whose
  ``Validator.async_validate`` calls ``validate`` in ``loop.run_in_executor`` without the
  OpenTelemetry context, so the judge's LLM span would start a trace of its own.

The guarded call passes guardrails an ``llm_api`` callable (guardrails' ``ArbitraryCallable``
path; neither version has an adapter for an ``openai.OpenAI`` *instance*), which sends the
loop's own conversation with the instrumented client and returns the text. Guardrails itself
is given only the system and user messages: its message templating keeps ``role`` and
``content`` alone and cannot take an assistant message whose content is ``None``, so the tool
calls and tool results could not pass through it.

The app body runs in a worker thread (``asyncio.to_thread``, which carries the OpenTelemetry
context) with an idle event loop of its own: guardrails is a synchronous library that picks
its validator service by the thread's event loop (``AsyncValidatorService`` when one exists
and is not running, as in a plain script's main thread); inside the capture's running loop it
would fall back to ``SequentialValidatorService``.

Nothing leaves the machine: all model traffic goes to ``FakeModelServer``; Guardrails' hub
metrics (its own tracer provider exporting to a remote endpoint) are switched off with a
``.guardrailsrc`` (``enable_metrics=false``) in a temporary ``HOME``; no hub validator is used.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile
from collections.abc import Callable
from functools import partial
from importlib import metadata
from typing import Any

from openai import OpenAI
from opentelemetry import trace

from tools.capture import scripts
from tools.capture.cli import CaptureRun, main
from tools.capture.fake_model import FakeModelServer
from tools.capture.otlp import Capture

__all__ = ["SCENARIOS", "instrument"]

SCENARIOS = (
    "guarded_answer",
    "guarded_answer_fails",
    "guarded_answer_raises",
    "guarded_answer_stream",
    "llm_judge_validator",
)
SCRIPT = "refund"  # every scenario plays the refund conversation
TOOLS = ("lookup_order", "issue_refund")  # the tools the loop declares
TOOL_ROUNDS = 2  # the app's budget: two tool rounds, then a forced (and guarded) answer
MODEL = "gpt-4o-mini"
INSTRUCTIONS = "You are a helpful customer-support agent. Use the tools."
JUDGE_INSTRUCTIONS = (
    'You review support answers. Reply with JSON: {"is_flagged": bool, "reasoning": str}.'
)


#: The local validator classes, defined once guardrails may be imported (see ``_validators``).
_VALIDATORS: dict[str, Any] = {}


def _guardrails_version() -> tuple[int, ...]:
    return tuple(int(part) for part in metadata.version("guardrails-ai").split(".")[:3])


def instrument(name: str, capture: Capture) -> CaptureRun:
    """Instrument guardrails and the ``openai`` package with ``name`` on the capture's provider."""
    _isolate_guardrails()
    version = _guardrails_version()
    # Guardrails' native tracing uses the global provider; the app span comes from it too.
    trace.set_tracer_provider(capture.provider)
    if name == "openinference":
        if version >= (0, 5, 1):
            raise SystemExit(
                f"guardrails-ai {metadata.version('guardrails-ai')}: the OpenInference "
                "Guardrails instrumentor supports only <0.5.1 and would do nothing; use the "
                "virtualenv of requirements-guardrails-openinference.txt"
            )
        from openinference.instrumentation.guardrails import (  # noqa: PLC0415
            GuardrailsInstrumentor,
        )

        GuardrailsInstrumentor().instrument(tracer_provider=capture.provider)
    elif version < (0, 5, 1):
        raise SystemExit("native tracing on the global provider needs guardrails-ai >= 0.5.1")
    from openinference.instrumentation.openai import OpenAIInstrumentor  # noqa: PLC0415

    OpenAIInstrumentor().instrument(tracer_provider=capture.provider)
    _VALIDATORS.update(_validators())
    return run_scenario


def _isolate_guardrails() -> None:
    """Keep guardrails and litellm off the network, before either is imported.

    Guardrails reads ``~/.guardrailsrc``; without one, ``enable_metrics`` defaults to true and
    its hub telemetry exports spans to a remote endpoint from a provider of its own. litellm
    (imported by guardrails on every guarded call) fetches its model price map unless told to
    use the bundled copy. guardrails 0.5.0 also downloads nltk's ``punkt`` when it is missing.
    """
    home = tempfile.mkdtemp(prefix="capture-guardrails-home-")
    with open(os.path.join(home, ".guardrailsrc"), "w", encoding="utf-8") as rc:
        rc.write("enable_metrics=false\nuse_remote_inferencing=false\n")
    # guardrails 0.5.0 calls nltk.download("punkt") on import unless nltk finds it; only
    # streaming validation (not used here) would read it, so an empty directory will do.
    os.makedirs(os.path.join(home, "nltk_data", "tokenizers", "punkt"))
    os.environ["HOME"] = home
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"


def _validators() -> dict[str, Any]:
    """Three local validators (no hub): two plain checks and an LLM-as-judge."""
    from guardrails.validators import (  # noqa: PLC0415
        FailResult,
        PassResult,
        Validator,
        register_validator,
    )

    @register_validator(name="toolwatch/mentions-order", data_type="string")
    class MentionsOrder(Validator):  # type: ignore[misc]
        """Passes when the answer names the order it is about."""

        def _validate(self, value: Any, metadata: dict[str, Any]) -> Any:
            if "A-1001" in str(value):
                return PassResult()
            return FailResult(error_message="The answer does not name order A-1001.")

    @register_validator(name="toolwatch/no-refund-ids", data_type="string")
    class NoRefundIds(Validator):  # type: ignore[misc]
        """Fails when the answer shows an internal refund id (R-77)."""

        def _validate(self, value: Any, metadata: dict[str, Any]) -> Any:
            found = re.findall(r"\bR-\d+\b", str(value))
            if not found:
                return PassResult()
            return FailResult(
                error_message=f"The answer shows internal refund ids: {', '.join(found)}.",
                fix_value=re.sub(r"\bR-\d+\b", "[refund]", str(value)),
            )

    @register_validator(name="toolwatch/llm-judge", data_type="string")
    class LlmJudge(Validator):  # type: ignore[misc]
        """Asks the model (through the app's instrumented client) whether to flag the text."""

        def __init__(self, client: OpenAI | None = None, **kwargs: Any) -> None:
            super().__init__(**kwargs)  # the client stays out of the recorded init kwargs
            self._client = client

        def _validate(self, value: Any, metadata: dict[str, Any]) -> Any:
            assert self._client is not None
            response = self._client.chat.completions.create(
                model=MODEL,
                messages=[
                    {"role": "system", "content": JUDGE_INSTRUCTIONS},
                    {
                        "role": "user",
                        "content": f"{scripts.prompt_for('guardrail_check')}\n\n{value}",
                    },
                ],
            )
            verdict = json.loads(response.choices[0].message.content or "{}")
            if verdict.get("is_flagged", True):
                return FailResult(error_message=str(verdict.get("reasoning", "flagged")))
            return PassResult()

    return {"mentions": MentionsOrder, "no_ids": NoRefundIds, "judge": LlmJudge}


def _guard(name: str, validators: list[Any]) -> Any:
    """A string guard: ``Guard.for_string`` (0.6+), else ``Guard.from_string`` (which the
    OpenInference instrumentor wraps to hand the guard its tracer)."""
    from guardrails import Guard  # noqa: PLC0415

    factory = getattr(Guard, "for_string", None) or Guard.from_string
    guard = factory(validators, name=name)
    guard.configure(allow_metrics_collection=False)
    return guard


def _messages_kwarg(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """``messages=`` (0.6+) or ``msg_history=`` (0.5)."""
    return (
        {"messages": messages} if _guardrails_version() >= (0, 6, 0) else {"msg_history": messages}
    )


async def run_scenario(capture: Capture, server: FakeModelServer, scenario: str) -> None:
    """Run the app (synchronous, like a plain script) in a worker thread."""
    await asyncio.to_thread(_run_in_own_loop, capture, server, scenario)


def _run_in_own_loop(capture: Capture, server: FakeModelServer, scenario: str) -> None:
    """Give the worker thread an idle event loop, as a script's main thread has one
    (``asyncio.get_event_loop()``): guardrails picks its validator service by it."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        _run_app(capture, server, scenario)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _run_app(capture: Capture, server: FakeModelServer, scenario: str) -> None:
    client = OpenAI(base_url=server.base_url, api_key="sk-fake", max_retries=0, timeout=10)
    tools: list[Any] = [scripts.chat_tool(name) for name in TOOLS]
    head: list[Any] = [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": scripts.prompt_for(SCRIPT)},
    ]
    conversation: list[Any] = list(head)
    tracer = capture.provider.get_tracer("toolwatch.capture.app")
    with tracer.start_as_current_span("support_agent"), client:
        guarded = scenario != "llm_judge_validator"
        for round_index in range(TOOL_ROUNDS + 1):
            if guarded and round_index == TOOL_ROUNDS:
                text = _guarded_answer(client, conversation, head, tools, scenario)
                conversation.append({"role": "assistant", "content": text})
                return
            response = client.chat.completions.create(
                model=MODEL, messages=conversation, tools=tools
            )
            message = response.choices[0].message
            conversation.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                print(f"  {scenario}: answer={message.content!r}", flush=True)
                if not guarded:
                    _judge(client, message.content or "", scenario)
                return
            conversation.extend(_run_tool(call) for call in message.tool_calls)


def _guarded_answer(
    client: OpenAI,
    conversation: list[Any],
    head: list[Any],
    tools: list[Any],
    scenario: str,
) -> str:
    """The run's last model call, made through a Guard."""

    def answer(
        *args: Any,
        messages: list[Any] | None = None,
        msg_history: list[Any] | None = None,
        **kwargs: Any,
    ) -> str:
        # guardrails passes its (role/content-only) copy of ``head`` and temperature=0; the
        # request carries the loop's real conversation, tool calls and results included.
        response = client.chat.completions.create(
            model=MODEL,
            messages=conversation,
            tools=tools,
            tool_choice="none",
            temperature=kwargs.get("temperature", 0),
        )
        return response.choices[0].message.content or ""

    if scenario == "guarded_answer_stream":
        return _streamed_answer(client, conversation, head, tools)
    if scenario == "guarded_answer":
        validator = _VALIDATORS["mentions"](on_fail="noop")
    else:
        on_fail = "exception" if scenario == "guarded_answer_raises" else "noop"
        validator = _VALIDATORS["no_ids"](on_fail=on_fail)
    guard = _guard("support_answer_guard", [validator])
    try:
        outcome = guard(answer, num_reasks=0, **_messages_kwarg(head))
    except Exception as error:  # on_fail="exception" raises ValidationError
        print(f"  {scenario}: guard raised {type(error).__name__}: {error}", flush=True)
        return ""
    print(
        f"  {scenario}: validation_passed={outcome.validation_passed} "
        f"raw={outcome.raw_llm_output!r} validated={outcome.validated_output!r}",
        flush=True,
    )
    return str(outcome.validated_output or outcome.raw_llm_output or "")


def _streamed_answer(
    client: OpenAI, conversation: list[Any], head: list[Any], tools: list[Any]
) -> str:
    """The run's last model call streamed through a Guard (``stream=True``): the callable
    makes the request when it is called and hands guardrails the text chunks."""

    def answer(*args: Any, **kwargs: Any) -> Any:
        stream = client.chat.completions.create(
            model=MODEL,
            messages=conversation,
            tools=tools,
            tool_choice="none",
            stream=True,
        )
        return (
            c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content
        )

    guard = _guard("support_answer_guard", [_VALIDATORS["mentions"](on_fail="noop")])
    outcomes = guard(answer, num_reasks=0, stream=True, **_messages_kwarg(head))
    text = "".join(str(outcome.validated_output or "") for outcome in outcomes)
    print(f"  guarded_answer_stream: streamed {text!r}", flush=True)
    return text


def _judge(client: OpenAI, text: str, scenario: str) -> None:
    """Check the finished answer with an LLM-as-judge validator (``guard.validate``)."""
    guard = _guard("answer_judge_guard", [_VALIDATORS["judge"](client=client, on_fail="noop")])
    previous = os.environ.get("GUARDRAILS_RUN_SYNC")
    os.environ["GUARDRAILS_RUN_SYNC"] = "true"  # keep the judge's model call in this trace
    try:
        outcome = guard.validate(text)
    finally:
        if previous is None:
            os.environ.pop("GUARDRAILS_RUN_SYNC", None)
        else:
            os.environ["GUARDRAILS_RUN_SYNC"] = previous
    print(f"  {scenario}: judge validation_passed={outcome.validation_passed}", flush=True)


def _run_tool(call: Any) -> dict[str, Any]:
    function: Callable[..., Any] = getattr(scripts, call.function.name)
    output = function(**json.loads(call.function.arguments))
    content = output if isinstance(output, str) else json.dumps(output)
    return {"role": "tool", "tool_call_id": call.id, "content": content}


if __name__ == "__main__":
    main(
        "guardrails",
        {name: partial(instrument, name) for name in ("native", "openinference")},
        SCENARIOS,
    )
