"""Joining shadow halves: both orders, timeouts, the memory bound, duplicates and roles."""

from __future__ import annotations

import dataclasses
from collections import Counter

from tests import factories
from tests.memory import retained
from toolwatch.metrics import NoopMetrics
from toolwatch.model import ManualClock, Traffic
from toolwatch.model_evaluation import GoldenCase
from toolwatch.model_traces import ToolTrace
from toolwatch.references.settings import ShadowSettings
from toolwatch.references.shadow import (
    PAIRED_ENTRY_BYTES,
    UNPAIRED_REASONS,
    ShadowJoiner,
    ShadowPair,
    half_bytes,
)

PAIR = "toolwatch.shadow.pair_id"
ROLE = "toolwatch.shadow.role"


class CountingMetrics(NoopMetrics):
    """Records every ``shadow_unpaired`` reason and every tool-trace count."""

    def __init__(self) -> None:
        self.unpaired: Counter[str] = Counter()
        self.counted: list[tuple[str, str]] = []  # (trace id, reference)

    def shadow_unpaired(self, reason: str) -> None:
        self.unpaired[reason] += 1

    def tool_trace(self, trace: ToolTrace, reference: str, traffic: Traffic) -> None:
        self.counted.append((trace.trace_id, reference))


def _run(trace_id: str, keys: dict[str, str]) -> ToolTrace:
    return factories.tool_trace(
        trace_id=trace_id,
        service="support-agent",
        agent="refunds",
        start_ns=1,
        end_ns=2,
        span_count=1,
        reference_keys=keys,
    )


def _half(key: str, role: str, trace_id: str | None = None) -> ToolTrace:
    return _run(trace_id or f"{key}-{role}", {PAIR: key, ROLE: role})


def _joiner(
    clock: ManualClock | None = None, **overrides: object
) -> tuple[ShadowJoiner, CountingMetrics]:
    settings = ShadowSettings.model_validate({"enabled": True, **overrides})
    metrics = CountingMetrics()
    return ShadowJoiner(settings, clock or ManualClock(), metrics), metrics


def test_source_then_target_makes_a_pair() -> None:
    joiner, metrics = _joiner()
    source, target = _half("p1", "source"), _half("p1", "target")

    assert joiner.offer(source) is None
    assert joiner.waiting == 1
    # The pair carries its key: findings against the source name it (with its trace id).
    assert joiner.offer(target) == ShadowPair(source=source, target=target, key="p1")
    assert joiner.waiting == 0
    assert metrics.unpaired == Counter()


def test_target_then_source_makes_the_same_pair() -> None:
    joiner, _ = _joiner()
    source, target = _half("p1", "source"), _half("p1", "target")

    assert joiner.offer(target) is None
    pair = joiner.offer(source)

    assert pair is not None
    assert (pair.source, pair.target, pair.key) == (source, target, "p1")


def test_a_pair_hands_back_the_golden_case_of_its_target() -> None:
    """Whichever half waited: the target's case is what its pair is judged with again, not
    the source's (the case of another run)."""
    canary, other = GoldenCase("canary"), GoldenCase("other")
    for first, then in (("target", "source"), ("source", "target")):
        joiner, _ = _joiner()
        cases = {"target": canary, "source": other}
        assert joiner.offer(_half("p1", first), case=cases[first]) is None
        pair = joiner.offer(_half("p1", then), case=cases[then])
        assert pair is not None and pair.case is canary


def test_pairs_join_only_on_their_own_key() -> None:
    joiner, _ = _joiner()

    joiner.offer(_half("p1", "source"))
    joiner.offer(_half("p2", "source"))
    pair = joiner.offer(_half("p2", "target"))

    assert pair is not None
    assert pair.source.trace_id == "p2-source"
    assert joiner.waiting == 1


def test_a_target_is_joined_with_the_source_run_of_its_own_agent() -> None:
    """A request that runs a triage agent, then the refund agent, each run with the pair
    key; the candidate serves the refund agent alone. Its run pairs with production's refund
    run (not the first half under the key, triage's), which is no duplicate; triage's run
    waits for a partner that never comes, and times out as any unpaired half does. Agent
    names are folded, as everywhere (``Refund-Bot`` names ``refund-bot``)."""
    clock = ManualClock()
    joiner, metrics = _joiner(clock, pair_timeout_seconds=30)

    def half(agent: str, role: str) -> ToolTrace:
        return dataclasses.replace(_half("req-1", role, f"{agent}-{role}"), agent=agent)

    assert joiner.offer(half("triage-bot", "source")) is None
    assert joiner.offer(half("refund-bot", "source")) is None
    pair = joiner.offer(half(" Refund-Bot", "target"))
    assert pair is not None
    assert pair.source.trace_id == "refund-bot-source"
    assert (joiner.waiting, metrics.unpaired) == (1, Counter())
    clock.advance(30)
    joiner.expire()
    assert (joiner.waiting, metrics.unpaired) == (0, Counter({"timed_out": 1}))


