"""``loops``: the same call made again after it already succeeded. Always runs (policy).

Two calls are identical when their normalized tool names and their arguments (as canonical
JSON: key order ignored) are equal. A call is a *repeat* when an identical call succeeded
before it was issued: earlier, status ``ok``, and not in the same parallel group
(``base.informs``). Retries after a failed result are therefore never repeats, and neither
are identical calls issued in parallel. The repeats of one call beyond ``policy.repeat_limit``
(or the tool's ``policy.repeat_limits`` entry) are UNNECESSARY_TOOL_CALL: one finding per
distinct call, on the span of its first repeat beyond the limit. ``score`` is the share of
calls that are not flagged repeats (1.0 for a run without calls).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolwatch.evaluation.base import Reference, in_sequence, informs, pct
from toolwatch.evaluation.settings import LoopsSettings, PolicySettings
from toolwatch.evaluation.severity import make_finding, severity_for
from toolwatch.model import (
    CallStatus,
    Category,
    EvalResult,
    Finding,
    ReferenceKind,
    ToolCall,
    ToolTrace,
)

__all__ = ["CallKey", "Loops", "Repeat", "call_key", "find_repeats"]


# ``json.dumps(value, sort_keys=True, default=repr)``, without building an encoder per call.
_CANONICAL = json.JSONEncoder(sort_keys=True, default=repr)

#: A call's identity: its tool, and its arguments as ``call_key`` keys them.
CallKey = tuple[str, str | tuple[tuple[str, str], ...]]


def call_key(tool: str, arguments: Any) -> CallKey:
    """What makes two calls identical: the tool and its arguments as canonical JSON. A flat
    object of strings, the usual arguments, is keyed by its sorted items instead: equal
    exactly when the JSON is, without the encoder (which was 40% of this evaluator's
    instructions on the benchmark). A key of one form never equals one of the other."""
    if isinstance(arguments, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in arguments.items()
    ):
        return tool, tuple(sorted(arguments.items()))
    return tool, _CANONICAL.encode(arguments)


@dataclass(frozen=True, slots=True)
class Repeat:
    """An identical call repeated ``count`` times after success, beyond ``limit``; ``flagged``
    are the repeats past the limit, in call order."""

    tool: str
    count: int
    limit: int
    flagged: tuple[ToolCall, ...]


def find_repeats(
    calls: Sequence[ToolCall], tool_of: Callable[[ToolCall], str], limit_of: Callable[[str], int]
) -> list[Repeat]:
    """Repeats beyond their limit, in one pass over the calls in sequence order.
    ``tool_of(call)`` gives the normalized tool name and ``limit_of(tool)`` the tolerated
    repeats."""
    succeeded: dict[CallKey, set[int | None]] = {}  # parallel groups of successes
    repeats: dict[CallKey, list[ToolCall]] = {}
    ordered = in_sequence(calls)
    tools = [tool_of(call) for call in ordered]
    per_tool: dict[str, int] = {}  # not a Counter: its constructor is interpreted Python
    for tool in tools:
        per_tool[tool] = per_tool.get(tool, 0) + 1
    for call, tool in zip(ordered, tools, strict=True):
        if per_tool[tool] < 2:
            continue  # the only call of its tool: nothing identical before or after it
        key = call_key(tool, call.arguments)
        groups = succeeded.get(key)
        if groups is not None and any(informs(g, call.parallel_group) for g in groups):
            repeats.setdefault(key, []).append(call)
        if call.status is not CallStatus.OK:
            continue
        if groups is None:
            succeeded[key] = {call.parallel_group}
        else:
            groups.add(call.parallel_group)
    result: list[Repeat] = []
    for (tool, _), made in repeats.items():
        limit = limit_of(tool)
        if len(made) > limit:
            result.append(Repeat(tool, len(made), limit, tuple(made[limit:])))
    return result


class Loops:
    """The ``loops`` evaluator (see the module docstring)."""

    name: Final = "loops"

    def __init__(self, settings: LoopsSettings, policy: PolicySettings) -> None:
        self.settings = settings
        self._normalize = policy.normalizer()
        self._limit = policy.repeat_limit
        self._limits = {self._normalize(t): n for t, n in policy.repeat_limits.items()}

    def __call__(self, trace: ToolTrace, reference: Reference) -> EvalResult:
        repeats = find_repeats(
            trace.calls,
            lambda call: self._normalize(call.tool_name),
            lambda tool: self._limits.get(tool, self._limit),
        )
        flagged = sum(len(r.flagged) for r in repeats)
        score = 1.0 - flagged / len(trace.calls) if trace.calls else 1.0
        findings = tuple(self._finding(trace, r, score) for r in repeats)
        explanation = f"Loops: {pct(score)} ({flagged} unnecessary repeated calls"
        explanation += "".join(f"; {_describe(r)}" for r in repeats) + ")."
        return EvalResult(self.name, {"score": score}, findings, explanation)

    def _finding(self, trace: ToolTrace, repeat: Repeat, score: float) -> Finding:
        return make_finding(
            trace,
            category=Category.UNNECESSARY_TOOL_CALL,
            evaluator=self.name,
            reference=ReferenceKind.POLICY,
            severity=severity_for(score, self.settings.severity_floor),
            score=score,
            explanation=f"Loops: {_describe(repeat)}.",
            call=repeat.flagged[0],
            tool=repeat.tool,
            details={
                "repeats": repeat.count,
                "limit": repeat.limit,
                "spans": [c.span_id for c in repeat.flagged],
                "arguments": repeat.flagged[0].arguments,
            },
        )


def _describe(repeat: Repeat) -> str:
    return (
        f"{repeat.tool} repeated {repeat.count} times with identical arguments after a "
        f"successful result (limit {repeat.limit})"
    )
