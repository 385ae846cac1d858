"""The warnings of how runs are judged (``Config.judging_warnings``): settings that are valid
but leave runs judged by less than whoever wrote them believes. They are of what a reload
applies (the policy, golden cases, evaluators), so ``serve`` logs them at start-up and after
each reload, ``check-config`` and ``replay`` print them:

- a numeric default argument strategy: numbers one apart score near 1;
- half a policy, dangerous tools that nothing can verify, and no invariant guards instead
  (``PolicySettings.unverifiable_tools``): an unverified refund is never found but as drift,
  while whoever wrote the policy believes refunds are guarded;
- nothing to judge by (no policy, golden cases or shadow pairs): only ``loops`` runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolwatch.config.whole import Config
    from toolwatch.evaluation.policy_settings import PolicySettings

__all__ = ["judging_warnings"]


def judging_warnings(config: Config, *, defaults: bool = False) -> list[str]:
    """What ``Config.judging_warnings`` says (``defaults`` as it takes it)."""
    said = [
        _numeric_strategy(config),
        _unverifiable(config),
        None if defaults else _nothing_judged(config),
    ]
    return [warning for warning in said if warning is not None]


def _numeric_strategy(config: Config) -> str | None:
    if config.evaluators.tool_arguments.default_strategy != "numeric":
        return None
    return (
        "evaluators.tool_arguments.default_strategy is 'numeric': order ids and other"
        " numbers one apart score near 1 (1043 for 1042: 0.99), so a call on the wrong"
        " entity passes; name the numeric fields in strategies instead"
    )


def _unverifiable(config: Config) -> str | None:
    """The dangerous tools ``safety`` cannot verify and no ``invariants`` rule guards for
    every agent. Not with ``safety`` off, which was asked for."""
    invariants = config.evaluators.invariants.enabled
    tools = config.policy.unverifiable_tools(invariants=invariants)
    if not tools or not config.evaluators.safety.enabled:
        return None
    them = "it" if len(tools) == 1 else "them"
    return (
        f"policy.dangerous_tools {', '.join(repr(tool) for tool in tools)}: nothing can"
        f" verify {them} (no policy.verification_tools) and {_no_rule(them, invariants)}, so"
        " an unverified call is never MISSING_VERIFICATION_STEP: add verification_tools (any"
        f" of which then verifies {them}) and, to say which verifies which, verified_by or"
        " bindings; until"
        " then one is caught only as drift from a reference (DANGEROUS_ACTION_DRIFT:"
        f" allowed_tools, a golden case or a shadow source){_or_limited(config, tools)}"
    )


def _no_rule(them: str, invariants: bool) -> str:
    """That no ``invariants`` rule guards the tools (``them``), and why: ``invariants`` (the
    evaluator is on) has none on every agent that would."""
    if not invariants:
        return f"no invariants rule judges {them} (evaluators.invariants is off)"
    return f"no invariants rule on every agent forbids {them} or needs a tool called first (order)"


def _or_limited(config: Config, tools: tuple[str, ...]) -> str:
    """Where a rule limited to ``agents`` guards one of ``tools``: that it catches their
    calls (the warning is of every other agent's)."""
    if not config.evaluators.invariants.enabled:
        return ""
    normalize = config.policy.normalizer()
    limited = config.policy.invariant_guarded_tools(every_agent=False)
    if not any(normalize(tool) in limited for tool in tools):
        return ""
    return ", or, made by an agent an invariants rule is limited to, as its violation"


def _nothing_judged(config: Config) -> str | None:
    """No policy, golden cases or shadow pairs: only ``loops`` runs (``safety`` needs
    dangerous or allowed tools, ``invariants`` rules, the comparing evaluators a
    reference). Whatever the runs do, nothing else is found."""
    policy = config.policy
    if policy.dangerous_tools or policy.allowed_tools or policy.invariants:
        return None
    if config.golden.cases_file is not None or config.shadow.enabled:
        return None
    missing = (
        "no policy (policy.dangerous_tools, allowed_tools, invariants), golden cases"
        " (golden.cases_file) or shadow pairs (shadow.enabled)"
    )
    if not config.evaluators.loops.enabled:
        return f"{missing}, and evaluators.loops is off: nothing can raise a finding"
    return f"{missing}: {_only_loops(policy)}"


def _only_loops(policy: PolicySettings) -> str:
    """What ``loops`` finds, with the limits that apply: ``policy.repeat_limit`` (1 by
    default) and its tools' ``repeat_limits``; retries only with ``retry_limit`` set."""
    per_tool = " (its tool's repeat_limits entry, if any)" if policy.repeat_limits else ""
    retried = (
        ""
        if policy.retry_limit is None
        else f", or more than policy.retry_limit ({policy.retry_limit}) times after it failed"
    )
    return (
        "nothing can raise a finding but loops' UNNECESSARY_TOOL_CALL, for a call made again"
        f" with the same arguments more than policy.repeat_limit ({policy.repeat_limit})"
        f" times{per_tool} after it succeeded{retried}; no call is checked for a verification"
        " step or for drift"
    )
