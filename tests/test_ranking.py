"""engine/core/ranking.py's top_ids against a full stable sort, on rows as long as SmolLM2's and Gemma's where it
ranks in two passes (the best of each group, then inside the groups that can hold the n best)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core import ranking
from engine.core.ranking import top_ids
from engine.core.sampling import ChainInput, softmax
from engine.core.settings import LLAMA_CPP_ORDER, SAMPLERS, Settings

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


class Texts:  # a tokenizer for StepMaker: a token's text is its id
    def decode(self, ids):
        return str(ids[0])


chains = st.fixed_dictionaries(
    {
        "temperature": st.sampled_from([0.0, 0.0, 0.7, 1.0, 1.5]),
        "top_k": st.sampled_from([None, 1, 3, 40]),
        "top_p": st.sampled_from([None, 0.5, 0.95]),
        "min_p": st.sampled_from([None, 0.05, 0.3]),
        "repeat_penalty": st.sampled_from([1.0, 1.3]),
        "greedy_at": st.sampled_from(["end", "temperature"]),
        "logit_bias": st.sampled_from([(), ((1, 0.5), (3, -np.inf))]),
        "samplers": st.sampled_from([SAMPLERS, LLAMA_CPP_ORDER]),
    }
)


def rows_with_ties(rng, size, kind):
    """Scores with many ties, with neighbours one float32 step apart (a temperature's division can merge
    them), or spread out."""
    if kind == "spread":
        return (rng.standard_normal(size) * 3).astype(np.float32)
    values = np.float32([-2.0, 0.5, 3.0])
    values = np.concatenate([values, np.nextafter(values, np.float32(9)), np.nextafter(values, np.float32(-9))])
    return rng.choice(values, size)


@settings(max_examples=150, deadline=None)
@given(chain=chains, size=st.sampled_from([5, 96, 5000]), kind=st.sampled_from(["ties", "spread"]),
       seed=st.integers(0, 2**32 - 1), pick=st.integers(0, 10**6))  # fmt: skip
def test_a_steps_ranks_and_entropy_found_without_a_pass_over_the_vocabulary_are_the_counted_ones(
    chain, size, kind, seed, pick
):
    """StepMaker.make reads the token's rank after the stages that keep a ranking's upper part (top-k, top-p,
    greedy) from the row after them, the raw rank from the raw top 20, the entropy from the softmax's own
    shifted scores: each equals what counting over the whole row gives (Row.rank, model_rank,
    raw_entropy_and_surprisal), for drawn and forced tokens, on rows full of ties."""
    from engine.core.steps import StepMaker, raw_entropy_and_surprisal

    rng = np.random.default_rng(seed)
    scores = rows_with_ties(rng, size, kind)
    maker = StepMaker(Texts(), Settings(**chain))
    given_history = ChainInput(np.asarray(rng.integers(0, size, 8), dtype=np.int64))
    dists = maker.distributions(scores, given_history)
    final = dists.final.token_ids()
    for token in (int(final[pick % len(final)]), pick % size):  # drawn from what is left, or forced
        step = maker.make(scores, token, "model", dists)
        assert step.stage_ranks == tuple((name, row.rank(token)) for name, row in dists.rows.items())
        assert step.model_rank == ranking.model_rank(scores, token)
        assert (step.entropy, step.surprisal) == raw_entropy_and_surprisal(scores, softmax(scores), token)
        assert np.array_equal(dists.raw, softmax(scores))
