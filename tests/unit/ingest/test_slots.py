"""Request slots: taken before a body is read, given back once the request is answered."""

from __future__ import annotations

import pytest

from toolwatch.ingest.slots import RequestSlots


def test_slots_run_out_at_the_limit_and_come_back_when_given() -> None:
    slots = RequestSlots(2)
    assert [slots.take(), slots.take(), slots.take()] == [True, True, False]
    assert slots.in_use == 2  # the refused take took nothing
    slots.give()
    assert (slots.in_use, slots.take(), slots.take()) == (1, True, False)


def test_giving_back_a_slot_never_taken_is_a_bug_not_a_free_slot() -> None:
    slots = RequestSlots(1)
    with pytest.raises(RuntimeError, match="never taken"):
        slots.give()
    assert (slots.in_use, slots.take(), slots.take()) == (0, True, False)


@pytest.mark.parametrize("limit", [0, -3])
def test_a_limit_below_one_is_refused(limit: int) -> None:
    with pytest.raises(ValueError, match=f"at least 1, got {limit}"):
        RequestSlots(limit)
