"""Two name sequences lined up for the rules that read order (``order``, ``composite``'s
ordering, the ordered ``tool_selection`` modes), the calls of each parallel group in any order.

The rule. The calls of one parallel group (two or more calls sharing a group: the model asked
for them at once; ``concurrency.effective_groups``) have no order among themselves: their start
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
side is cut into blocks, calls of one group standing next to each other (the whole group,
or a run of a split group's places, below) or one call alone, and ``lcs.best_walk`` pairs
them (exact within its budgets, an upper bound past them: it says
how, and why a bound never pages a run that kept its order). Before it, equal leading and
trailing blocks are paired whole (a shadow pair that issued the same calls costs nothing:
pairing them is never worse, by the exchange ``lcs`` gives), and calls of a name the other
side never made are left out (they pair with nothing).

Split groups. A group whose members are not all next to each other (calls of another
agent, running meanwhile, between them) is not one block: its members trade places among
their own places only. Its places fall in runs of places next to each other, and a run is
a block: whichever members it holds can stand there in any order. So an assignment of the
members is which names each run holds (four tools split two and two: 6 assignments, not
24 orders of the members), and each, on both sides together, is lined up with the runs as
blocks, and the best taken: exact, up to ``MAX_ARRANGEMENTS`` assignments (fewer for long
runs), the budgets shared among them. Past that, while each side alone has at most that
many, a search, exact too: each assignment of a side is bounded (as below) against the
other side written out and merged, and the pairs of assignments are lined up from the
highest bound down, but for a pair whose bound the orders shown already keep (and whose
first calls cannot agree where theirs do not): none of those could raise ``common`` or
change the orders shown. It lines up ``MAX_ARRANGEMENTS`` pairs at most, with half the
budgets, and two line-ups per assignment for the bounds; past that, the bound below, with
the other half. The orders shown are those of an assignment whose first calls agree when
some do, keeping the most in common among those: where no assignment does both, they keep
fewer than ``common`` (mode ``first`` reads them, and a ``first`` missed where the rule
allows it pages critical). Past those limits ``common`` is a bound, the least of the
multiset overlap, the line-up of the sides with each place of a split group written out
as the group's distinct names (every assignment is a subsequence of that, which can only
pair more), and the line-up with each split group read as one block from its first member
to its last, merged with what it overlaps (every order the rule allows is one of that
block's). The orders shown then start from the calls as given, the first place of a split
group taking a member that agrees with the other side's first call when one can, and try
the assignments of one split group at a time, the others held, within the limit: their
first calls agree when some orders make them; sides that some orders make equal are found
equal in practice, not always.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from toolwatch.evaluation.blocks import Lined, Side, line_blocks
from toolwatch.evaluation.lcs import MAX_MEETS, MAX_WORK, overlap

__all__ = ["MAX_ARRANGEMENTS", "Lineup", "line_up"]

#: Assignments of the split groups' members to their runs of places tried, both sides
#: together (each a line-up with its share of the budgets), for runs of up to 60 calls a
#: side (fewer for longer runs: ``_ARRANGED_CALLS``); past it, the search (as many pairs
#: lined up at most, besides two line-ups per assignment for its bounds), then a bound. 48:
#: a split group of four tools each apart (24) and a split pair, or up to five split
#: pairs, or two split groups of three each apart (36) with one on the other side.
MAX_ARRANGEMENTS: Final = 48
#: Calls lined up at most over the assignments tried (each line-up costs a few
#: microseconds a call beyond its budgets): fewer assignments for long runs. The search
#: past them lines up a few times as many at most (its bounds, then a bound's line-ups).
_ARRANGED_CALLS: Final = 6_000
#: The most calls (both sides) the search past the assignments is tried on: short runs,
#: where its line-ups stay exact within their share of the budgets and cost little. Longer
#: ones go to the bound with the whole budgets, where the search's shares of them would
#: run out, each pair's line-up a looser bound (30 calls: 30 of 30 kept, for 26).
_SEARCHED_CALLS: Final = 24


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
    count_a, count_b = _count(a, tries + 1), _count(b, tries + 1)
    count = count_a * count_b
    if count > tries:
        small = len(a.ids) + len(b.ids) <= _SEARCHED_CALLS
        if small and count_a <= tries and count_b <= tries:
            searched = _searched(a, b, meets=meets // 2, work=work // 2, tries=tries)
            if searched is not None:
                return searched
        return _past_arrangements(a, b, meets=meets, work=work, tries=tries)
    best = _Best()
    arranged_b = _arrangements(b, tries)
    for places_a in _arrangements(a, tries):
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
    """A side cut into blocks: calls of one group of two or more standing next to each other
    (a whole group, or a run of a split group's places), or one call; and the places of
    the groups whose members do not all stand together (split)."""
    places: dict[int, list[int]] = {}
    for i, group in enumerate(groups):
        if group is not None:
            places.setdefault(group, []).append(i)
    split = [held for held in places.values() if len(held) > 1 and held[-1] - held[0] >= len(held)]
    blocks: list[list[int]] = []
    i = 0
    while i < len(ids):
        group = groups[i]
        end = i + 1
        if group is not None and len(places[group]) > 1:
            while end < len(ids) and groups[end] == group:
                end += 1
        blocks.append(list(range(i, end)))
        i = end
    return Side(ids, blocks, split)


def _count(side: Side, most: int) -> int:
    """How many assignments of its split groups' members to their places a side has
    (distinct by the names each run of places holds), counted up to ``most``."""
    count = 1
    for held in side.split:
        count = min(most, count * _assignments(side, held, most))
    return count


def _assignments(side: Side, held: list[int], most: int) -> int:
    """How many assignments the members at places ``held`` have (``_sequences``), counted
    up to ``most``."""
    return len(_sequences(side, held, most))


def _arrangements(side: Side, most: int) -> list[list[int]]:
    """Every assignment of the split groups' members to their places (distinct by the names
    each run of places holds), of a side that has at most ``most``: for each, the call at
    each place."""
    found = [list(range(len(side.ids)))]
    for held in side.split:
        sequences = _sequences(side, held, most)
        found = [_assigned(side, places, held, names) for places in found for names in sequences]
    return found


def _sequences(side: Side, held: list[int], most: int) -> list[list[int]]:
    """The sequences of names the members at places ``held`` can make, distinct by the
    names each run of places (next to each other: one block, in any order) holds, each
    run's sorted; the first ``most``."""
    counts: dict[int, int] = {}
    for place in held:
        counts[side.ids[place]] = counts.get(side.ids[place], 0) + 1
    runs: list[int] = []
    for k, place in enumerate(held):
        if k and place == held[k - 1] + 1:
            runs[-1] += 1
        else:
            runs.append(1)
    found: list[list[int]] = []
    _share(sorted(counts), counts, runs, found, most=most, run=0, left=runs[0], least=0, given=[])
    return found