def test_runs_without_a_pair_key_are_neither_held_nor_counted() -> None:
    joiner, metrics = _joiner()

    assert joiner.offer(_run("plain", {ROLE: "source"})) is None
    assert joiner.offer(_run("empty", {PAIR: "", ROLE: "source"})) is None
    assert joiner.waiting == 0
    assert metrics.unpaired == Counter()


def test_disabled_joiner_ignores_shadow_runs() -> None:
    metrics = CountingMetrics()
    joiner = ShadowJoiner(ShadowSettings(enabled=False), ManualClock(), metrics)

    assert joiner.offer(_half("p1", "source")) is None
    assert joiner.waiting == 0
    assert joiner.pair_key(_half("p1", "source")) is None


def test_half_waiting_past_the_timeout_is_counted_timed_out() -> None:
    clock = ManualClock()
    joiner, metrics = _joiner(clock, pair_timeout_seconds=30)
    joiner.offer(_half("p1", "source"))

    clock.advance(29.9)
    joiner.expire()
    assert joiner.waiting == 1

    clock.advance(0.1)
    joiner.expire()
    assert joiner.waiting == 0
    assert metrics.unpaired == Counter({"timed_out": 1})


def test_expire_stops_at_the_first_half_still_in_time() -> None:
    clock = ManualClock()
    joiner, metrics = _joiner(clock, pair_timeout_seconds=10)
    joiner.offer(_half("old", "source"))
    clock.advance(5)
    joiner.offer(_half("new", "target"))

    clock.advance(5)
    joiner.expire()

    assert joiner.waiting == 1
    assert metrics.unpaired == Counter({"timed_out": 1})
    assert joiner.offer(_half("new", "source")) is not None


def test_a_late_other_half_does_not_pair_with_an_expired_one() -> None:
    clock = ManualClock()
    joiner, metrics = _joiner(clock, pair_timeout_seconds=10)
    joiner.offer(_half("p1", "source"))

    clock.advance(11)
    result = joiner.offer(_half("p1", "target"))

    assert result is None
    assert joiner.waiting == 1
    assert metrics.unpaired == Counter({"timed_out": 1})


def test_over_the_bound_the_oldest_half_is_evicted() -> None:
    joiner, metrics = _joiner(max_waiting=2)
    joiner.offer(_half("p1", "source"))
    joiner.offer(_half("p2", "source"))

    joiner.offer(_half("p3", "source"))

    assert joiner.waiting == 2
    assert metrics.unpaired == Counter({"evicted": 1})
    assert joiner.offer(_half("p1", "target")) is None
    assert joiner.offer(_half("p3", "target")) is not None


def _heavy(key: str, items: int) -> ToolTrace:
    """A source half whose one call's arguments are ``items`` empty objects."""
    call = factories.tool_call(tool_name="t", arguments=[{}] * items)
    return dataclasses.replace(_half(key, "source"), calls=(call,))


def test_the_waiting_halves_are_bounded_in_bytes_too() -> None:
    """A half holds its whole run: 40 halves whose arguments were 20,000 empty objects held
    22 MiB each, against no byte bound."""
    heavy = _heavy("p1", 20_000)
    assert half_bytes(heavy) >= 20_000 * 72  # an empty dict and its list slot
    joiner, metrics = _joiner(max_waiting_bytes=3 * half_bytes(heavy))
    for n in range(1, 6):
        joiner.offer(_heavy(f"p{n}", 20_000))

    assert (joiner.waiting, metrics.unpaired) == (3, Counter({"evicted": 2}))
    assert joiner.waiting_bytes == 3 * half_bytes(heavy)
    assert joiner.offer(_half("p5", "target")) is not None  # the newest still pairs
    assert joiner.waiting_bytes == 2 * half_bytes(heavy)
    # One half bigger than the bound alone is held by itself, the rest evicted.
    joiner.offer(_heavy("big", 100_000))
    assert (joiner.waiting, metrics.unpaired["evicted"]) == (1, 4)
    joiner.drain()
    assert joiner.waiting_bytes == 0


