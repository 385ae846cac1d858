"""toolwatch.evaluation: pure evaluators that turn a ToolTrace and its reference (golden case,
shadow source, policy) into scores and Findings, and the pipeline that runs them."""

from toolwatch.evaluation.base import Evaluator, Reference
from toolwatch.evaluation.pipeline import EvaluationPipeline, PipelineResult
from toolwatch.evaluation.policy_settings import PolicySettings
from toolwatch.evaluation.settings import EvaluationSettings, EvaluatorsSettings

__all__ = [
    "EvaluationPipeline",
    "EvaluationSettings",
    "Evaluator",
    "EvaluatorsSettings",
    "PipelineResult",
    "PolicySettings",
    "Reference",
]
