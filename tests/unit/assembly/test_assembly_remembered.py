"""RememberedTraces: the ids of emitted traces, kept for the late window (DESIGN §4)."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolwatch.assembly.remembered import BUCKETS_PER_WINDOW, RememberedTraces, _Table, trace_key

SECOND = 1_000_000_000
WINDOW = 300 * SECOND


def test_the_window_holds_at_2000_traces_a_second_with_room_for_them() -> None:
    """A whole window of 2,000 emitted traces a second, with room for exactly that many:
    the first is still remembered at the window's end (the buffer's cap of 100,000 kept
    each for 50 s at that rate), and none was forgotten for the cap."""
    remembered = RememberedTraces(WINDOW, capacity=2_000 * 300)
    traces = [os.urandom(16) for _ in range(2_000 * 300)]
    evicted = 0
    for tick in range(0, len(traces), 20):  # 20 every 10 ms, as the server's ticker emits
        now = tick * SECOND // 2_000
        remembered.forget(now)
        evicted += sum(remembered.add(trace_id, now) for trace_id in traces[tick : tick + 20])
    assert (evicted, len(remembered)) == (0, 600_000)

    bucket = remembered.bucket_ns  # 1.171875 s: the ticks up to 1.17 s, 2,360 traces
    remembered.forget(WINDOW - 1)  # the first was emitted at 0
    assert all(trace_id in remembered for trace_id in traces[:2_400])
    remembered.forget(WINDOW + bucket)  # the first bucket's end has passed the window
    assert traces[2_359] not in remembered  # emitted at 1.17 s, in the first bucket
    assert traces[2_360] in remembered  # emitted at 1.18 s, in the second
    assert len(remembered) == 600_000 - 2_360


@pytest.mark.parametrize(
    ("window", "emitted", "bucket_end"),
    [
        (256 * SECOND, 5 * SECOND + 250_000_000, 6 * SECOND),
        (256 * SECOND, 6 * SECOND, 7 * SECOND),  # at a bucket's start: the window and a bucket
        (256 * SECOND, 6 * SECOND - 1, 6 * SECOND),  # at its end: the window and 1 ns
        (WINDOW, 3 * SECOND, 3_515_625_000),  # buckets of 1.171875 s
        (64, 7, 8),  # buckets of 1 ns: exactly the window
    ],
)
def test_an_id_is_remembered_for_the_window_and_at_most_one_bucket_more(
    window: int, emitted: int, bucket_end: int
) -> None:
    remembered = RememberedTraces(window, capacity=10)
    assert remembered.bucket_ns == max(1, window // BUCKETS_PER_WINDOW)
    remembered.add(b"t" * 16, emitted)

    for now in (emitted + window - 1, emitted + window, bucket_end + window - 1):
        remembered.forget(now)
        assert b"t" * 16 in remembered, now - emitted
    remembered.forget(bucket_end + window)
    assert b"t" * 16 not in remembered
    assert len(remembered) == 0


def test_the_cap_forgets_the_oldest_ids_one_by_one_and_says_how_many() -> None:
    remembered = RememberedTraces(WINDOW, capacity=3)
    ids = [n.to_bytes(16, "big") for n in range(1, 6)]

    assert [remembered.add(trace_id, SECOND) for trace_id in ids] == [0, 0, 0, 1, 1]
    assert [trace_id in remembered for trace_id in ids] == [False, False, True, True, True]
    remembered.forget(2 * SECOND + WINDOW)  # the bucket the cap began to empty goes whole
    assert (len(remembered), any(trace_id in remembered for trace_id in ids)) == (0, False)


def test_a_cap_of_rate_times_window_counts_no_id_forgotten_early() -> None:
    """The cap docs/configuration.md tells operators to set (traces a second times the window)
    forgets ids just as their window ends, before their bucket would: none is counted, and every
    id younger than the window is still remembered."""
    rate = 200
    remembered = RememberedTraces(WINDOW, capacity=rate * 300)
    emitted: list[tuple[bytes, int]] = []
    counted = 0
    for n in range(rate * 900):  # three windows at a steady rate, as the server's ticker emits
        now = n * SECOND // rate
        if n % 2 == 0:
            remembered.forget(now)
        trace_id = n.to_bytes(16, "big")
        emitted.append((trace_id, now))
        counted += remembered.add(trace_id, now)

    younger = [trace_id for trace_id, at in emitted if now - at < WINDOW]
    assert all(trace_id in remembered for trace_id in younger)
    assert counted == 0


def test_an_id_the_cap_forgets_after_its_window_is_not_counted() -> None:
    """Emitted at 0, the id's window ends at 300 s, its bucket at 301.17 s: a second id at
    300.5 s with room for one forgets it by the cap, after its window."""
    remembered = RememberedTraces(WINDOW, capacity=1)
    remembered.add(b"a" * 16, 0)
    now = WINDOW + SECOND // 2
    remembered.forget(now)  # as the buffer does before it emits
    assert remembered.add(b"b" * 16, now) == 0
    assert (b"a" * 16 in remembered, b"b" * 16 in remembered) == (False, True)


def test_a_bucket_that_never_ends_holds_no_more_than_the_cap_and_a_bit() -> None:
    """Replay's window never passes, so its one bucket is emptied by the cap alone: the ids
    it forgot are let go of, not kept behind the live ones."""
    remembered = RememberedTraces(2**62, capacity=10)
    for n in range(100_000):
        remembered.add(n.to_bytes(16, "big"), SECOND + n)
    (bucket,) = remembered._buckets  # white box: the memory it holds
    assert (len(bucket.keys) - bucket.first, len(remembered)) == (10, 10)
    assert len(bucket.keys) <= 2 * 4096 + 10
    assert [n.to_bytes(16, "big") in remembered for n in (99_989, 99_990, 99_999)] == [
        False,
        True,
        True,
    ]


def test_a_window_or_a_cap_of_zero_remembers_nothing_and_only_the_cap_counts_it() -> None:
    assert RememberedTraces(0, capacity=10).add(b"t" * 16, SECOND) == 0
    no_room = RememberedTraces(WINDOW, capacity=0)
    assert no_room.add(b"t" * 16, SECOND) == 1
    assert (b"t" * 16 in no_room, len(no_room)) == (False, 0)


def _structured_ids() -> set[bytes]:
    """Ids that are not random: small sequential ones (a 64-bit id padded with zeros, or a
    test's counter), the same in the high half, both halves equal, one byte repeated, one
    bit set."""
    numbers = range(1, 50_001)
    return {
        *(n.to_bytes(16, "big") for n in numbers),
        *((n << 64).to_bytes(16, "big") for n in numbers),
        *((n << 64 | n).to_bytes(16, "big") for n in numbers),
        *(bytes([k]) * 16 for k in range(1, 256)),
        *((1 << bit).to_bytes(16, "big") for bit in range(128)),
    }


def test_ids_that_are_not_random_have_keys_of_their_own() -> None:
    """The key is a keyed hash of the whole id: taking or folding halves would collide for
    some of these (the xor of equal halves is 0 for all 50,000 of them)."""
    ids = _structured_ids()
    keys = {trace_key(trace_id) for trace_id in ids}
    assert len(keys) == len(ids) == 150_351  # 32 of the one-bit ids are small ones too
    assert 0 not in keys
    assert all(-(2**62) <= key < 2**62 for key in keys)


def test_ids_that_are_not_random_are_not_taken_for_one_another() -> None:
    equal_halves = [(n << 64 | n).to_bytes(16, "big") for n in range(1, 50_001)]
    others = _structured_ids() - set(equal_halves)
    remembered = RememberedTraces(WINDOW, capacity=100_000)
    for trace_id in equal_halves:
        remembered.add(trace_id, SECOND)
    assert all(trace_id in remembered for trace_id in equal_halves)
    assert not any(trace_id in remembered for trace_id in others)


# -- the tables, against a model -------------------------------------------------------------

#: Keys whose home slots crowd a few slots of a small table (and wrap around its end):
#: 4 low-bit variants of 12 homes, negative ones too.
_KEYS = [
    sign * (home << 8 | low) for home in range(12) for low in (1, 2, 3, 255) for sign in (1, -1)
]
_table_ops = st.lists(
    st.tuples(st.sampled_from(["add", "remove"]), st.sampled_from(_KEYS)), max_size=200
)


@settings(max_examples=300, deadline=None)
@given(ops=_table_ops)
def test_a_table_holds_what_was_added_and_not_removed(ops: list[tuple[str, int]]) -> None:
    """Linear probing with backward-shift removal, growing and shrinking, keys added twice:
    after each step, every key is found exactly when the model holds it."""
    table = _Table(8)
    model: Counter[int] = Counter()
    for op, key in ops:
        if op == "add":
            table.add(key)
            model[key] += 1
        elif model[key]:
            table.remove(key)
            model[key] -= 1
            if table.sparse():
                table.shrink()
                assert not table.sparse()
        assert table.count == model.total()
        assert [table.has(k) for k in _KEYS] == [model[k] > 0 for k in _KEYS]
        assert 3 * table.count <= 2 * len(table.slots)


def test_one_forget_rehashes_one_table_at_most() -> None:
    """Keys spread evenly over the tables, so all turn sparse at about the same total: one
    ``forget`` shrinks one of them (they once halved 36 tables of 2,048 slots in one call)."""
    remembered = RememberedTraces(WINDOW, capacity=2_000_000)
    bucket = remembered.bucket_ns
    total = 300_000  # 1,170 a table: 2,048 slots each, sparse below 256 keys
    for n in range(total):
        remembered.add(n.to_bytes(16, "big"), 2 * bucket + n * (WINDOW - 4 * bucket) // total)

    resized: list[int] = []
    resize = _Table._resize

    def counting(table: _Table, size: int) -> None:
        resized.append(len(table.slots))
        resize(table, size)

    _Table._resize = counting  # type: ignore[method-assign]
    try:
        most = 0
        now = WINDOW
        while len(remembered) > 20_000:  # ordinary buckets (the tail ends in tiny tables)
            now += bucket
            resized.clear()
            remembered.forget(now)
            most = max(most, sum(resized))
    finally:
        _Table._resize = resize  # type: ignore[method-assign]
    assert most <= 2_048


def test_tables_left_sparse_are_all_shrunk_in_time() -> None:
    """Shrinks wait their turn, one a ``forget``, but none is left behind: memory comes back."""
    remembered = RememberedTraces(WINDOW, capacity=2_000_000)
    for n in range(100_000):
        remembered.add(n.to_bytes(16, "big"), SECOND)
    remembered.forget(2 * SECOND + WINDOW)
    assert len(remembered) == 0
    for tick in range(256):
        remembered.forget(3 * SECOND + WINDOW + tick)
    assert {len(table.slots) for table in remembered._tables} == {8}  # white box: the memory


# -- the whole, against a model --------------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 9)),
        st.tuples(st.just("advance"), st.integers(0, 12)),
        st.tuples(st.just("forget"), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(window=st.integers(1, 40), capacity=st.integers(1, 5), ops=_ops)
def test_remembered_ids_follow_the_model(
    window: int, capacity: int, ops: list[tuple[str, int]]
) -> None:
    """Model: an id added at ``t`` is forgotten by the first ``forget`` at or after the end
    of its bucket plus the window; past the capacity the oldest go first, counted when their
    bucket began less than the window ago."""
    remembered = RememberedTraces(window, capacity)
    bucket = remembered.bucket_ns
    held: list[tuple[bytes, int]] = []  # (id, end of its bucket), oldest first
    now = 0
    for op, number in ops:
        if op == "advance":
            now += number
        elif op == "forget":
            remembered.forget(now)
            held = [(trace_id, end) for trace_id, end in held if now - end < window]
        else:
            trace_id = number.to_bytes(16, "big")
            held.append((trace_id, now - now % bucket + bucket))
            over = max(0, len(held) - capacity)
            # Counted: those whose bucket began less than the window ago.
            early = sum(now - (end - bucket) < window for _, end in held[:over])
            del held[:over]
            assert remembered.add(trace_id, now) == early
        assert len(remembered) == len(held)
        ids = {trace_id for trace_id, _ in held}
        assert [n.to_bytes(16, "big") in remembered for n in range(10)] == [
            n.to_bytes(16, "big") in ids for n in range(10)
        ]
