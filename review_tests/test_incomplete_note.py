"""Review: the note a finding of an incomplete run carries at the end of its explanation."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit" / "evaluation"))

from eval_factories import trace

from toolwatch.evaluation import EvaluationPipeline, EvaluationSettings
from toolwatch.evaluation.severity import incomplete_note

MINIMAL = """
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
"""


def test_the_incomplete_note_ends_the_last_finding_of_a_run_over_max_findings() -> None:
    """docs/output-formats.md, deploy/README.md and make_finding's docstring promise that a
    finding of a run evaluated incomplete has an explanation that *ends* with
    ``[run evaluated incomplete (...); judged on the spans that came]``. But the pipeline's
    ``_cut`` appends `` (N more findings on this run not raised)`` to the last finding kept
    after make_finding added the note, so on a run of over MAX_FINDINGS findings the note sits
    in the middle of that finding's explanation (the one an alert's exemplar most likely
    points at). The note should stay last (or ``_cut`` insert before it)."""
    run = dataclasses.replace(
        trace(*["issue_refund"] * 150), complete=False, incomplete_reason="span_limit"
    )
    settings = EvaluationSettings.model_validate(yaml.safe_load(MINIMAL))
    result = EvaluationPipeline(settings).evaluate(run)
    (safety,) = [r for r in result.results if r.evaluator == "safety"]
    note = incomplete_note(run)
    assert note
    assert all(f.explanation.endswith(note) for f in safety.findings), safety.findings[
        -1
    ].explanation[-200:]
