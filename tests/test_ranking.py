"""engine/core/ranking.py's top_ids against a full stable sort, on rows as long as SmolLM2's and Gemma's where it
ranks in two passes (the best of each group, then inside the groups that can hold the n best)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import ranking
from engine.core.ranking import top_ids

NEG_INF = np.float32(-np.inf)


def stable_ranking(scores, n):  # what top_ids must give: highest first, ties to the lower id
    return np.argsort(-scores, kind="stable")[:n].tolist()


@st.composite
def long_rows(draw):
    """A row of 4,096 to 70,000 float32 scores: spread out, or a few values tied many times (ties across groups
    and at the n-th place), with some -inf (banned tokens), a run of tokens tied at the best, or every score
    tied; lengths that leave a partial group at the end."""
    size = draw(st.integers(ranking.GROUPED_FROM, 70_000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["spread", "few values", "all tied", "tied best run"]))
    if kind == "spread":
        row = rng.standard_normal(size).astype(np.float32) * 4
    elif kind == "few values":
        row = rng.choice(np.float32([-3.0, 0.0, 1.5, 2.0, 9.0]), size)
    elif kind == "all tied":
        row = np.full(size, np.float32(draw(st.sampled_from([0.0, 1.0, -np.inf]))))
    else:
        row = rng.standard_normal(size).astype(np.float32)
        start = draw(st.integers(0, size - 1))
        row[start : start + draw(st.integers(1, 3000))] = 8.0
    banned = draw(st.floats(0, 1))
    row[rng.random(size) < banned] = NEG_INF
    return row


@settings(max_examples=150, deadline=None)
@given(scores=long_rows(), n=st.one_of(st.integers(1, 600), st.just(1), st.just(40), st.integers(60_000, 80_000)))
def test_top_ids_on_long_rows_is_a_full_stable_sorts_prefix(scores, n):
    assert top_ids(scores, n).tolist() == stable_ranking(scores, n)


@given(size=st.integers(1, ranking.GROUPED_FROM + 1), n=st.integers(1, 5000), seed=st.integers(0, 2**32 - 1))
def test_top_ids_on_short_rows_is_a_full_stable_sorts_prefix(size, n, seed):
    rng = np.random.default_rng(seed)
    scores = rng.choice(np.float32([-np.inf, -1.0, 0.0, 0.5, 2.0]), size)
    assert top_ids(scores, n).tolist() == stable_ranking(scores, n)


def test_a_gemma_sized_row_is_ranked_inside_a_few_dozen_scores_not_all_262144():
    """The speed-up itself: the first pass leaves about n candidates, not the vocabulary."""
    scores = np.random.default_rng(3).standard_normal(262_144).astype(np.float32)
    ids, values = ranking._group_candidates(scores, 40)
    assert len(ids) < 200 and np.array_equal(values, scores[ids]) and (np.diff(ids) > 0).all()
    assert top_ids(scores, 40).tolist() == stable_ranking(scores, 40)


def test_rows_whose_groups_all_tie_at_their_best_are_ranked_whole_and_still_right():
    scores = np.zeros(49_152, dtype=np.float32)
    scores[::7] = 1.0  # every group's best is 1.0: the first pass would keep them all
    assert ranking._group_candidates(scores, 40) is None
    assert top_ids(scores, 40).tolist() == stable_ranking(scores, 40)
