from hypothesis import given
from hypothesis import strategies as st

from sie.engine.batcher import Batcher, BatchLimits, Entry, split_by_padded_cost


def entry(cost: int, at: float = 0.0, group: str = "g", cancelled: bool = False) -> Entry[int]:
    return Entry(group, cost, at, cost, lambda: cancelled)


def test_waits_until_deadline_then_releases():
    batcher: Batcher[int] = Batcher(BatchLimits(max_tokens=100, max_items=10, max_wait_s=0.01))
    batcher.add(entry(5, at=1.0))
    assert batcher.next_batch(1.005) is None
    assert batcher.deadline() == 1.01
    batch = batcher.next_batch(1.01)
    assert batch is not None and [e.cost for e in batch] == [5]
    assert len(batcher) == 0


def test_flush_releases_at_once():
    batcher: Batcher[int] = Batcher(BatchLimits(100, 10, 10.0))
    batcher.add(entry(5))
    assert batcher.next_batch(0.0, flush=True) is not None


def test_full_by_tokens_releases_without_waiting_and_keeps_the_rest():
    batcher: Batcher[int] = Batcher(BatchLimits(max_tokens=10, max_items=10, max_wait_s=10.0))
    for cost in (4, 4, 4):
        batcher.add(entry(cost))
    batch = batcher.next_batch(0.0)
    assert batch is not None and [e.cost for e in batch] == [4, 4]
    assert len(batcher) == 1


def test_full_by_count():
    batcher: Batcher[int] = Batcher(BatchLimits(max_tokens=1000, max_items=2, max_wait_s=10.0))
    for cost in (1, 2, 3):
        batcher.add(entry(cost))
    assert [e.cost for e in batcher.next_batch(0.0) or []] == [1, 2]


def test_sorted_by_cost_and_groups_never_mix():
    batcher: Batcher[int] = Batcher(BatchLimits(100, 10, 0.0))
    for cost, group in ((9, "a"), (3, "b"), (1, "a"), (5, "a")):
        batcher.add(entry(cost, group=group))
    first = batcher.next_batch(0.0)
    assert [e.cost for e in first or []] == [1, 5, 9]
    assert {e.group for e in first or []} == {"a"}
    assert [e.cost for e in batcher.next_batch(0.0) or []] == [3]


def test_cancelled_entries_are_skipped():
    batcher: Batcher[int] = Batcher(BatchLimits(100, 10, 0.0))
    batcher.add(entry(1, cancelled=True))
    batcher.add(entry(2))
    batcher.add(entry(3, cancelled=True))
    assert [e.cost for e in batcher.next_batch(0.0) or []] == [2]
    assert batcher.next_batch(0.0) is None


def test_an_item_over_budget_still_runs_alone():
    batcher: Batcher[int] = Batcher(BatchLimits(max_tokens=10, max_items=10, max_wait_s=0.0))
    batcher.add(entry(50))
    batcher.add(entry(1))
    assert [e.cost for e in batcher.next_batch(0.0) or []] == [50]


@given(
    st.lists(st.tuples(st.integers(1, 300), st.sampled_from("abc"), st.booleans()), max_size=60),
    st.integers(1, 600),
    st.integers(1, 16),
)
def test_every_live_entry_leaves_exactly_once_within_limits(specs, max_tokens, max_items):
    batcher: Batcher[int] = Batcher(BatchLimits(max_tokens, max_items, 0.0))
    entries = [Entry(g, c, 0.0, i, (lambda dead=dead: dead)) for i, (c, g, dead) in enumerate(specs)]
    for e in entries:
        batcher.add(e)
    seen: list[int] = []
    while (batch := batcher.next_batch(0.0)) is not None:
        assert len(batch) <= max_items
        assert len(batch) == 1 or sum(e.cost for e in batch) <= max_tokens
        assert len({e.group for e in batch}) == 1
        assert [e.cost for e in batch] == sorted(e.cost for e in batch)
        seen.extend(e.payload for e in batch)
    assert sorted(seen) == [i for i, (_, _, dead) in enumerate(specs) if not dead]


@given(st.lists(st.integers(1, 512), max_size=100), st.integers(1, 4096))
def test_padded_chunks_cover_everything_and_fit(costs, budget):
    costs = sorted(costs)
    chunks = split_by_padded_cost(costs, budget)
    assert [i for chunk in chunks for i in chunk] == list(range(len(costs)))
    for chunk in chunks:
        assert len(chunk) == 1 or costs[chunk[-1]] * len(chunk) <= budget


def test_padding_split_separates_short_from_long():
    costs = [10] * 8 + [250] * 2
    chunks = split_by_padded_cost(costs, max_tokens=16384)
    assert [list(c) for c in chunks] == [list(range(8)), [8, 9]]


def test_padding_split_keeps_similar_lengths_together():
    assert split_by_padded_cost([100, 101, 102, 103], max_tokens=16384) == [range(0, 4)]


@given(st.lists(st.integers(1, 512), min_size=1, max_size=64), st.integers(1, 4096))
def test_padding_split_is_no_worse_than_one_chunk_or_singletons(costs, budget):
    costs = sorted(costs)
    chunks = split_by_padded_cost(costs, budget)

    def work(parts):
        return sum(costs[c[-1]] * len(c) + 128 for c in parts)

    singletons = [range(i, i + 1) for i in range(len(costs))]
    assert work(chunks) <= work(singletons)
    if costs[-1] * len(costs) <= budget:
        assert work(chunks) <= work([range(len(costs))])


def test_batch_is_the_oldest_plus_its_closest_lengths():
    batcher: Batcher[int] = Batcher(BatchLimits(max_tokens=10_000, max_items=3, max_wait_s=0.0))
    for cost in (50, 200, 10, 48, 199, 52, 11):
        batcher.add(entry(cost))
    assert [e.cost for e in batcher.next_batch(0.0) or []] == [48, 50, 52]
    # Next oldest is 200: its closest neighbours in length are 199 and the short 11 or 10 (smaller spread: 11).
    assert [e.cost for e in batcher.next_batch(0.0) or []] == [11, 199, 200]
    assert [e.cost for e in batcher.next_batch(0.0) or []] == [10]


@given(
    st.lists(st.tuples(st.integers(1, 300), st.sampled_from("ab"), st.booleans()), min_size=1, max_size=20),
    st.integers(1, 2000),
    st.integers(1, 24),
)
def test_a_flush_takes_what_the_choice_would(specs, max_tokens, max_items):
    """A flush that finds the whole queue fits one batch takes it all without choosing (the idle
    device's path); it must be the very batch the choice by length would have made."""

    def first(flush: bool) -> list[int]:
        batcher: Batcher[int] = Batcher(BatchLimits(max_tokens, max_items, 0.0))
        for i, (cost, group, dead) in enumerate(specs):
            batcher.add(Entry(group, cost, 0.0, i, (lambda dead=dead: dead)))
        batch = batcher.next_batch(0.0, flush=flush)
        return [e.payload for e in batch or []]

    assert first(flush=True) == first(flush=False)
