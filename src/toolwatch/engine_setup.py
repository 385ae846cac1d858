"""What a configuration builds for the engine to judge runs by, the same for ``serve``
(``toolwatch.app``, and again at each reload) and ``replay``: the golden cases and the
tool-name normalizer, the conversation scope, the evaluation pipeline, the tool label values
kept under the cap, and what findings may show of argument values.
"""

from __future__ import annotations

from toolwatch.config import Config
from toolwatch.evaluation.pipeline import EvaluationPipeline
from toolwatch.evaluation.settings import EvaluationSettings
from toolwatch.names import NameNormalizer
from toolwatch.references.conversations import ConversationScope
from toolwatch.references.golden import GoldenCaseSet
from toolwatch.references.golden_file import load_golden_cases
from toolwatch.sinks.findings import Redaction

__all__ = [
    "build_references",
    "conversation_scope",
    "evaluation_pipeline",
    "findings_redaction",
    "known_tools",
]


def findings_redaction(config: Config) -> Redaction:
    """What findings may show of argument values (``output.show_*``)."""
    return Redaction(
        show_values=config.output.show_argument_values,
        show_fields=frozenset(config.output.show_fields),
    )


def build_references(config: Config) -> tuple[GoldenCaseSet | None, NameNormalizer]:
    """Load the golden cases (if configured) and the tool-name normalizer."""
    normalize = config.policy.normalizer()
    cases = config.golden.cases_file
    if cases is None:
        return None, normalize
    golden = load_golden_cases(
        cases, normalize=normalize, case_id_attribute=config.golden.case_id_attribute
    )
    return golden, normalize


def conversation_scope(config: Config) -> ConversationScope | None:
    """``policy.verification_scope: conversation``: how long, which tools verify, and how
    many bytes the conversations remembered may hold."""
    policy = config.policy
    if policy.verification_scope != "conversation":
        return None
    normalize = policy.normalizer()
    verifiers = frozenset(normalize(tool) for tool in policy.verification_tools)
    fields: dict[str, set[str]] = {}
    for rule in policy.binding_rules():
        fields.setdefault(rule.verification_tool, set()).add(rule.verification_field)
    ttl = round(policy.conversation_ttl_seconds * 1e9)
    bound = {tool: frozenset(names) for tool, names in fields.items()}
    return ConversationScope(
        ttl_ns=ttl,
        verifiers=verifiers,
        fields=bound,
        shadow=config.shadow,
        max_bytes=policy.conversation_max_bytes,
    )


def evaluation_pipeline(config: Config) -> EvaluationPipeline:
    """The evaluators as ``config`` sets them, with its policy."""
    settings = EvaluationSettings(policy=config.policy, evaluators=config.evaluators)
    return EvaluationPipeline(settings)


def known_tools(config: Config, golden: GoldenCaseSet | None) -> tuple[str, ...]:
    """The tool label values kept under the cap: the tools the configuration names, spelled
    as the calls' (normalized) names are."""
    tools = set(config.named_tools())
    if golden is not None:  # normalized when the file was read
        tools |= {call.name for case in golden for call in case.expected_tools}
    return tuple(sorted(tools))
