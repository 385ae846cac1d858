"""Two name sequences lined up for the rules that read order (``order``, ``composite``'s
ordering, the ordered ``tool_selection`` modes), the calls of each parallel group in any order.

The rule. The calls of one parallel group (two or more calls sharing a group: the model asked
for them at once; ``base.effective_groups``) have no order among themselves: their start
times say only which one the framework started first. So a run keeps a reference's order as
far as the longest common subsequence (LCS) of the two name sequences goes, taken over every
order of each side's groups, a group's members trading places among the places they hold::

    common = max over the orders of both sides' groups of LCS(run, reference)

``line_up`` computes it, and one order of each side that reaches it: the order a finding
shows, and the one the exact comparisons read (two sides that some orders make equal are
equal as lined up, and their first calls agree when some orders make them agree).

How. With no group of two or more on either side (the usual run) nothing can move:
``line_up`` says so, and the caller takes the plain LCS (``lcs.lcs_length``). Otherwise each
side is cut into blocks, a group or one call alone, and ``lcs.best_walk`` pairs them (exact
within its budgets, an upper bound past them: it says how, and why a bound never pages a
run that kept its order). Before it, equal leading and trailing blocks are paired whole (a
shadow pair that issued the same calls costs nothing: pairing them is never worse, by the
exchange ``lcs`` gives), and calls of a name the other side never made are left out (they
pair with nothing).

Groups whose members are not next to each other (calls of another agent, running meanwhile,
between them) are read as one block from their first member to their last, merged with the
groups they overlap: that allows more orders than the rule does (the orders shown may be
such), so ``common`` is an upper bound there (``Lineup.exact`` is false), never below the
rule's value, and errs the same way as past the budgets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from toolwatch.evaluation.lcs import MAX_MEETS, MAX_WORK, Step, best_walk

__all__ = ["Lineup", "line_up"]


@dataclass(frozen=True, slots=True)
class Lineup:
    """Two sides lined up: ``actual`` and ``reference`` are each side's indexes in the order
    read (each group's members among their own places), ``common`` the LCS over every order
    of each side's groups; ``exact`` is false where it is an upper bound instead (see the
    module docstring). The orders shown keep ``common`` names in common when ``exact``."""

    actual: tuple[int, ...]
    reference: tuple[int, ...]
    common: int
    exact: bool


def line_up(
    actual: Sequence[str],
    actual_groups: Sequence[int | None],
    reference: Sequence[str],
    reference_groups: Sequence[int | None],
    *,
    meets: int = MAX_MEETS,
    work: int = MAX_WORK,
) -> Lineup | None:
    """``actual`` and ``reference`` lined up (see the module docstring); ``None`` when neither
    side has a group of two or more (both as given, their plain LCS). ``meets`` and
    ``work``: the budgets of ``lcs.best_walk``."""
    cut_actual = _blocks(actual_groups)
    cut_reference = _blocks(reference_groups)
    if cut_actual is None and cut_reference is None:
        return None
    pure = (cut_actual is None or cut_actual[1]) and (cut_reference is None or cut_reference[1])
    blocks_a = _singles(len(actual)) if cut_actual is None else cut_actual[0]
    blocks_b = _singles(len(reference)) if cut_reference is None else cut_reference[0]
    ids: dict[str, int] = {}
    ids_a = [ids.setdefault(name, len(ids)) for name in actual]
    ids_b = [ids.setdefault(name, len(ids)) for name in reference]
    held_a = [tuple(sorted(ids_a[i] for i in block)) for block in blocks_a]
    held_b = [tuple(sorted(ids_b[i] for i in block)) for block in blocks_b]
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
    order_a, order_b = _arrange(blocks_a, ids_a, blocks_b, ids_b, steps, head=head, tail=tail)
    return Lineup(tuple(order_a), tuple(order_b), ends + walk.common, pure and walk.exact)


def _singles(count: int) -> list[list[int]]:
    return [[i] for i in range(count)]


def _blocks(groups: Sequence[int | None]) -> tuple[list[list[int]], bool] | None:
    """The places cut into blocks: a group (from its first member to its last, merged with the
    groups that overlap it) or one call alone; and whether every block holds one group and
    nothing else. ``None`` when no group has two members."""
    last: dict[int, int] = {}
    size: dict[int, int] = {}
    for i, group in enumerate(groups):
        if group is not None:
            last[group] = i
            size[group] = size.get(group, 0) + 1
    if all(count < 2 for count in size.values()):
        return None
    blocks: list[list[int]] = []
    pure = True
    i = 0
    while i < len(groups):
        group = groups[i]
        if group is None or size[group] < 2:
            blocks.append([i])
            i += 1
            continue
        end = last[group]
        for j in range(i + 1, len(groups)):
            if j > end:
                break
            other = groups[j]
            if other != group:
                pure = False  # a call of another group, or of none, among the members
                if other is not None and last[other] > end:
                    end = last[other]
        blocks.append(list(range(i, end + 1)))
        i = end + 1
    return blocks, pure


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
