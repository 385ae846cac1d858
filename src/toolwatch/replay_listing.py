"""The findings the JSON replay report lists: each as a record (``finding_dict``: the findings
log's, ``toolwatch.sinks.findings``, but its ``timestamp``), and the unnamed temporary file
they are spooled to (``Spool``) when ``replay --format json`` lists them without holding them
in memory.

A spool's ``OSError`` is told as one (which file, where: ``TMPDIR``) before a byte of the
report is written.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from typing import Any

from toolwatch.evaluation.severity import CALL_AGENT
from toolwatch.model import Traffic
from toolwatch.model_evaluation import Finding
from toolwatch.model_traces import ToolTrace
from toolwatch.sinks.findings import Redaction, finding_fields

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

    def add(self, record: dict[str, Any]) -> None:
        """One listed finding (``finding_dict``)."""
        with _told():
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


def finding_dict(
    trace: ToolTrace, finding: Finding, traffic: Traffic, redaction: Redaction
) -> dict[str, Any]:
    """``finding`` of run ``trace`` as the JSON report lists it: the findings log's record
    but its ``timestamp`` (replay judges no live moment), its ``details`` redacted as the
    configuration's findings log redacts them (``output.show_argument_values``,
    ``output.show_fields``), and ``call_agent``, the agent that made its call when not the
    run's, also said on its own."""
    record = finding_fields(trace, finding, traffic)
    record["call_agent"] = finding.details.get(CALL_AGENT)
    record["details"] = redaction.details(finding)
    return record
