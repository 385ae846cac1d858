"""``_parallel_groups`` (plain overlap components, refined by ``overlapping_pairs`` only
where two or more model calls requested a component's calls) groups exactly as the rule
says, pair by pair: two executed calls of one parent are joined iff their tool intervals,
each moved as far as its call is (``_Draft.moved``: another host's span), overlap strictly,
unless both were requested by model calls one strictly after the other; groups are the
transitive closure of that plus the calls one model output requested together
(``shared``)."""

from __future__ import annotations

from assembly_support import ask, llm, tool
from hypothesis import given, settings
from hypothesis import strategies as st

from toolwatch.assembly.calls import CallSite
from toolwatch.assembly.drafts import _Draft, _Request
from toolwatch.assembly.ordering import _parallel_groups


def _components(count: int, pairs: list[tuple[int, int]]) -> list[int | None]:
    leader = list(range(count))

    def find(i: int) -> int:
        while leader[i] != i:
            i = leader[i]
        return i

    for a, b in pairs:
        ra, rb = find(a), find(b)
        leader[max(ra, rb)] = min(ra, rb)
    roots = [find(i) for i in range(count)]
    sizes = {r: roots.count(r) for r in roots}
    return [r if sizes[r] > 1 else None for r in roots]


@st.composite
def cases(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    models = []
    for k in range(draw(st.integers(1, 4))):
        start = draw(st.integers(0, 8))
        end = start + draw(st.sampled_from([0, 0, 1, 2, 3, 5]))
        models.append(llm(100 + k, 1, start, end))
    drafts: list[_Draft] = []
    sites: dict[bytes, CallSite] = {}
    parents: list[bytes | None] = []
    for index in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["both", "both", "span", "request"]))
        model = draw(st.sampled_from(models))
        request = None
        if kind in ("both", "request"):
            request = _Request(model, ask("t", f"c{index}", {}, index), "t", index)
        span = None
        parent = draw(st.sampled_from([b"p1", b"p1", b"p1", b"p2"]))
        if kind in ("both", "span"):
            start = draw(st.integers(0, 10))
            end = start + draw(st.sampled_from([0, 1, 2, 4, 8]))
            span = tool(200 + index, 1, "t", start, end)
            sites[span.span_id] = CallSite(None, None, parent, None)
        draft = _Draft(span, request)
        if span is not None and draw(st.integers(0, 3)) == 0:  # another host's, moved
            draft.moved = draw(st.integers(0, 10)) * 1_000_000
        drafts.append(draft)
        parents.append(parent)
    # Drafts in time order (by the time each is ordered by), as build_calls hands them over.
    drafts.sort(key=lambda d: (d.at, d.origin.span_id))
    # Calls of one model output, grouped (``shared``): by requesting model, requested ones.
    by_model: dict[bytes, list[int]] = {}
    for i, d in enumerate(drafts):
        if d.request is not None and draw(st.booleans()):
            by_model.setdefault(d.request.llm.span_id, []).append(i)
    shared = [m for m in by_model.values() if len(m) > 1]
    return drafts, sites, shared


def _brute(drafts, sites, shared):  # type: ignore[no-untyped-def]
    pairs: list[tuple[int, int]] = []
    n = len(drafts)
    for i in range(n):
        for j in range(i + 1, n):
            a, b = drafts[i], drafts[j]
            if a.span is None or b.span is None:
                continue
            if sites[a.span.span_id].parent != sites[b.span.span_id].parent:
                continue
            # on the clock each is ordered by: moved whole by as much as its call
            a0, a1 = a.at, a.at + max(0, a.span.end_ns - a.span.start_ns)
            b0, b1 = b.at, b.at + max(0, b.span.end_ns - b.span.start_ns)
            if not (a0 < b1 and b0 < a1):
                continue
            if a.request is not None and b.request is not None:
                ma, mb = a.request.llm, b.request.llm
                if ma.span_id != mb.span_id:
                    ma0, ma1 = ma.start_ns, max(ma.start_ns, ma.end_ns)
                    mb0, mb1 = mb.start_ns, max(mb.start_ns, mb.end_ns)
                    if ma1 <= mb0 or mb1 <= ma0:
                        continue  # requested one strictly after the other
            pairs.append((i, j))
    for members in shared:
        for k in members[1:]:
            pairs.append((members[0], k))
    return _components(n, pairs)


@settings(max_examples=500, deadline=None)
@given(cases())
def test_parallel_groups_are_the_rules_components(case) -> None:  # type: ignore[no-untyped-def]
    drafts, sites, shared = case
    assert _parallel_groups(drafts, sites, shared) == _brute(drafts, sites, shared)
