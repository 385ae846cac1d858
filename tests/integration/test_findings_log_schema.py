"""The findings log as docs/output-formats.md (**Findings log**) documents it, against
what ``toolwatch serve`` writes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from tests.integration import agents
from tests.integration.agents import AgentRun, Call, Turn
from tests.integration.conftest import RunningServer
from tests.integration.ingest_support import send_grpc

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "toolwatch.yaml"


def _findings_log_paragraph() -> str:
    text = (ROOT / "docs" / "output-formats.md").read_text(encoding="utf-8")
    start = text.index("**Findings log**")
    return " ".join(text[start : text.index("\n\n", start)].split())


def test_the_docs_say_how_a_schema_error_is_redacted(
    start_server: Callable[..., RunningServer],
) -> None:
    """docs/output-formats.md: argument values appear in ``details.fields`` and ``details.errors``
    (``{field, message}``); "each entry is ``"[redacted]"``" unless shown. A consumer of the
    log (a SIEM rule, a jq filter that drops redacted entries) reads ``errors`` as a list of
    ``"[redacted]"`` strings. What is written keeps each entry an object, its ``field``
    shown, only its ``message`` replaced. Either is defensible; the documented schema has to
    say which."""
    server = start_server(EXAMPLE)
    lookup = Call("lookup_order", {"order_id": "A-1001"}, "c1", result='{"status": "ok"}')
    refund = Call("issue_refund", {"order_id": "A-1001", "amount_usd": 900.0}, "c2")
    run = AgentRun("refund-bot", (Turn((lookup,)), Turn((refund,)), Turn(text="Done.")))
    send_grpc(server, agents.record(run, "genai"))
    server.settle()
    records = [
        json.loads(x)
        for x in Path(server.app.config.output.findings or "").read_text().splitlines()
    ]
    (invariant,) = [r for r in records if r["category"] == "INVARIANT_VIOLATION"]
    (entry,) = invariant["details"]["errors"]

    paragraph = _findings_log_paragraph()
    if isinstance(entry, dict):  # written: the object, its message hidden
        assert entry == {"field": "amount_usd", "message": "[redacted]"}
        assert re.search(r"message[^.;]*`\"\[redacted\]\"`", paragraph), paragraph
    else:  # written as documented
        assert entry == "[redacted]"