def _named(n: int, length: int) -> ToolTrace:
    """A source half each of whose texts (ids, names, keys) is ``length`` characters."""

    def text(kind: str) -> str:
        return f"{kind}{n}-".ljust(length, "x")

    call = factories.tool_call(
        tool_name=text("tool"),
        raw_name=text("raw"),
        call_id=text("call"),
        parent_call_id=text("parent"),
        error_type=text("error"),
        agent=text("sub-agent"),
        span_id=text("span"),
    )
    return factories.tool_trace(
        trace_id=text("trace"),
        run_span_id=text("run"),
        service=text("service"),
        agent=text("agent"),
        model=text("model"),
        calls=(call,),
        final_text=text("final"),
        refusal_reason=text("refusal"),
        conversation_id=text("conversation"),
        agents=(text("agent"), call.agent or ""),
        reference_keys={PAIR: text("pair"), ROLE: "source"},
        shared_keys={"toolwatch.case_id": text("case")},
    )


def test_a_waiting_half_is_counted_with_every_text_it_holds() -> None:
    """Pair key, agent, service, model, conversation id, reference keys, tool names and
    ids: a sender sets each up to ``ingest.max_value_bytes``. They were left out, and 150
    halves of 64 KiB pair keys and agent names, counted 365 KB, held 30 MB."""
    long = _named(1, 65_536)
    texts = 18  # every text of ``_named`` but the role; the call's agent is one of agents
    assert half_bytes(long) >= texts * 65_536
    assert half_bytes(long) <= texts * 65_536 + half_bytes(_named(1, 16))
    joiner, metrics = _joiner(max_waiting_bytes=2 * half_bytes(long))
    for n in range(5):
        joiner.offer(_named(n, 65_536))
    assert (joiner.waiting, metrics.unpaired) == (2, Counter({"evicted": 3}))


def test_a_joined_pair_keeps_no_copy_of_its_key_or_agent() -> None:
    """A joined pair's key is remembered for ``pair_timeout_seconds`` (a third half is then a
    duplicate), keyed by a 16-byte digest: 150 pairs of 64 KiB pair keys and agent names
    held 19.7 MB while keyed by the texts, none of it counted."""
    joiner, metrics = _joiner()
    pairs = 100

    def join() -> None:
        for n in range(pairs):
            key, agent = f"{n}-".ljust(65_536, "k"), f"{n}-".ljust(65_536, "a")
            for role in ("source", "target"):
                half = _run(f"{n}-{role}", {PAIR: key, ROLE: role})
                joiner.offer(dataclasses.replace(half, agent=agent))

    held = retained(join)
    assert joiner.waiting == 0 and joiner.waiting_bytes == 0
    assert held <= pairs * PAIRED_ENTRY_BYTES, f"{held:,} bytes kept after {pairs} pairs"
    late = _run("late", {PAIR: "0-".ljust(65_536, "k"), ROLE: "target"})
    assert joiner.offer(dataclasses.replace(late, agent="0-".ljust(65_536, "A"))) is None
    assert metrics.unpaired == Counter({"duplicate": 1})  # the same agent, case-folded


def test_a_second_half_with_the_same_role_is_a_duplicate() -> None:
    joiner, metrics = _joiner()
    first = _half("p1", "source", trace_id="first")
    joiner.offer(first)

    assert joiner.offer(_half("p1", "source", trace_id="second")) is None
    pair = joiner.offer(_half("p1", "target"))

    assert metrics.unpaired == Counter({"duplicate": 1})
    assert pair is not None
    assert pair.source is first


def test_a_half_arriving_after_its_pair_joined_is_a_duplicate() -> None:
    clock = ManualClock()
    joiner, metrics = _joiner(clock, pair_timeout_seconds=10)
    joiner.offer(_half("p1", "source"))
    joiner.offer(_half("p1", "target"))

    assert joiner.offer(_half("p1", "target", trace_id="retry")) is None
    assert joiner.waiting == 0
    assert metrics.unpaired == Counter({"duplicate": 1})


