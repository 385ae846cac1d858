"""Two name sequences lined up for the rules that read order (``order``, ``composite``'s
ordering, the ordered ``tool_selection`` modes), the calls of each parallel group in any order.

The rule. The calls of one parallel group (two or more calls sharing a group: the model asked
for them at once; ``base.effective_groups``) have no order among themselves: their start
times say only which one the framework started first. So a run keeps a reference's order as
far as the longest common subsequence (LCS) of the two name sequences goes, taken over every
order of each side's groups, a group's members trading places among the places they hold
(no other call moves)::

    common = max over the orders of both sides' groups of LCS(run, reference)

``line_up`` computes it, and one order of each side that the rule allows: the order a finding
shows, and the one the exact comparisons read (two sides that some orders make equal are
equal as lined up, but for the limit on split groups below, and their first calls agree
when some orders make them agree).

How. With no group of two or more on either side (the usual run) nothing can move:
``line_up`` says so, and the caller takes the plain LCS (``lcs.lcs_length``). Otherwise each
side is cut into blocks, a group whose members stand next to each other or one call alone,
and ``lcs.best_walk`` pairs them (exact within its budgets, an upper bound past them: it says
how, and why a bound never pages a run that kept its order). Before it, equal leading and
trailing blocks are paired whole (a shadow pair that issued the same calls costs nothing:
pairing them is never worse, by the exchange ``lcs`` gives), and calls of a name the other
side never made are left out (they pair with nothing).

Split groups. A group whose members are not next to each other (calls of another agent,
running meanwhile, between them) is not a block: its members trade places among their own
places only. Each assignment of them to those places (distinct by names), on both sides
together, is lined up with those places as calls alone, and the best taken: exact, up to
``MAX_ARRANGEMENTS`` assignments (fewer for long runs), the budgets shared among them. The
orders shown are those of an assignment whose first calls agree when some do, keeping the
most in common among those: where no assignment does both, they keep fewer than
``common`` (mode ``first`` reads them, and a ``first`` missed where the rule allows it
pages critical). Past that limit ``common`` is a bound, the least of the multiset overlap,
the line-up of the sides with each place of a split group written out as the group's
distinct names (every assignment is a subsequence of that, which can only pair more), and
the line-up with each split group read as one block from its first member to its last,
merged with what it overlaps (every order the rule allows is one of that block's). The
orders shown then start from the calls as given, the first place of a split group taking
a member that agrees with the other side's first call when one can, and try the
assignments of one split group at a time, the others held, within the limit: their first
calls agree when some orders make them; sides that some orders make equal are found equal
in practice, not always.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from toolwatch.evaluation.blocks import Lined, Side, line_blocks
from toolwatch.evaluation.lcs import MAX_MEETS, MAX_WORK, overlap

__all__ = ["MAX_ARRANGEMENTS", "Lineup", "line_up"]

#: Assignments of the split groups' members to their places tried, both sides together
#: (each a line-up with its share of the budgets), for runs of up to 60 calls a side (fewer
#: for longer runs: ``_ARRANGED_CALLS``); past it, a bound. 48: a split group of four tools
#: and a split pair, or up to five split pairs, or two split groups of three.
MAX_ARRANGEMENTS: Final = 48
#: Calls lined up at most over the assignments tried (each line-up costs a few
#: microseconds a call beyond its budgets): fewer assignments for long runs.
_ARRANGED_CALLS: Final = 6_000


@dataclass(frozen=True, slots=True)
class Lineup:
    """Two sides lined up: ``actual`` and ``reference`` are each side's indexes in the order
    read (each group's members among their own places), ``common`` the LCS over every order
    of each side's groups; ``exact`` is false where it is an upper bound instead (see the
    module docstring). The orders shown keep ``common`` names in common when ``exact``,
    unless a split group makes that and agreeing first calls exclude each other."""

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
    arrangements: int = MAX_ARRANGEMENTS,
) -> Lineup | None:
    """``actual`` and ``reference`` lined up (see the module docstring); ``None`` when neither
    side has a group of two or more (both as given, their plain LCS). ``meets`` and
    ``work``: the budgets of ``lcs.best_walk``; ``arrangements``: of split groups."""
    if not _any_group(actual_groups) and not _any_group(reference_groups):
        return None
    ids: dict[str, int] = {}
    a = _cut([ids.setdefault(name, len(ids)) for name in actual], actual_groups)
    b = _cut([ids.setdefault(name, len(ids)) for name in reference], reference_groups)
    tries = max(1, min(arrangements, _ARRANGED_CALLS // (len(a.ids) + len(b.ids))))
    count = _count(a, tries + 1) * _count(b, tries + 1)
    if count > tries:
        return _past_arrangements(a, b, meets=meets, work=work, tries=tries)
    best = _Best()
    arranged_b = _arrangements(b)
    for places_a in _arrangements(a):
        for places_b in arranged_b:
            lined = line_blocks(a, places_a, b, places_b, meets=meets // count, work=work // count)
            best.offer(a, places_a, b, places_b, lined)
    return Lineup(best.actual, best.reference, best.common, best.exact)


class _Best:
    """Of the line-ups tried, the one to show: first calls agreeing if any line-up's do, and
    keeping the most in common among those; and the most ``common`` of all, exact if all
    are."""

    __slots__ = ("actual", "agree", "common", "exact", "found", "reference")

    def __init__(self) -> None:
        self.actual: tuple[int, ...] = ()
        self.reference: tuple[int, ...] = ()
        self.agree = False
        self.found = -1
        self.common = 0
        self.exact = True

    def offer(
        self, a: Side, places_a: list[int], b: Side, places_b: list[int], lined: Lined
    ) -> bool:
        """Take ``lined`` (of sides ``a`` and ``b`` so arranged) in; whether it is shown."""
        self.common = max(self.common, lined.common)
        self.exact = self.exact and lined.exact
        actual = tuple(places_a[p] for p in lined.order_a)
        reference = tuple(places_b[p] for p in lined.order_b)
        agree = _agree(a.ids, actual, b.ids, reference)
        if (agree, lined.found) <= (self.agree, self.found):
            return False
        self.actual, self.reference, self.agree, self.found = actual, reference, agree, lined.found
        return True


def _any_group(groups: Sequence[int | None]) -> bool:
    """Whether a group has two members."""
    seen: set[int] = set()
    for group in groups:
        if group is not None:
            if group in seen:
                return True
            seen.add(group)
    return False


def _cut(ids: list[int], groups: Sequence[int | None]) -> Side:
    """A side cut into blocks: a group of two or more members standing together, or one
    call; and the groups whose members do not (split)."""
    places: dict[int, list[int]] = {}
    for i, group in enumerate(groups):
        if group is not None:
            places.setdefault(group, []).append(i)
    blocks: list[list[int]] = []
    split = [held for held in places.values() if len(held) > 1 and held[-1] - held[0] >= len(held)]
    i = 0
    while i < len(ids):
        group = groups[i]
        held = places.get(group) if group is not None else None
        if held is not None and len(held) > 1 and held[-1] - held[0] < len(held):
            blocks.append(held)
            i = held[-1] + 1
        else:
            blocks.append([i])
            i += 1
    return Side(ids, blocks, split)


def _count(side: Side, most: int) -> int:
    """How many assignments of its split groups' members to their places a side has
    (distinct by names), counted up to ``most``."""
    count = 1
    for held in side.split:
        count = min(most, count * _assignments(side, held))
    return count


def _assignments(side: Side, held: list[int]) -> int:
    """How many distinct sequences of names the members at places ``held`` make."""
    names: dict[int, int] = {}
    total = 1
    for k, place in enumerate(held, 1):
        x = side.ids[place]
        names[x] = names.get(x, 0) + 1
        total = total * k // names[x]  # the multinomial, one member at a time
    return total


def _arrangements(side: Side) -> list[list[int]]:
    """Every assignment of the split groups' members to their places (distinct by names):
    for each, the call at each place."""
    found = [list(range(len(side.ids)))]
    for held in side.split:
        sequences = _sequences(side, held)
        found = [_assigned(side, places, held, names) for places in found for names in sequences]
    return found


def _sequences(side: Side, held: list[int]) -> list[list[int]]:
    """The distinct sequences of names of the members at places ``held``."""
    counts: dict[int, int] = {}
    for place in held:
        counts[side.ids[place]] = counts.get(side.ids[place], 0) + 1
    return _distinct_orders(sorted(counts), counts)


def _assigned(side: Side, places: list[int], held: list[int], names: list[int]) -> list[int]:
    """``places`` with the members at places ``held`` making the sequence ``names``, the
    members of each name in the order they were called."""
    members: dict[int, list[int]] = {}
    for call in sorted(places[place] for place in held):
        members.setdefault(side.ids[call], []).append(call)
    moved = places[:]
    taken: dict[int, int] = {}
    for place, x in zip(held, names, strict=True):
        k = taken.get(x, 0)
        moved[place] = members[x][k]
        taken[x] = k + 1
    return moved


def _distinct_orders(names: list[int], counts: dict[int, int]) -> list[list[int]]:
    """Every distinct sequence holding each of ``names`` as often as ``counts`` says."""
    if sum(counts.values()) == 0:
        return [[]]
    orders: list[list[int]] = []
    for x in names:
        if counts[x]:
            counts[x] -= 1
            orders.extend([x, *rest] for rest in _distinct_orders(names, counts))
            counts[x] += 1
    return orders


def _agree(
    ids_a: list[int], order_a: tuple[int, ...], ids_b: list[int], order_b: tuple[int, ...]
) -> bool:
    """Whether the first calls of two orders agree (or both sides are empty)."""
    if not order_a or not order_b:
        return not order_a and not order_b
    return ids_a[order_a[0]] == ids_b[order_b[0]]


def _past_arrangements(a: Side, b: Side, *, meets: int, work: int, tries: int) -> Lineup:
    """Past ``tries`` assignments: the bound (half the budgets for the sides written out, a
    quarter for them merged) and the orders shown (see the module docstring), found by
    trying the assignments of one split group at a time, the others held, ``tries``
    line-ups at most, sharing the last quarter."""
    bound = overlap(a.ids, b.ids)
    for wider_a, wider_b, share in ((_written(a), _written(b), 2), (_merged(a), _merged(b), 4)):
        whole_a, whole_b = list(range(len(wider_a.ids))), list(range(len(wider_b.ids)))
        lined = line_blocks(
            wider_a, whole_a, wider_b, whole_b, meets=meets // share, work=work // share
        )
        bound = min(bound, lined.common)
    meets, work = meets // (4 * tries), work // (4 * tries)
    sides = (a, b)
    places = [_leading(a, b), _leading(b, a)]
    best = _Best()
    lined = line_blocks(a, places[0], b, places[1], meets=meets, work=work)
    best.offer(a, places[0], b, places[1], lined)
    tries -= 1
    split = [(0, held) for held in a.split] + [(1, held) for held in b.split]
    for which, held in split * 2:  # twice round
        side = sides[which]
        if best.found >= bound or _assignments(side, held) > tries:
            continue
        for names in _sequences(side, held):
            tried = places[:]
            tried[which] = _assigned(side, places[which], held, names)
            lined = line_blocks(a, tried[0], b, tried[1], meets=meets, work=work)
            tries -= 1
            if best.offer(a, tried[0], b, tried[1], lined):
                places = tried
    return Lineup(best.actual, best.reference, max(bound, best.found), best.found >= bound)


def _leading(side: Side, other: Side) -> list[int]:
    """The calls as given, but for the first place of a split group: a member with the least
    name both sides can start with, when they can (both sides choose the same)."""
    places = list(range(len(side.ids)))
    wanted = _firsts(side) & _firsts(other)
    if not wanted:
        return places
    x = min(wanted)
    for held in side.split:
        if held[0] == 0:
            k = next(place for place in held if side.ids[place] == x)
            places[0], places[k] = k, 0
    return places


def _firsts(side: Side) -> set[int]:
    """The names a side's first call can have: any of its group's."""
    if not side.ids:
        return set()
    for held in side.split:
        if held[0] == 0:
            return {side.ids[place] for place in held}
    return {side.ids[place] for place in side.blocks[0]}


def _written(side: Side) -> Side:
    """The side with each place of a split group written out as the group's distinct names,
    in sequence (every assignment of the group is a subsequence of that)."""
    names: dict[int, list[int]] = {}
    for held in side.split:
        distinct = sorted({side.ids[place] for place in held})
        for place in held:
            names[place] = distinct
    ids: list[int] = []
    blocks: list[list[int]] = []
    for block in side.blocks:
        written = names.get(block[0]) if len(block) == 1 else None
        if written is None:
            blocks.append(list(range(len(ids), len(ids) + len(block))))
            ids.extend(side.ids[place] for place in block)
        else:
            for x in written:
                blocks.append([len(ids)])
                ids.append(x)
    return Side(ids, blocks, [])


def _merged(side: Side) -> Side:
    """The side with each split group read as one block from its first member to its last,
    merged with the blocks and groups it overlaps (every order the rule allows is an order
    of that block)."""
    reach = list(range(len(side.ids)))  # the last place a place's block or group reaches
    for block in side.blocks:
        for place in block:
            reach[place] = block[-1]
    for held in side.split:
        for place in held:
            reach[place] = max(reach[place], held[-1])
    blocks: list[list[int]] = []
    start = 0
    while start < len(reach):
        end, place = reach[start], start
        while place <= end:
            end = max(end, reach[place])
            place += 1
        blocks.append(list(range(start, end + 1)))
        start = end + 1
    return Side(side.ids, blocks, [])
