"""Inside the model (issue 17): the logit lens and attention weights. The last layer's lens is the model's own
distribution (the same numbers); on SmolLM2 every layer's lens equals transformers' hidden states through its
final norm and lm_head (a fixture recorded by tests/fixtures/record_hf_lens.py); attention weights sum to 1
over the causal window; asking costs the session nothing; a backend without layers is refused."""

import sys
from pathlib import Path

import numpy as np
import pytest

import engine
from engine.core.inside import lens_ranks, lens_scores
from engine.core.sampling import softmax

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from prompts import prompt_ids  # noqa: E402

STORY = "mia has a red ball. she goes to the park. now mia has the"


@pytest.fixture(scope="module")
def smollm2():
    return engine.load_model("smollm2", backend="numpy")


def test_the_story_lens_ends_with_the_models_own_distribution(story_model):
    ids = story_model.tokenizer.encode(STORY)
    lens = engine.logit_lens(story_model, ids)
    assert lens.shape == (2, story_model.vocab_size) and lens.dtype == np.float32  # the embedding, the block
    assert np.allclose(lens.sum(axis=1), 1, atol=1e-6)
    cache = story_model.new_cache()
    own = softmax(story_model.forward_cached(ids, cache, last_only=True)[0].copy())
    assert np.array_equal(lens[-1], own)  # the same numbers, not close ones
    inside = story_model.inside(ids)  # and the lens machinery itself reads the last stream as the model does
    assert np.allclose(softmax(story_model.unembed(inside.residuals[-1, -1])), own, atol=1e-6)
    # row 0 reads the stream before the block: the last token's and its position's embeddings, nothing else
    params = story_model.params
    embedded = params["wte"][ids[-1]] + params["wpe"][len(ids) - 1]
    assert np.allclose(lens[0], softmax(story_model.unembed(embedded)), atol=1e-6)
    assert lens[0].argmax() != lens[-1].argmax()  # and the block changes what it predicts


def test_smollm2_lens_matches_transformers_at_every_layer(smollm2):
    reference = np.load(FIXTURES / "smollm2_hf_lens.npz")
    probe = reference["probe_ids"]
    worst = 0.0
    for label, ids in prompt_ids(smollm2):
        key = label.replace(" ", "_")
        assert reference[f"{key}/ids"].tolist() == ids, "the prompts or the tokenizer changed"
        ours = lens_scores(smollm2, ids)  # [31, V]
        assert ours.shape == (31, smollm2.vocab_size) and ours.dtype == np.float32
        top, scale = reference[f"{key}/top_ids"], reference[f"{key}/scale"][:, None]
        for mine, theirs in ((np.take_along_axis(ours, top, -1), reference[f"{key}/top_logits"]),
                             (ours[:, probe], reference[f"{key}/probe_logits"])):  # fmt: skip
            worst = max(worst, float((np.abs(mine - theirs) / scale).max()))
    assert worst <= 1e-4, f"largest difference {worst:.2e} of the logits' scale"
    ids = prompt_ids(smollm2)[0][1]
    own = softmax(smollm2.forward_cached(ids, smollm2.new_cache(), last_only=True)[0].copy())
    assert np.array_equal(engine.logit_lens(smollm2, ids)[-1], own)


@pytest.mark.parametrize("which", ["story", "smollm2"])
def test_attention_weights_sum_to_one_over_the_causal_window(story_model, smollm2, which):
    model = story_model if which == "story" else smollm2
    text = STORY if which == "story" else "The quick brown fox jumps over the lazy dog. " * 14  # > 128 tokens
    ids = model.tokenizer.encode(text)
    for length in (1, 7, len(ids)):
        weights = engine.attention_weights(model, ids[:length])
        layers = 1 if which == "story" else 30
        heads = 8 if which == "story" else 9
        assert weights.shape == (layers, heads, length) and weights.dtype == np.float32
        assert (weights >= 0).all() and np.allclose(weights.sum(axis=-1), 1, atol=1e-5)
    if which == "smollm2":
        assert len(ids) > 128  # the forward's attention runs in blocks of 128 queries: the last block's weights


