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
    from engine.core.step_maker import StepMaker, raw_entropy_and_surprisal

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


def merging_best(seed):
    """A 49,152-token row whose best few dozen scores are 3.0 and the float32 just below it, which a
    temperature of 0.7 merges into one value (2.9999998 / 0.7 == 3.0 / 0.7)."""
    rng = np.random.default_rng(seed)
    row = rng.standard_normal(49_152).astype(np.float32) / 3  # all below 3
    best = rng.choice(49_152, rng.integers(2, 100), replace=False)
    row[best] = rng.choice(np.float32([3.0, np.nextafter(np.float32(3.0), np.float32(0))]), len(best))
    return row


@settings(max_examples=200, deadline=None)
@given(scores=st.one_of(long_rows(), st.integers(0, 2**32 - 1).map(merging_best)),
       m=st.sampled_from([2, 20, 64, 200]), below=st.integers(1, 200),
       t=st.sampled_from([1.0, 0.7, 0.7, 0.8, 1.5]))  # fmt: skip
def test_the_top_found_among_the_leaders_is_the_whole_rows_or_nothing(scores, m, below, t):
    """top_ids_among ranks only the raw best m, also on the row divided by a temperature (which keeps their
    order but can tie neighbours one float32 step apart, the lower id first): what it finds is the whole row's
    ranking; where ties at the leaders' floor leave that open, it finds nothing (the caller ranks the row)."""
    n, leaders = max(1, m - below), top_ids(scores, m)
    divided = scores / np.float32(t)
    found = ranking.top_ids_among(divided, leaders, n)
    if found is not None:
        assert found.tolist() == stable_ranking(divided, n)
    if n < m and np.isfinite(scores).all() and len(np.unique(scores)) == len(scores) and t == 1.0:
        assert found is not None  # distinct scores: settled among the leaders


@settings(max_examples=150, deadline=None)
@given(chain=chains, size=st.sampled_from([96, 5000, 49_152]), kind=st.sampled_from(["ties", "spread"]),
       seed=st.integers(0, 2**32 - 1))  # fmt: skip
def test_a_chain_given_the_raw_leaders_gives_the_same_rows_bit_for_bit(chain, size, kind, seed):
    """StepMaker hands the chain the raw ranking's first 64 ids (the top-k stage and top-p rank among them):
    every stage's row is the one the chain gives ranking the whole row."""
    from engine.core.sampling import chain as chain_of
    from engine.core.sampling import run_chain

    scores = rows_with_ties(np.random.default_rng(seed), size, kind)
    stages, raw = chain_of(Settings(**chain)), softmax(scores)
    plain, led = run_chain(stages, scores, raw), run_chain(stages, scores, raw, leaders=top_ids(scores, 64))
    assert list(plain) == list(led)
    for name, row in plain.items():
        other = led[name]
        assert np.array_equal(row.logits, other.logits) and np.array_equal(row.probs, other.probs), name
        assert (row.ids is None) == (other.ids is None) and (row.ids is None or np.array_equal(row.ids, other.ids))


@given(size=st.integers(1, 300), seed=st.integers(0, 2**32 - 1))
def test_a_short_kept_rows_lists_read_as_its_arrays(size, seed):
    """Row.at and Row.rank read a kept row of up to SHORT_ROW tokens through lists: the same numbers as the
    arrays give (scores with ties and -inf; tokens in the row and not)."""
    from engine.core.sampling import Row

    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(1000, size, replace=False))
    logits = rng.choice(np.float32([-np.inf, -1.0, 0.0, 0.5, 2.0]), size)
    row = Row(logits, rng.random(size).astype(np.float32), 1000, ids)
    asked = rng.integers(0, 1000, 30).tolist() + ids[:5].tolist()
    assert row.at(asked) == (row.logits_at(asked).tolist(), row.probs_at(asked).tolist())
    for token in asked:
        at, inside = row.positions([token])
        counted = 0 if not inside[0] or logits[at[0]] == -np.inf else ranking.model_rank(logits, int(at[0]))
        assert row.rank(token) == counted
        assert row.probability(token) == float(row.probs_at([token])[0])
