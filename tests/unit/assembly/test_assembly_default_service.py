"""``entities.producer`` keys a call by its service's name; the OpenTelemetry SDKs'
default name, ``unknown_service`` (no ``OTEL_SERVICE_NAME`` set), is no process's."""

from __future__ import annotations

from assembly_support import REFUND_POLICY, agent, ask, llm, only, tool

from toolwatch.evaluation.base import Reference
from toolwatch.evaluation.safety import Safety
from toolwatch.evaluation.settings import SafetySettings
from toolwatch.model import SpanRecord

POLICY = REFUND_POLICY
A1, B2 = {"order_id": "A-1"}, {"order_id": "B-2"}
#: What the Python SDK's Resource says without OTEL_SERVICE_NAME / service.name.
DEFAULT = "unknown_service"


def desk_asks_billing(desk: str, billing: str) -> list[SpanRecord]:
    """As tests/unit/assembly/test_assembly_recording_producer.py: desk (content captured)
    looks A-1 up, asks billing, an agent used as a tool in another process without GenAI
    content capture (its lookup of B-2 records no arguments), then refunds B-2."""
    return [
        agent(1, None, "desk", 0, 1_000, service=desk),
        llm(2, 1, 5, 50, ask("lookup_order", "c1", A1), service=desk),
        tool(3, 1, "lookup_order", 51, 60, call_id="c1", service=desk),
        llm(4, 1, 70, 100, ask("ask_billing", "c2", {"q": "B-2?"}), service=desk),
        tool(5, 1, "ask_billing", 101, 300, call_id="c2", service=desk),
        agent(6, 5, "billing", 102, 299, service=billing),
        llm(7, 6, 110, 150, service=billing),  # content capture off: no requests
        tool(8, 6, "lookup_order", 151, 160, service=billing),  # no arguments, no id
        llm(9, 6, 170, 200, service=billing),
        llm(10, 1, 310, 350, ask("issue_refund", "c3", B2), service=desk),
        tool(11, 1, "issue_refund", 351, 360, call_id="c3", service=desk),
        llm(12, 1, 400, 450, service=desk),
    ]


def test_two_processes_left_at_the_sdks_default_service_name_are_two_producers() -> None:
    """Scenario: the control case of test_assembly_recording_producer (distinct agents
    ``desk`` and ``billing``, two processes), but neither process sets a service name, so
    both export the SDK's default ``service.name`` ``unknown_service``.
    Was: one producer (``unknown_service``, None): desk's recorded lookup makes billing's
    argument-less lookup read as one that lost its arguments, and the correct run pages
    MISSING_VERIFICATION_STEP on issue_refund(B-2).
    Now: no finding, as with named services, and as at bce5830 (keyed by agent, which
    tells ``desk`` from ``billing`` here). E.g. read ``unknown_service`` (and
    ``unknown_service:<process>``) as no service, falling back to the agent.
    Regression (4bc69f7)."""
    trace = only(desk_asks_billing(DEFAULT, DEFAULT))

    assert Safety(SafetySettings(), POLICY)(trace, Reference()).findings == ()