def test_the_inside_view_grid_and_ranks(story_model):
    ids = story_model.tokenizer.encode(STORY)
    view = engine.inside_view(story_model, ids)
    assert view.layers == ("embedding", "layer 1")
    assert view.grid_positions == tuple(range(len(ids) - 20, len(ids)))
    assert view.grid_top.shape == view.grid_p.shape == (2, 20)
    best = int(view.probs[-1].argmax())
    assert view.grid_top[-1, -1] == best and view.grid_p[-1, -1] == pytest.approx(view.probs[-1, best])
    assert view.ranks(best)[-1] == 1
    # each grid column is the lens of the text up to it
    earlier = engine.logit_lens(story_model, ids[: view.grid_positions[3] + 1])
    assert view.grid_top[:, 3].tolist() == earlier.argmax(axis=1).tolist()
    assert lens_ranks(np.array([[0.1, 0.5, 0.1, 0.3]]), 2).tolist() == [4]  # ties: the lower id first


def test_asking_changes_nothing_in_a_session(story_model):
    session, twin = (engine.Session(story_model, "mia has a red ball.", max_new_tokens=20) for _ in range(2))
    session.step(), twin.step()
    engine.logit_lens(story_model, session.ids), engine.attention_weights(story_model, session.ids)
    assert [s.to_dict() for s in session.run()] == [s.to_dict() for s in twin.run()]


def test_a_backend_without_layers_is_refused():
    from tests.fake_backend import FakeStreamingBackend

    server = FakeStreamingBackend()  # a server: the scores only
    with pytest.raises(ValueError, match="the logit lens and attention need the numpy engine or llama.cpp"):
        engine.logit_lens(server, [1, 2, 3])
    assert not server.capabilities.inside


def test_bad_ids_are_refused(story_model):
    with pytest.raises(ValueError):
        engine.logit_lens(story_model, [])
    with pytest.raises(ValueError):
        engine.attention_weights(story_model, [999])


def test_the_colour_copying_head_of_the_story_model(story_model):
    """Where the model writes the first sentence's colour again, head 4 of its block puts most of its weight on
    that colour (averaged over the 60 dev stories; docs/inside.md names it with this figure)."""
    from engine.story.colour_head import weight_on_colour
    from engine.story.corpus import split

    means = weight_on_colour(story_model, split()[1])
    assert means.shape == (1, 8) and int(means.argmax()) == 3
    assert means[0, 3] > 0.7 and np.sort(means[0])[-2] < 0.6


GOLD = "ben has a gold toy. ben goes to the barn. at the barn, ben gives the toy to leo. now leo has the"


def test_ablating_the_colour_head_changes_the_next_token_as_the_forward_pass_says(story_model, tmp_path):
    session = engine.Session(story_model, GOLD, max_new_tokens=4)
    gold = story_model.tokenizer.encode(" gold")[0]
    before = session.peek()
    assert session.steer_heads([(0, 3, 0.0)]) == ((0, 3, 0.0),)
    after = session.peek()
    table = np.ones((1, 8), dtype=np.float32)
    table[0, 3] = 0.0
    direct = softmax(story_model.forward_cached(session.ids, story_model.new_cache(), True, head_scales=table)[0])
    assert np.allclose([direct[i] for i in after.token_ids], after.raw, atol=1e-6)
    assert dict(zip(after.token_ids, after.raw))[gold] < dict(zip(before.token_ids, before.raw))[gold] - 0.1
    session.run()
    session.steer_heads([])  # every head back, from the next step on
    session.update_settings(max_new_tokens=8)
    session.run()
    assert [a["kind"] for a in session.actions].count("heads") == 2
    engine.save_trace(session.trace(), tmp_path / "heads.json")
    assert engine.replay(engine.load_trace(tmp_path / "heads.json"), story_model).identical