def _share(
    names: list[int],
    counts: dict[int, int],
    runs: list[int],
    found: list[list[int]],
    *,
    most: int,
    run: int,
    left: int,
    least: int,
    given: list[int],
) -> None:
    """Into ``found`` (up to ``most``), every way to give the runs of places (``runs``, their
    sizes) the members ``counts`` has left, ``given`` the names given so far: ``left`` more
    to run ``run``, from ``names[least]`` on (each run's names sorted)."""
    if len(found) >= most:
        return
    if not left:
        run += 1
        if run == len(runs):
            found.append(given[:])
            return
        left, least = runs[run], 0
    for k in range(least, len(names)):
        x = names[k]
        if counts[x]:
            counts[x] -= 1
            given.append(x)
            _share(
                names, counts, runs, found, most=most, run=run, left=left - 1, least=k, given=given
            )
            given.pop()
            counts[x] += 1


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


def _agree(
    ids_a: list[int], order_a: tuple[int, ...], ids_b: list[int], order_b: tuple[int, ...]
) -> bool:
    """Whether the first calls of two orders agree (or both sides are empty)."""
    if not order_a or not order_b:
        return not order_a and not order_b
    return ids_a[order_a[0]] == ids_b[order_b[0]]


def _searched(a: Side, b: Side, *, meets: int, work: int, tries: int) -> Lineup | None:
    """Past ``tries`` assignments of both sides together, within them on each side: each
    assignment of a side bounded against the other side written out and merged (as
    ``_past_arrangements`` bounds), and the pairs of assignments lined up from the highest
    bound down, but for a pair whose bound the orders shown already keep (and whose first
    calls cannot agree, unless theirs do): exact, as lining up every pair. Half the budgets
    for the bounds, half for the pairs; ``None`` past ``tries`` pairs lined up, or at the
    first pair whose line-up is a bound (past its share of the budgets): the whole budgets'
    bound (``_past_arrangements``) is then the tighter."""
    arranged = (_arrangements(a, tries), _arrangements(b, tries))
    wider = ((_written(b), _merged(b)), (_written(a), _merged(a)))
    share = 4 * (len(arranged[0]) + len(arranged[1]))
    bounds: list[list[int]] = [[], []]
    firsts: list[list[set[int]]] = [[], []]
    for which, side in enumerate((a, b)):
        for places in arranged[which]:
            bound = len(side.ids)
            for other in wider[which]:
                whole = list(range(len(other.ids)))
                lined = line_blocks(
                    side, places, other, whole, meets=meets // share, work=work // share
                )
                bound = min(bound, lined.common)
            bounds[which].append(bound)
            firsts[which].append({side.ids[places[p]] for p in side.blocks[0]})
    pairs = sorted(
        ((min(x, y), i, j) for i, x in enumerate(bounds[0]) for j, y in enumerate(bounds[1])),
        key=lambda pair: -pair[0],
    )
    best = _Best()
    left = tries
    for bound, i, j in pairs:
        if bound <= best.found and (best.agree or not firsts[0][i] & firsts[1][j]):
            continue
        if not left:
            return None
        left -= 1
        places_a, places_b = arranged[0][i], arranged[1][j]
        lined = line_blocks(
            a, places_a, b, places_b, meets=meets // (2 * tries), work=work // (2 * tries)
        )
        if not lined.exact:
            return None
        best.offer(a, places_a, b, places_b, lined)
    return Lineup(best.actual, best.reference, best.common, best.exact)


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
        if best.found >= bound or _assignments(side, held, tries + 1) > tries:
            continue
        for names in _sequences(side, held, tries):
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
        written = names.get(block[0])
        if written is None:
            blocks.append(list(range(len(ids), len(ids) + len(block))))
            ids.extend(side.ids[place] for place in block)
        else:
            for _ in block:
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
