"""Was (found by review, fixed): ToolwatchBackpressure's description no longer says what a full
buffer does.

Its description (deploy/prometheus/toolwatch-rules.yaml, mirrored in
deploy/kubernetes/monitoring.yaml) tells the on-call that "refusal this long is losing spans
now" and to "shorten assembly.max_trace_age_seconds if long traces hold the buffer". Since
8eb43e8, a full buffer (checks on time) refuses a batch for ``max_refusal_seconds`` at most
and then judges its oldest runs early: the alert still fires (the refuse/evict cycle repeats),
but what it costs now is runs judged ``evicted`` and their later spans ``late``, and
``max_trace_age_seconds`` no longer decides how long the buffer stays shut. The page should
name ``max_refusal_seconds`` and the evictions it causes
(``toolwatch_trace_evictions_total``, ToolwatchRunsEvaluatedIncomplete).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _description(path: Path) -> str:
    found = []
    for document in yaml.safe_load_all(path.read_text()):
        stack = [document]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                if node.get("alert") == "ToolwatchBackpressure":
                    found.append(node["annotations"]["description"])
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
            elif isinstance(node, str) and "alert: ToolwatchBackpressure" in node:
                stack.extend(yaml.safe_load_all(node))  # a ConfigMap's embedded rule file
    (description,) = found
    return str(description)


@pytest.mark.parametrize(
    "path", ["deploy/prometheus/toolwatch-rules.yaml", "deploy/kubernetes/monitoring.yaml"]
)
def test_the_backpressure_page_names_the_refusal_limit_and_its_evictions(path: str) -> None:
    description = _description(ROOT / path)
    assert "max_refusal_seconds" in description
    assert "evict" in description