@pytest.mark.parametrize("scales, message", [
    ([(1, 0, 0.0)], "layer must be an int from 0 to 0"),
    ([(0, 8, 0.0)], "head must be an int from 0 to 7"),
    ([(0, 1, 11.0)], "a number from -10 to 10"),
    ([(0, 1, 0.0), (0, 1, 0.5)], "scaled twice"),
    ("0 1 0", "a list of \\(layer, head, factor\\)"),
])  # fmt: skip
def test_bad_head_scales_are_refused_and_change_nothing(story_model, scales, message):
    session = engine.Session(story_model, GOLD, max_new_tokens=4)
    with pytest.raises(ValueError, match=message):
        session.steer_heads(scales)
    assert session.actions == [] and session.head_scales == ()


def test_steering_heads_needs_an_engine_that_runs_the_layers(smollm2):
    from tests.fake_backend import FakeStreamingBackend

    with pytest.raises(ValueError, match="steering its heads needs the numpy engine or llama.cpp"):
        engine.Session(FakeStreamingBackend(), "ab", max_new_tokens=2).steer_heads([(0, 0, 0.0)])
    session = engine.Session(smollm2, "The capital of France is", max_new_tokens=2)
    before = session.peek()
    session.steer_heads([(5, 2, 0.0), (20, 1, 2.0)])
    table = np.ones((30, 9), dtype=np.float32)
    table[5, 2], table[20, 1] = 0.0, 2.0
    direct = softmax(smollm2.forward_cached(session.ids, smollm2.new_cache(), True, head_scales=table)[0])
    after = session.peek()
    assert np.allclose([direct[i] for i in after.token_ids], after.raw, atol=1e-5) and after.raw != before.raw


def test_top_and_p_is_the_softmax_top_and_its_probability():
    from engine.core.inside import softmax_rows
    from engine.core.lens_grid import top_and_p

    rng = np.random.default_rng(5)
    scores = (rng.standard_normal((3, 7, 1000)) * 6).astype(np.float32)
    expected = softmax_rows(scores.copy())
    top, p = top_and_p(scores.copy())
    assert top.shape == p.shape == (3, 7) and p.dtype == np.float32
    np.testing.assert_array_equal(top, expected.argmax(-1))
    np.testing.assert_allclose(p, expected.max(-1), rtol=1e-6)


@pytest.mark.parametrize("which", ["story", "smollm2"])
def test_the_numpy_engines_keep_the_last_positions_asked_for(story_model, smollm2, which):
    model = story_model if which == "story" else smollm2
    ids = model.tokenizer.encode(STORY)
    whole = model.inside(ids)
    part = model.inside(ids, last=3)
    np.testing.assert_array_equal(part.residuals, whole.residuals[:, -3:])
    np.testing.assert_array_equal(part.scores, whole.scores)
    with pytest.raises(ValueError, match="last"):
        model.inside(ids, last=0)


def test_a_grid_whose_product_fails_raises_in_the_caller_and_stops_its_thread():
    from engine.core.lens_grid import LensGrid

    def unembed(rows):
        raise MemoryError("no room for the grid")

    grid = LensGrid(unembed, 10)
    with pytest.raises(MemoryError, match="no room"):
        grid.finish(np.zeros((3, 2, 4), dtype=np.float32))  # nothing handed over early: no thread
    handed = LensGrid(unembed, 10)
    handed.add(1, np.zeros((2, 4), dtype=np.float32))
    with pytest.raises(MemoryError, match="no room"):
        handed.finish(np.zeros((3, 2, 4), dtype=np.float32))
    assert not handed._thread.is_alive()
    cancelled = LensGrid(unembed, 10)
    cancelled.add(1, np.zeros((2, 4), dtype=np.float32))
    cancelled.cancel()
    assert not cancelled._thread.is_alive()
