"""Two sides cut into blocks, lined up: the core of ``lineup`` (which states the rule, cuts
the blocks and assigns the members of split groups to their places).

A side is its calls as name ids and its blocks (places: calls of one group standing next
to each other, the whole group or a run of a split group's places, or one call).
``line_blocks`` reads the calls at each side's places as an assignment says, pairs equal
leading and trailing blocks whole (a shadow pair that issued the same calls costs
nothing: pairing them is never worse, by the exchange ``lcs`` gives), leaves out calls of
a name the other side never made (they pair with nothing), has ``lcs.best_walk`` pair the
rest, and shows each side's places in the order the walk pairs them.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolwatch.evaluation.lcs import Step, best_walk

__all__ = ["Lined", "Side", "line_blocks"]


@dataclass(frozen=True, slots=True)
class Side:
    """One side's calls as name ids, cut into ``blocks`` (lists of places: calls of one group
    standing together, or one call), and the places of each ``split`` group."""

    ids: list[int]
    blocks: list[list[int]]
    split: list[list[int]]


@dataclass(frozen=True, slots=True)
class Lined:
    """Two arranged sides lined up: the orders of their places, ``common`` (exact or a
    bound) and ``found``, what the orders keep in common."""

    order_a: list[int]
    order_b: list[int]
    common: int
    exact: bool
    found: int


def line_blocks(
    a: Side, places_a: list[int], b: Side, places_b: list[int], *, meets: int, work: int
) -> Lined:
    """Two sides lined up, with the calls at each place ``places_a`` and ``places_b`` say
    (their split groups so assigned: a block per run of their places), within the budgets."""
    ids_a = [a.ids[k] for k in places_a]
    ids_b = [b.ids[k] for k in places_b]
    held_a = [tuple(sorted(ids_a[i] for i in block)) for block in a.blocks]
    held_b = [tuple(sorted(ids_b[i] for i in block)) for block in b.blocks]
    head, tail = _equal_ends(held_a, held_b)
    middle_a = range(head, len(held_a) - tail)
    middle_b = range(head, len(held_b) - tail)
    core_a, at_a = _cores(held_a, middle_a, held_b, middle_b)
    core_b, at_b = _cores(held_b, middle_b, held_a, middle_a)
    walk = best_walk(core_a, core_b, meets, work)
    ends = sum(len(held_a[k]) for k in range(head)) + sum(
        len(held_a[k]) for k in range(len(held_a) - tail, len(held_a))
    )
    steps = [(at_a[i], at_b[j], paired) for i, j, paired in walk.steps]
    order_a, order_b = _arrange(a.blocks, ids_a, b.blocks, ids_b, steps, head=head, tail=tail)
    found = ends + sum(len(step[2]) for step in steps)
    return Lined(order_a, order_b, ends + walk.common, walk.exact, found)


def _equal_ends(a: list[tuple[int, ...]], b: list[tuple[int, ...]]) -> tuple[int, int]:
    """How many leading and trailing blocks hold the same names on both sides. Unless the
    first blocks are equal, the trailing ones leave both first blocks to the walk, whose
    first cell pairs what they share: the first calls agree when some orders make them."""
    most = min(len(a), len(b))
    head = 0
    while head < most and a[head] == b[head]:
        head += 1
    tail = 0
    rest = most - head if head else most - 1
    while tail < rest and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    return head, tail


def _cores(
    held: list[tuple[int, ...]], middle: range, other: list[tuple[int, ...]], other_middle: range
) -> tuple[list[tuple[int, ...]], list[int]]:
    """The blocks of ``middle`` without the names ``other_middle`` lacks (they pair with
    nothing), empty ones dropped; and each kept block's index."""
    present: set[int] = set()
    for k in other_middle:
        present.update(other[k])
    cores: list[tuple[int, ...]] = []
    at: list[int] = []
    for k in middle:
        core = tuple(x for x in held[k] if x in present)
        if core:
            cores.append(core)
            at.append(k)
    return cores, at


def _arrange(
    blocks_a: list[list[int]],
    ids_a: list[int],
    blocks_b: list[list[int]],
    ids_b: list[int],
    walk: list[Step],
    *,
    head: int,
    tail: int,
) -> tuple[list[int], list[int]]:
    """Both sides' indexes in the order ``walk`` pairs them: in each block the calls paired,
    in the walk's order (within a cell, the run's), then the others in their own order. The
    ``head`` and ``tail`` blocks are paired whole, the reference's after the run's."""
    paired_a: dict[int, list[int]] = {}
    paired_b: dict[int, list[int]] = {}
    unpaired_a: dict[int, dict[int, list[int]]] = {}
    unpaired_b: dict[int, dict[int, list[int]]] = {}
    used_a: set[int] = set()
    used_b: set[int] = set()
    for i, j, names in walk:
        if not names:
            continue
        taken_a = _take(unpaired_a, blocks_a, i, ids_a, names)
        taken_b = _take(unpaired_b, blocks_b, j, ids_b, names)
        used_a.update(taken_a)
        used_b.update(taken_b)
        paired_a.setdefault(i, []).extend(taken_a)
        paired_b.setdefault(j, []).extend(_follow(taken_a, ids_a, taken_b, ids_b))
    order_a: list[int] = []
    order_b: list[int] = []
    for k in range(head):
        order_a.extend(blocks_a[k])
        order_b.extend(_follow(blocks_a[k], ids_a, blocks_b[k], ids_b))
    for k in range(head, len(blocks_a) - tail):
        _append_block(order_a, blocks_a[k], paired_a.get(k), used_a)
    for k in range(head, len(blocks_b) - tail):
        _append_block(order_b, blocks_b[k], paired_b.get(k), used_b)
    for k in range(tail, 0, -1):
        order_a.extend(blocks_a[-k])
        order_b.extend(_follow(blocks_a[-k], ids_a, blocks_b[-k], ids_b))
    return order_a, order_b


def _take(
    unpaired: dict[int, dict[int, list[int]]],
    blocks: list[list[int]],
    index: int,
    ids: list[int],
    names: tuple[int, ...],
) -> list[int]:
    """The first calls of block ``index`` not yet paired with ``names`` (ids, repeated as
    often as wanted), in the block's order. ``unpaired``: each block's calls left, by name,
    last first, built the first time the block pairs."""
    left = unpaired.get(index)
    if left is None:
        left = unpaired[index] = {}
        for k in reversed(blocks[index]):
            left.setdefault(ids[k], []).append(k)
    taken = [left[x].pop() for x in names]
    taken.sort()
    return taken


def _follow(lead: list[int], ids_lead: list[int], block: list[int], ids: list[int]) -> list[int]:
    """``block`` (the same names as ``lead``) in ``lead``'s order of names; each name's calls
    in their own order."""
    if len(block) == 1:
        return block
    by_name: dict[int, list[int]] = {}
    for k in reversed(block):
        by_name.setdefault(ids[k], []).append(k)
    return [by_name[ids_lead[k]].pop() for k in lead]


def _append_block(
    order: list[int], block: list[int], paired: list[int] | None, used: set[int]
) -> None:
    """``block``'s paired calls, then its others in their own order."""
    if paired is None:
        order.extend(block)
        return
    order.extend(paired)
    order.extend(k for k in block if k not in used)
