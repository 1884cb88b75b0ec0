import dataclasses

import numpy as np
import pytest

from engine.story.model import Config

PROMPT = "mia has a red ball. mia goes to the park. at the park, mia gives the ball to ben."


def test_public_surface(story_model):
    assert story_model.context_length == 64
    assert story_model.vocab_size == 96
    ids = story_model.tokenizer.encode(PROMPT)
    scores = story_model.scores(ids)
    assert scores.shape == (len(ids), 96)
    assert scores.dtype == np.float32


def test_every_weight_is_float32(story_model):
    assert all(p.dtype == np.float32 for p in story_model.params.values())


def test_kv_cache_decode_equals_the_full_forward(story_model):
    ids = story_model.tokenizer.encode(PROMPT + " now ben has the red ball.\nben has")
    full = story_model.scores(ids)
    cache = story_model.new_cache()
    prompt_len = 7
    prefill = story_model.forward_cached(ids[:prompt_len], cache)
    assert prefill.dtype == np.float32
    np.testing.assert_allclose(prefill, full[:prompt_len], atol=1e-5, rtol=0)
    for position in range(prompt_len, len(ids)):
        step = story_model.forward_cached([ids[position]], cache)
        assert step.shape == (1, 96) and step.dtype == np.float32
        np.testing.assert_allclose(step[0], full[position], atol=1e-5, rtol=0)
    assert cache.length == len(ids)


def test_cache_is_preallocated_for_every_position_and_truncates_in_place(story_model):
    cache = story_model.new_cache()
    assert cache.k.shape[1] == 64 and cache.k.dtype == np.float32
    before = cache.k
    ids = story_model.tokenizer.encode(PROMPT)
    first = story_model.forward_cached(ids, cache)
    cache.truncate(5)
    again = story_model.forward_cached(ids[5:], cache)
    assert cache.k is before  # the same buffer: no per-token copies
    np.testing.assert_allclose(again, first[5:], atol=1e-5, rtol=0)


def test_context_is_64_positions(story_model):
    ids = [story_model.tokenizer.ids[" the"]] * 64
    assert story_model.scores(ids).shape == (64, 96)
    with pytest.raises(ValueError, match="only 64 positions"):
        story_model.scores(ids + [1])
    cache = story_model.new_cache()
    story_model.forward_cached(ids, cache)
    with pytest.raises(ValueError, match="only 64 positions"):
        story_model.forward_cached([1], cache)
    assert cache.length == 64


@pytest.mark.parametrize("bad", [[], [96], [-1], [[1, 2]], ["a"], [1.5]])
def test_bad_ids_are_refused(story_model, bad):
    with pytest.raises(ValueError):
        story_model.scores(bad)


def test_config_is_frozen_and_validated():
    config = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 3
    with pytest.raises(ValueError, match="not divisible"):
        Config(d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="positive int"):
        Config(vocab_size=0)


def test_one_positions_shortcuts_give_the_general_paths_bits():
    """A decode step's layer norm (float32 scalars), q, k, v split and heads merged (one reshape) are the general
    functions' results bit for bit: recorded traces replay through either."""
    from engine.story.model import layer_norm, merge_heads, split_qkv

    rng = np.random.default_rng(0)
    g, b = (rng.standard_normal((1, 128)).astype(np.float32) for _ in range(2))
    for scale in (1e-3, 1.0, 30.0):
        rows = (rng.standard_normal((200, 128)) * scale + rng.uniform(-5, 5, (200, 1))).astype(np.float32)
        each = np.concatenate([layer_norm(row[None], g, b) for row in rows])
        assert each.tobytes() == layer_norm(rows[:, None], g, b)[:, 0].tobytes()  # [200, 1, d]: the general path
    qkv = rng.standard_normal((1, 384)).astype(np.float32)
    general = split_qkv(qkv[None], 8)  # [1, 1, 3d]: the general path, a batch of one
    assert all(np.array_equal(one, many[0]) for one, many in zip(split_qkv(qkv, 8), general, strict=True))
    heads = rng.standard_normal((8, 1, 16)).astype(np.float32)
    assert np.array_equal(merge_heads(heads), merge_heads(heads[None])[0])
