"""What the references stage remembers stays within its documented bounds when senders use
long ids: a shadow pair key, an agent name and a conversation id are attribute values, up to
``ingest.max_value_bytes`` (64 KiB) each.

Each test runs a real server (``start_server``) and posts it OTLP/protobuf export requests
encoded as the OpenTelemetry SDK's exporter encodes them, then measures what the process
still holds once the runs were evaluated (``tracemalloc``, after a full collection). The
requests are encoded before measuring: the SDK's tracer providers stay referenced
(``atexit``), their spans with them, which is the test's memory, not toolwatch's.

Before the references were keyed by a digest of their ids (``references.identity``) and a
waiting shadow half was counted whole (``shadow.half_bytes``), the joined pairs below held
19.7 MB (131 KB a pair, none waiting), the waiting halves 30.0 MB against the 1 MiB bound
(counted 364,800 bytes), and a conversation whose one lookup verified a 6-character order
id 66.8 KB (637 MiB at the 10,000 conversations remembered). ``tests/unit/references`` holds
the same bounds on the joiner and the memory alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from tests.integration import agents
from tests.integration.conftest import RunningServer
from tests.integration.ingest_support import post_protobuf
from tests.memory import retained
from toolwatch.metrics import UNPAIRED_REASONS
from toolwatch.references.conversations import MAX_CONVERSATIONS

MAX_VALUE = 65_536  # ingest.max_value_bytes' default: the longest value a span keeps
MAX_WAITING_BYTES = 2**20
SLACK = 2**20  # what the server's own small structures may add while measured
PAIR_KEY = "toolwatch.shadow.pair_id"
ROLE = "toolwatch.shadow.role"
SHADOW = {"traffic": "shadow"}
POLICY = """\
policy:
  dangerous_tools: [issue_refund]
  verification_tools: [lookup_order]
  bindings: {issue_refund.order_id: lookup_order.order_id}
"""


def long_text(i: int, n: int = MAX_VALUE) -> str:
    """A distinct ASCII text of ``n`` characters (as long as a span may carry)."""
    head = f"{i:012d}-"
    return head + "x" * (n - len(head))


def encode(runs: Iterable[agents.AgentRun]) -> bytes:
    """One export request of ``runs``, each its own trace."""
    spans = agents.spans_of(*(agents.record(run, "genai") for run in runs))
    return bytes(encode_spans(spans).SerializeToString())


def send(server: RunningServer, body: bytes) -> None:
    """Post one request, then complete and evaluate its runs."""
    status, answer = post_protobuf(server, body)
    assert status == 200, answer
    server.settle()


def half(key: str, role: str, agent: str = "refund-bot") -> agents.AgentRun:
    return dataclasses.replace(
        agents.refund_run(), agent=agent, attributes={PAIR_KEY: key, ROLE: role}
    )


def long_halves(first: int, count: int, roles: tuple[str, ...]) -> Iterator[agents.AgentRun]:
    """Halves of ``count`` pairs whose pair keys and agent names are 64 KiB each."""
    for i in range(first, first + count):
        agent = "agent-" + long_text(i, MAX_VALUE - 6)
        yield from (half(long_text(i), role, agent) for role in roles)


@pytest.fixture
def shadow_server(start_server: Callable[..., RunningServer], tmp_path: Path) -> RunningServer:
    config = tmp_path / "toolwatch.yaml"
    config.write_text(
        POLICY + f"shadow:\n  enabled: true\n  max_waiting_bytes: {MAX_WAITING_BYTES}\n"
    )
    server = start_server(config)
    send(server, encode(half("warm-up", role) for role in ("source", "target")))
    return server


def unpaired(server: RunningServer, reason: str) -> float:
    return server.sample("toolwatch_shadow_unpaired_total", {"reason": reason})


def test_pairs_already_joined_hold_only_a_digest_of_their_key(
    shadow_server: RunningServer,
) -> None:
    """A joined pair's key stays for ``pair_timeout_seconds`` (a late third half is then a
    duplicate): 16 bytes of digest, not its 64 KiB pair key and agent name."""
    pairs = 150
    bodies = [encode(long_halves(i, 10, ("source", "target"))) for i in range(0, pairs, 10)]

    held = retained(lambda: [send(shadow_server, body) for body in bodies])

    assert shadow_server.app.engine.buffer.buffered_traces == 0
    compared = {"agent": "_other", "outcome": "complete", "reference": "source"}
    assert shadow_server.sample("toolwatch_tool_traces_total", compared | SHADOW) == pairs
    assert all(unpaired(shadow_server, reason) == 0 for reason in UNPAIRED_REASONS)
    # Measured: 62 KB kept for the 150 pairs (the server's own included); 19.7 MB when
    # keyed by the texts.
    assert held <= MAX_WAITING_BYTES + SLACK, f"{held:,} bytes kept after {pairs} pairs joined"


def test_waiting_halves_are_counted_with_their_keys_and_names(
    shadow_server: RunningServer,
) -> None:
    """A waiting half is counted with every text it holds (its pair key and agent name
    among them), so ``max_waiting_bytes`` evicts halves of long ones as it should."""
    halves = 150
    bodies = [encode(long_halves(i, 10, ("source",))) for i in range(0, halves, 10)]

    held = retained(lambda: [send(shadow_server, body) for body in bodies])

    assert shadow_server.app.engine.buffer.buffered_traces == 0
    # Each half holds at least its pair key and agent name, 128 KiB: at most 8 fit.
    evicted = unpaired(shadow_server, "evicted")
    # Measured: 974 KB held by the 7 halves still waiting, 143 evicted; 30.0 MB before,
    # none evicted.
    assert held <= MAX_WAITING_BYTES + SLACK, f"{held:,} bytes held, {evicted:.0f} evicted"
    assert evicted >= halves - MAX_WAITING_BYTES // (2 * MAX_VALUE)


def test_a_conversation_id_is_not_kept_at_any_length(
    start_server: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """The conversation memory is keyed by a digest of the conversation id (an attribute of
    up to 64 KiB), so what a conversation holds does not grow with its id."""
    config = tmp_path / "toolwatch.yaml"
    config.write_text(POLICY + "  verification_scope: conversation\n")
    server = start_server(config)
    send(server, encode([agents.refund_run({"gen_ai.conversation.id": "warm-up"})]))
    conversations = 200
    bodies = [
        encode(
            agents.refund_run({"gen_ai.conversation.id": long_text(i)})
            for i in range(first, first + 50)
        )
        for first in range(0, conversations, 50)
    ]

    held = retained(lambda: [send(server, body) for body in bodies])

    assert server.app.engine.buffer.buffered_traces == 0
    per_conversation = held / conversations
    # Measured: 1,378 bytes a conversation (the server's own included); 66,837 before.
    assert per_conversation <= 4096, (
        f"{per_conversation:,.0f} bytes kept per conversation with one 6-character value"
        f" verified ({per_conversation * MAX_CONVERSATIONS / 2**20:,.0f} MiB at"
        f" {MAX_CONVERSATIONS:,} conversations)"
    )
