"""The findings the JSON replay report lists: each as a record (``finding_dict``), and the
unnamed temporary file they are spooled to (``Spool``) when ``replay --format json`` lists
them without holding them in memory.

A spool's ``OSError`` is told as one (which file, where: ``TMPDIR``) before a byte of the
report is written.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from typing import Any

from toolwatch.evaluation.severity import CALL_AGENT, ERROR_TYPE, OUTCOME
from toolwatch.model import Finding, Traffic

__all__ = ["Spool", "finding_dict"]


class Spool:
    """Findings as the JSON report lists them, one JSON line each in an unnamed temporary
    file (about 400 bytes a finding on disk, none held in memory), read back in order.
    Written out (``seal``) before the report is: a full temporary directory is told as
    replay's error, naming it, not met halfway through the document."""

    def __init__(self) -> None:
        # Open as long as the report lives; unnamed, so gone with the process whatever ends it.
        with _told():
            self._file = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115

    def add(self, finding: Finding, traffic: Traffic, incomplete: str | None) -> None:
        with _told():
            record = finding_dict(finding, traffic, incomplete)
            self._file.write(json.dumps(record, allow_nan=False) + "\n")

    def seal(self) -> None:
        """Write out what is buffered."""
        with _told():
            self._file.flush()

    def records(self) -> Iterator[dict[str, Any]]:
        """Every finding, from the first: a report may be written more than once."""
        with _told():
            self._file.seek(0)
        while True:
            with _told():  # not around the yield: an error of the reader is not the spool's
                line = self._file.readline()
            if not line:
                return
            record: dict[str, Any] = json.loads(line)
            yield record


@contextlib.contextmanager
def _told() -> Iterator[None]:
    """An ``OSError`` of the spool, said as one: which file, where (``TMPDIR``)."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or str(exc)
        where = tempfile.gettempdir()
        raise OSError(
            f"cannot write the JSON report's findings to a temporary file in {where}"
            f" (TMPDIR): {reason}"
        ) from exc


def finding_dict(finding: Finding, traffic: Traffic, incomplete: str | None) -> dict[str, Any]:
    """A finding as the JSON report lists it, with the findings log's names
    (``toolwatch.sinks.findings``), ``incomplete`` its run's ``incomplete_reason`` (``None``
    for a whole run's); of its details only what became of a dangerous call (``outcome``,
    ``error_type``), never argument values."""
    return {
        "category": str(finding.category),
        "severity": str(finding.severity),
        "evaluator": finding.evaluator,
        "reference": str(finding.reference),
        "case_id": finding.case_id,
        "source_trace_id": finding.source_trace_id,
        "pair_key": finding.pair_key,
        "score": finding.score,
        "tool": finding.tool,
        "field": finding.field,
        "agent": finding.agent,
        "call_agent": finding.details.get(CALL_AGENT),  # another agent of the run made it
        "trace_id": finding.trace_id,
        "span_id": finding.span_id,
        "traffic": str(traffic),
        "incomplete_reason": incomplete,
        "explanation": finding.explanation,
        "details": {k: finding.details[k] for k in (OUTCOME, ERROR_TYPE) if k in finding.details},
    }
