"""The sampler chain on small exact vectors (like llama.cpp's sampler tests) and hypothesis properties."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from engine.core.sampling import draw, next_token_probs
from engine.core.settings import Settings

F = np.float32


def logits_of(probs):
    return np.log(np.array(probs, dtype=F))


def test_greedy_puts_everything_on_the_highest_score_ties_to_the_lowest_id():
    assert next_token_probs(F([1, 3, 2, 3]), 0).tolist() == [0, 1, 0, 0]
    assert next_token_probs(F([5, 5, 5]), 0).tolist() == [1, 0, 0]


def test_temperature_one_is_exactly_the_plain_softmax():
    scores = F([0.1, -2.0, 3.5, 1.25])
    e = np.exp(scores - scores.max())
    assert np.array_equal(next_token_probs(scores, 1.0), e / e.sum())
    assert np.array_equal(next_token_probs(scores, 1), e / e.sum())


def test_temperature_divides_the_scores():
    scores = F([1.0, 2.0, 4.0])
    expected = np.exp(scores / 2.0) / np.exp(scores / 2.0).sum()
    np.testing.assert_allclose(next_token_probs(scores, 2.0), expected, rtol=1e-6)


def test_top_k_keeps_exactly_k_highest_and_ties_to_the_lower_id():
    probs = next_token_probs(logits_of([0.1, 0.2, 0.3, 0.4]), 1.0, top_k=2)
    np.testing.assert_allclose(probs, [0, 0, 3 / 7, 4 / 7], rtol=1e-6)
    tied = next_token_probs(F([1, 2, 2, 2, 0]), 1.0, top_k=2)
    assert (tied > 0).tolist() == [False, True, True, False, False]
    np.testing.assert_allclose(tied[[1, 2]], [0.5, 0.5])


def test_top_p_keeps_the_smallest_set_reaching_p():
    scores = logits_of([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(next_token_probs(scores, 1.0, top_p=0.4), [0, 0, 0, 1], rtol=1e-6)
    np.testing.assert_allclose(next_token_probs(scores, 1.0, top_p=0.5), [0, 0, 3 / 7, 4 / 7], rtol=1e-6)
    np.testing.assert_allclose(next_token_probs(scores, 1.0, top_p=0.7), [0, 0, 3 / 7, 4 / 7], rtol=1e-6)
    np.testing.assert_allclose(next_token_probs(scores, 1.0, top_p=0.8), [0, 2 / 9, 3 / 9, 4 / 9], rtol=1e-6)
    np.testing.assert_allclose(next_token_probs(scores, 1.0, top_p=1.0), [0.1, 0.2, 0.3, 0.4], rtol=1e-6)
    # never fewer than one token, however small p is
    assert np.count_nonzero(next_token_probs(scores, 1.0, top_p=1e-9)) == 1


def test_min_p_keeps_tokens_at_least_min_p_times_the_top():
    scores = logits_of([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(next_token_probs(scores, 1.0, min_p=0.45), [0, 2 / 9, 3 / 9, 4 / 9], rtol=1e-6)
    np.testing.assert_allclose(next_token_probs(scores, 1.0, min_p=0.76), [0, 0, 0, 1], rtol=1e-6)
    np.testing.assert_allclose(next_token_probs(scores, 1.0, min_p=0.0), [0.1, 0.2, 0.3, 0.4], rtol=1e-6)
    np.testing.assert_allclose(next_token_probs(scores, 1.0, min_p=1.0), [0, 0, 0, 1], rtol=1e-6)


def test_the_chain_order_is_temperature_top_k_top_p_min_p():
    scores = logits_of([0.05, 0.15, 0.3, 0.5])
    # top-k 3 -> [0, .15, .3, .5]/.95; top-p 0.8 keeps .5/.95 + .3/.95 = .842; min-p 0.7 drops .3/.5 = 0.6
    np.testing.assert_allclose(next_token_probs(scores, 1.0, top_k=3, top_p=0.8, min_p=0.7), [0, 0, 0, 1])
    np.testing.assert_allclose(next_token_probs(scores, 1.0, top_k=3, top_p=0.8), [0, 0, 3 / 8, 5 / 8], rtol=1e-6)


def test_draw_walks_the_cumulative_distribution_in_token_order():
    probs = F([0.25, 0.0, 0.5, 0.25])
    assert [draw(probs, u) for u in (0.0, 0.2499, 0.25, 0.7499, 0.75, 0.9999)] == [0, 0, 2, 2, 3, 3]
    assert draw(F([0.5, 0.5, 0.0]), 0.99999999) == 1  # rounding never picks a zero-probability token


BAD_SETTINGS = [
    ({"temperature": -0.5}, "temperature must be 0 or a finite number from 0.01 to 100"),
    ({"temperature": math.nan}, "temperature must be 0 or a finite number from 0.01 to 100"),
    ({"temperature": math.inf}, "temperature must be 0 or a finite number from 0.01 to 100"),
    ({"temperature": True}, "temperature must be 0 or a finite number from 0.01 to 100"),
    ({"temperature": "1"}, "temperature must be 0 or a finite number from 0.01 to 100"),
    ({"temperature": 0.005}, "temperature must be 0 or a finite number from 0.01 to 100"),
    ({"top_k": 0}, "top_k must be an int from 1 to"),
    ({"top_k": True}, "top_k must be an int from 1 to"),
    ({"top_k": 2.0}, "top_k must be an int from 1 to"),
    ({"top_p": 0.0}, r"top_p must be a number in \(0, 1\]"),
    ({"top_p": 1.5}, r"top_p must be a number in \(0, 1\]"),
    ({"top_p": math.nan}, r"top_p must be a number in \(0, 1\]"),
    ({"min_p": -0.1}, r"min_p must be a number in \[0, 1\]"),
    ({"min_p": 1.01}, r"min_p must be a number in \[0, 1\]"),
    ({"max_new_tokens": 0}, "max_new_tokens must be a positive int"),
    ({"max_new_tokens": 5.0}, "max_new_tokens must be a positive int"),
    ({"seed": 1.5}, "seed must be an int"),
    ({"seed": "7"}, "seed must be an int"),
    ({"seed": False}, "seed must be an int"),
    ({"seed": -3}, "seed must be an int from 0 to 2147483647, got -3"),  # one rule: CLI, window and engine
    ({"seed": 2**31}, "seed must be an int from 0 to 2147483647"),
]


def test_numpy_ints_are_taken_as_ints():
    settings = Settings(max_new_tokens=np.int64(9), top_k=np.int32(4), seed=np.int64(5))
    assert settings == Settings(max_new_tokens=9, top_k=4, seed=5)
    assert all(type(v) is int for v in (settings.max_new_tokens, settings.top_k, settings.seed))


@pytest.mark.parametrize("kwargs, message", BAD_SETTINGS)
def test_invalid_settings_are_refused_with_what_is_allowed(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Settings(**kwargs)


def test_top_k_above_the_vocabulary_is_refused():
    with pytest.raises(ValueError, match="top_k must be an int from 1 to 4 \\(the vocabulary size\\), got 5"):
        next_token_probs(F([1, 2, 3, 4]), 1.0, top_k=5)


score_rows = arrays(np.float32, st.integers(1, 40), elements=st.floats(-30, 30, width=32))
chains = st.fixed_dictionaries({
    "temperature": st.one_of(st.just(0.0), st.floats(0.01, 5.0)),
    "top_k": st.one_of(st.none(), st.integers(1, 40)),
    "top_p": st.one_of(st.none(), st.floats(0.001, 1.0)),
    "min_p": st.one_of(st.none(), st.floats(0.0, 1.0)),
})  # fmt: skip


@given(scores=score_rows, chain=chains)
def test_probabilities_are_a_distribution_with_zeros_exactly_where_a_filter_removed_a_token(scores, chain):
    chain["top_k"] = None if chain["top_k"] is None else min(chain["top_k"], scores.size)
    probs = next_token_probs(scores, **chain)
    assert probs.dtype == np.float32
    assert not np.isnan(probs).any() and (probs >= 0).all()
    assert probs.sum() == pytest.approx(1.0, abs=1e-5)
    tempered = next_token_probs(scores, chain["temperature"])
    removed = (probs == 0) & (tempered > 0)
    kept = probs > 0
    # kept tokens keep their relative weights; what is removed never outranks what is kept
    if kept.any() and removed.any():
        assert scores[removed].max() <= scores[kept].min()
    if chain["top_k"] is not None:
        assert np.count_nonzero(probs) <= chain["top_k"]
    np.testing.assert_allclose(probs[kept], tempered[kept] / tempered[kept].sum(), rtol=1e-4, atol=1e-7)


@given(scores=arrays(np.float32, st.integers(1, 300), elements=st.sampled_from([-1.0, 0.0, 0.5, 2.0, 7.25])),
       n=st.integers(1, 320))  # fmt: skip
def test_top_ids_and_rank_agree_with_a_full_stable_sort(scores, n):
    from engine.core.ranking import model_rank, top_ids

    ranking = np.argsort(-scores, kind="stable")
    assert top_ids(scores, n).tolist() == ranking[:n].tolist()
    for position, token in enumerate(ranking[:10]):
        assert model_rank(scores, int(token)) == position + 1
