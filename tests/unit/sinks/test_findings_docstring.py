"""The findings-log line the ``toolwatch.sinks.findings`` module docstring shows has the keys
``finding_record`` writes, in its order."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from tests import factories
from toolwatch.model import Traffic
from toolwatch.sinks.findings import Redaction, finding_record

#: Read from the source: compiled (mypyc), the module keeps no docstring.
SOURCE = Path(__file__).resolve().parents[3] / "src" / "toolwatch" / "sinks" / "findings.py"


def test_the_docstring_line_has_the_keys_the_log_writes() -> None:
    doc = ast.get_docstring(ast.parse(SOURCE.read_text(encoding="utf-8"))) or ""
    start = doc.index('{"category"')
    shown = json.loads(doc[start : doc.index("\n\n", start)])
    record = finding_record(
        factories.tool_trace(), factories.finding(), Redaction(), 0, Traffic.LIVE
    )
    assert list(shown) == list(record)