def test_a_joined_key_is_forgotten_after_the_timeout() -> None:
    clock = ManualClock()
    joiner, metrics = _joiner(clock, pair_timeout_seconds=10)
    joiner.offer(_half("p1", "source"))
    joiner.offer(_half("p1", "target"))

    clock.advance(10)
    joiner.offer(_half("p1", "source", trace_id="reused"))

    assert joiner.waiting == 1
    assert metrics.unpaired == Counter()


def test_missing_or_unknown_role_is_counted_no_role() -> None:
    joiner, metrics = _joiner()

    assert joiner.offer(_run("a", {PAIR: "p1"})) is None
    assert joiner.offer(_run("b", {PAIR: "p1", ROLE: "canary"})) is None

    assert joiner.waiting == 0
    assert metrics.unpaired == Counter({"no_role": 2})


def test_role_values_are_configurable_and_case_insensitive() -> None:
    joiner, _ = _joiner(role_attribute="shadow.role", source_value="prod", target_value="candidate")
    prod = _run("a", {PAIR: "p1", "shadow.role": " PROD"})
    candidate = _run("b", {PAIR: "p1", "shadow.role": "Candidate"})

    joiner.offer(candidate)

    assert joiner.offer(prod) == ShadowPair(source=prod, target=candidate, key="p1")


def test_drain_counts_every_waiting_half_as_shutdown() -> None:
    joiner, metrics = _joiner()
    joiner.offer(_half("p1", "source"))
    joiner.offer(_half("p2", "target"))

    joiner.drain()

    assert joiner.waiting == 0
    assert metrics.unpaired == Counter({"shutdown": 2})


def test_every_reported_reason_is_a_declared_label_value() -> None:
    clock = ManualClock()
    joiner, metrics = _joiner(clock, max_waiting=1, pair_timeout_seconds=1)
    joiner.offer(_half("p1", "source"))
    joiner.offer(_half("p1", "source"))
    joiner.offer(_half("p2", "source"))
    joiner.offer(_run("x", {PAIR: "p3"}))
    clock.advance(1)
    joiner.offer(_half("p4", "target"))
    joiner.drain()

    assert set(metrics.unpaired) == set(UNPAIRED_REASONS)
    assert sum(metrics.unpaired.values()) == 5


def test_compares_names_the_targets_offer_would_take_to_compare() -> None:
    """What toolwatch_tool_traces_total{reference="source"} counts: drift alerts divide by
    it, so a duplicate target must not count as a second compared run."""
    joiner, _ = _joiner()
    source, target = _half("p1", "source"), _half("p1", "target")
    assert [joiner.compares(source), joiner.compares(target)] == [False, True]
    assert joiner.compares(_run("plain", {})) is False

    joiner.offer(target)  # waiting for its source
    assert joiner.compares(_half("p1", "target", trace_id="retry")) is False
    assert joiner.compares(_half("p2", "target")) is True
    joiner.offer(source)  # paired
    assert joiner.compares(_half("p1", "target", trace_id="late")) is False


def test_a_deferred_target_is_counted_once_by_its_outcome() -> None:
    """A deferred target's tool-trace count waits: the pair says to count it as compared,
    and every way of never pairing counts it with reference none."""
    clock = ManualClock()
    joiner, metrics = _joiner(clock, pair_timeout_seconds=10, max_waiting=2)
    assert joiner.offer(_half("p1", "target"), deferred=True) is None
    pair = joiner.offer(_half("p1", "source"))
    assert pair is not None
    assert (pair.target.trace_id, pair.deferred) == ("p1-target", True)
    # The source arriving last pairs a target that was not deferred (a golden case's).
    joiner.offer(_half("p2", "target"))
    assert joiner.offer(_half("p2", "source")) == ShadowPair(
        _half("p2", "source"), _half("p2", "target"), deferred=False, key="p2"
    )
    assert metrics.counted == []  # pairing is the engine's to count

    joiner.offer(_half("old", "target"), deferred=True)
    joiner.offer(_half("p3", "target"), deferred=True)
    joiner.offer(_half("p4", "source"))  # the third half: evicts the oldest
    assert metrics.counted == [("old-target", "none")]
    clock.advance(11)
    joiner.expire()  # p3's target times out; p4's source is not a deferred run
    joiner.offer(_half("p5", "target"), deferred=True)
    joiner.drain()
    assert metrics.counted == [
        ("old-target", "none"),
        ("p3-target", "none"),
        ("p5-target", "none"),
    ]
    assert metrics.unpaired == Counter({"evicted": 1, "timed_out": 2, "shutdown": 1})
