"""Steering with a direction (issue 28): a happy-minus-sad direction made from SmolLM2's residual stream on the
numpy engine moves the next token's probability of positive words up with the strength and down with the
opposite sign, on numpy and on llama.cpp (the same GGUF file: llama.cpp's control vector adds to the same
stream); strength 0 is no steering; the trace replays bit for bit, also across a rewind; bad input is refused
and changes nothing; a direction saved as llama.cpp's control-vector GGUF loads back, a damaged one is refused."""

import gguf
import numpy as np
import pytest
from fake_backend import FakeBackend

import engine

POSITIVE = ["I am so happy and joyful today!", "What a wonderful, delightful day.", "I love this, it makes me glad."]
NEGATIVE = ["I am so sad and miserable today.", "What a terrible, gloomy day.", "I hate this, it makes me cry."]
WORDS = [" happy", " great", " wonderful", " good", " glad", " joy", " love", " beautiful"]
PROMPT = "Today I feel"
LAYER = 12  # a middle layer of SmolLM2's 30 (bench/steering_curve.py prints the curve)


@pytest.fixture(scope="module")
def smollm2():
    return engine.load_model("smollm2", backend="numpy")


@pytest.fixture(scope="module")
def happy(smollm2):
    return engine.steering_vector(smollm2, POSITIVE, NEGATIVE)


@pytest.fixture(params=["numpy", "llama.cpp"])
def model(request, smollm2):
    return smollm2 if request.param == "numpy" else request.getfixturevalue("smollm2_llamacpp")


def next_token_probs(session) -> np.ndarray:  # the model's own distribution for the session's next token
    return session._context.distributions(session.ids, session.settings).raw


def positive_mass(model, vector, strength) -> float:
    session = engine.Session(model, PROMPT, max_new_tokens=1)
    session.steer_vector(vector, [LAYER], strength)
    ids = [model.tokenizer.encode(word)[0] for word in WORDS]
    return float(next_token_probs(session)[ids].sum())


def test_the_direction_is_the_mean_stream_of_the_positive_texts_less_the_negative(smollm2, happy):
    assert happy.shape == (30, 576) and happy.directions.dtype == np.float32
    assert not happy.directions.flags.writeable and happy.positive == tuple(POSITIVE)
    assert happy.weights_sha256 == smollm2.weights_sha256

    def mean(text):  # positions 1.. of the stream after each layer (the docstring says why not the first)
        return smollm2.inside(smollm2.tokenizer.encode(text)).residuals[1:, 1:].mean(axis=1)

    expected = np.mean([mean(t) for t in POSITIVE], axis=0) - np.mean([mean(t) for t in NEGATIVE], axis=0)
    assert np.allclose(happy.directions, expected, atol=1e-5)
    one = engine.steering_vector(smollm2, POSITIVE, NEGATIVE, layer=LAYER)
    assert np.array_equal(one.directions[LAYER], happy.directions[LAYER])
    assert not np.delete(one.directions, LAYER, axis=0).any()


def test_positive_words_rise_with_strength_and_fall_with_the_opposite_sign(model, happy):
    curve = [positive_mass(model, happy, strength) for strength in (-2, -1, 0, 1, 2)]
    assert all(a < b for a, b in zip(curve, curve[1:])), curve
    assert curve[-1] > 2 * curve[2] and curve[0] < curve[2] / 2, curve  # a clear effect, both ways


def test_strength_zero_is_no_steering_bit_for_bit(model, happy):
    plain = engine.Session(model, PROMPT, max_new_tokens=4)
    steered = engine.Session(model, PROMPT, max_new_tokens=4)
    assert steered.steer_vector(happy, [LAYER], 0) is None and steered.actions == []  # nothing to add
    steered.steer_vector(happy, [LAYER], 2.0)
    assert steered.steer_vector(happy, [LAYER], 0.0) is None and steered.residual_table is None
    assert np.array_equal(next_token_probs(steered), next_token_probs(plain))
    assert [s.to_dict() for s in steered.run()] == [s.to_dict() for s in plain.run()]


def test_the_trace_replays_bit_for_bit_after_steering_and_after_a_rewind_across_it(model, happy, tmp_path):
    session = engine.Session(model, PROMPT, max_new_tokens=12, temperature=0.8, seed=3)
    for _ in range(3):
        session.step()
    in_force = session.steer_vector(happy, [LAYER, LAYER + 3], 1.5)
    for _ in range(3):
        session.step()
    session.rewind(4)  # back across the steering: it stays in force, and the text is read again under it
    assert session.vector_steering is in_force and in_force[1:] == ((LAYER, LAYER + 3), 1.5)
    for _ in range(3):
        session.step()
    session.steer_vector(happy, [LAYER], 0)
    for _ in range(2):
        session.step()
    assert [a["kind"] for a in session.actions].count("vector") == 2
    engine.save_trace(session.trace(), tmp_path / "vector.json")
    report = engine.replay(engine.load_trace(tmp_path / "vector.json"), model)
    assert report.identical, report


def test_steering_changes_the_distribution_as_the_forward_pass_with_the_addition_says(smollm2, happy):
    session = engine.Session(smollm2, PROMPT, max_new_tokens=2)
    session.steer_vector(happy, [3, LAYER], -1.0)
    table = np.zeros((30, 576), dtype=np.float32)
    table[[3, LAYER]] = np.float32(-1.0) * happy.directions[[3, LAYER]]
    direct = smollm2.forward_cached(session.ids, smollm2.new_cache(), True, residual_add=table)[0]
    e = np.exp(direct - direct.max())
    assert np.allclose(next_token_probs(session), e / e.sum(), atol=1e-6)


@pytest.mark.parametrize("positive, negative, layer, message", [
    ([], NEGATIVE, None, "give 1 to 64 positive prompts"),
    (POSITIVE, "sad", None, "the negative prompts must be a list of texts"),
    (POSITIVE, ["sad", 3], None, "each negative prompt must be a non-empty text"),
    ([" "], NEGATIVE, None, "each positive prompt must be a non-empty text"),
    (POSITIVE, NEGATIVE, 30, "layer must be None \\(every layer\\) or an int from 0 to 29"),
])  # fmt: skip
def test_bad_contrast_prompts_are_refused(smollm2, positive, negative, layer, message):
    with pytest.raises(ValueError, match=message):
        engine.steering_vector(smollm2, positive, negative, layer)


def test_a_backend_without_layers_makes_no_direction_and_takes_none(happy):
    fake = FakeBackend()  # the scores only, as a server gives them
    with pytest.raises(ValueError, match="make it where the model runs on the numpy engine or llama.cpp"):
        engine.steering_vector(fake, ["ab"], ["cd"])
    session = engine.Session(fake, "a", max_new_tokens=2)
    with pytest.raises(ValueError, match="needs the numpy engine or llama.cpp"):
        session.steer_vector(happy, [LAYER], 1.0)
    assert session.actions == [] and session.vector_steering is None


def test_the_preview_shows_before_and_after_as_the_session_reads_them(model, happy):
    session = engine.Session(model, PROMPT, max_new_tokens=2)
    before, after = engine.steering_preview(model, session.ids, happy, [LAYER], 1.0)
    assert np.array_equal(before, next_token_probs(session))
    session.steer_vector(happy, [LAYER], 1.0)
    assert np.array_equal(after, next_token_probs(session)) and not np.array_equal(before, after)
    with pytest.raises(ValueError, match="ids must be a non-empty"):
        engine.steering_preview(model, [], happy, [LAYER], 1.0)


@pytest.mark.parametrize("layers, strength, message", [
    ([30], 1.0, "each layer must be an int from 0 to 29"),
    ([LAYER, LAYER], 1.0, "listed twice"),
    ("12", 1.0, "layers must be a list of ints"),
    ([LAYER], float("nan"), "strength must be a number from -100 to 100"),
    ([LAYER], 1000, "strength must be a number from -100 to 100"),
    ([LAYER], True, "strength must be a number"),
])  # fmt: skip
def test_bad_steering_is_refused_and_changes_nothing(smollm2, happy, layers, strength, message):
    session = engine.Session(smollm2, PROMPT, max_new_tokens=2)
    before = next_token_probs(session)
    with pytest.raises(ValueError, match=message):
        session.steer_vector(happy, layers, strength)
    assert session.actions == [] and session.vector_steering is None and session.residual_table is None
    assert np.array_equal(next_token_probs(session), before)


def test_a_vector_of_another_model_or_layer_zero_on_llamacpp_is_refused(smollm2_llamacpp, story_model, happy):
    story = engine.steering_vector(story_model, ["mia is happy."], ["mia is sad."])
    with pytest.raises(ValueError, match="this vector is 30 layers x 576 values, story model needs 1 x"):
        engine.Session(story_model, "mia", max_new_tokens=2).steer_vector(happy, [0], 1.0)
    session = engine.Session(smollm2_llamacpp, PROMPT, max_new_tokens=2)
    with pytest.raises(ValueError, match="needs 30 x 576"):
        session.steer_vector(story, [0], 1.0)
    with pytest.raises(ValueError, match="from 1 to 29 .*never steer the first layer"):
        session.steer_vector(happy, [0], 1.0)
    with pytest.raises(ValueError, match="must be a SteeringVector"):
        session.steer_vector(happy.directions, [LAYER], 1.0)
    assert session.actions == [] and session.vector_steering is None


def test_a_control_vector_file_round_trips_and_llamacpp_steers_the_same_with_it(smollm2_llamacpp, happy, tmp_path):
    path = tmp_path / "happy.gguf"
    engine.save_steering_vector(happy, path, model_hint="llama")
    reader = gguf.GGUFReader(str(path))  # what llama.cpp's loader reads: names, metadata, float32 rows
    assert reader.fields["general.architecture"].contents() == "controlvector"
    assert reader.fields["controlvector.model_hint"].contents() == "llama"
    assert reader.fields["controlvector.layer_count"].contents() == 29
    assert [t.name for t in reader.tensors] == [f"direction.{n}" for n in range(1, 30)]
    loaded = engine.load_steering_vector(smollm2_llamacpp, path)
    assert np.array_equal(loaded.directions[1:], happy.directions[1:]) and not loaded.directions[0].any()
    assert positive_mass(smollm2_llamacpp, loaded, 1.0) == positive_mass(smollm2_llamacpp, happy, 1.0)
    assert list(tmp_path.iterdir()) == [path]  # written atomically: no temporary left beside it


def write(path, layer_count=29, arch="controlvector", rows=None, width=576):
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_string("controlvector.model_hint", "llama")
    writer.add_int32("controlvector.layer_count", layer_count)
    for name, row in (rows or {"direction.1": np.ones(width, dtype=np.float32)}).items():
        writer.add_tensor(name, row)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("damage, message", [
    (dict(layer_count=5), "for a model of 5 layers"),
    (dict(arch="llama"), "is not a control vector"),
    (dict(width=100), "must be 576 float32 values"),
    (dict(rows={"direction.1": np.full(576, np.nan, dtype=np.float32)}), "NaN or infinite"),
    (dict(rows={"direction.30": np.ones(576, dtype=np.float32)}), "names layer 30"),
    (dict(rows={"direction.0": np.ones(576, dtype=np.float32)}), "is not direction.N"),
    (dict(rows={"direction.2": np.ones(576, dtype=np.float16)}), "must be 576 float32 values"),
])  # fmt: skip
def test_a_damaged_control_vector_file_is_refused(smollm2, tmp_path, damage, message):
    with pytest.raises(ValueError, match=message):
        engine.load_steering_vector(smollm2, write(tmp_path / "bad.gguf", **damage))


def test_a_cut_short_control_vector_file_is_refused(smollm2, happy, tmp_path):
    path = tmp_path / "cut.gguf"
    engine.save_steering_vector(happy, path)
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(ValueError, match="cut.gguf"):
        engine.load_steering_vector(smollm2, path)
    with pytest.raises(ValueError, match="not a readable GGUF|cut.gguf"):
        engine.load_steering_vector(smollm2, tmp_path)  # a folder


def test_a_trace_with_a_damaged_vector_action_is_refused(smollm2, happy, tmp_path):
    session = engine.Session(smollm2, PROMPT, max_new_tokens=2)
    session.steer_vector(happy, [LAYER], 1.0)
    session.step()
    trace = session.trace()
    action = next(a for a in trace["actions"] if a["kind"] == "vector")
    action["directions"] = action["directions"][:-8]  # a row cut short
    with pytest.raises(ValueError, match="a vector action needs"):
        engine.validate_trace(trace)


def test_steering_set_or_removed_midway_reads_as_a_fresh_context_under_it(model, happy):
    """llama.cpp may reuse a decode's graph: a control vector set or cleared between two steps must still
    change the next one (the text read again under it), as in a context that had it from the start."""
    session = engine.Session(model, PROMPT, max_new_tokens=8)
    session.step(), session.step()
    before, after = engine.steering_preview(model, session.ids, happy, [LAYER], 2.0)
    session.steer_vector(happy, [LAYER], 2.0)
    assert np.array_equal(next_token_probs(session), after)
    session.step()
    session.steer_vector(happy, [LAYER], 0)
    before, _ = engine.steering_preview(model, session.ids, happy, [LAYER], 2.0)
    assert np.array_equal(next_token_probs(session), before)


def test_a_direction_and_scaled_heads_together_on_both_engines(model, happy, tmp_path):
    """Scaling heads makes llama.cpp's context again (with its callback): the control vector set on the old one must
    be set on the new one too. Both engines: the next token under both equals a fresh session's under both, the
    direction still acts (it differs from the heads alone), and the trace replays bit for bit."""
    heads = [(LAYER, 0, 0.0), (LAYER + 1, 2, 0.5)]
    session = engine.Session(model, PROMPT, max_new_tokens=6, temperature=0.8, seed=5)
    session.step()
    session.steer_vector(happy, [LAYER], 2.0)
    session.step()
    session.steer_heads(heads)
    both = next_token_probs(session)
    fresh = engine.Session(model, session.text, max_new_tokens=1)
    fresh.steer_heads(heads)
    heads_only = next_token_probs(fresh)
    fresh.steer_vector(happy, [LAYER], 2.0)
    np.testing.assert_allclose(both, next_token_probs(fresh), atol=2e-5)
    assert np.abs(both - heads_only).max() > 1e-3
    session.run()
    engine.save_trace(session.trace(), tmp_path / "both.json")
    assert engine.replay(engine.load_trace(tmp_path / "both.json"), model).identical


@pytest.fixture(scope="module")
def gemma3():
    from test_llamacpp import gemma3_path

    loaded = engine.load_model(gemma3_path(), backend="llama.cpp", threads=1, context_length=512)
    yield loaded
    loaded.close()


def test_a_direction_made_on_llamacpp_is_the_numpy_engines(smollm2_llamacpp, happy):
    """llama.cpp shows its layers too (its graph callback): the same texts give the same direction, within
    llama.cpp's quantised activations."""
    made_there = engine.steering_vector(smollm2_llamacpp, POSITIVE, NEGATIVE)
    a, b = made_there.directions[LAYER], happy.directions[LAYER]
    assert float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) > 0.98


def test_gemma3_on_llamacpp_steers_towards_happy_words_and_replays(gemma3, tmp_path):
    """Gemma 3 (an architecture only llama.cpp runs here): a happy-minus-sad direction made from its own residual
    stream, added after layer 9 of 18, raises P(the positive words) with strength and lowers it with the opposite
    sign (its stream is ~25x larger than SmolLM2's embedding: strengths under 1); the trace replays bit for bit."""
    vector = engine.steering_vector(gemma3, POSITIVE, NEGATIVE)
    words = [gemma3.tokenizer.encode(word)[-1] for word in WORDS]  # (its encode starts with <bos>)

    def mass(strength):
        session = engine.Session(gemma3, PROMPT, max_new_tokens=1)
        session.steer_vector(vector, [9], strength)
        return float(next_token_probs(session)[words].sum())

    curve = [mass(strength) for strength in (-0.6, -0.3, 0, 0.3, 0.6)]
    assert all(a < b for a, b in zip(curve, curve[1:])), curve
    session = engine.Session(gemma3, PROMPT, max_new_tokens=6, temperature=0.8, seed=2)
    session.step()
    session.steer_vector(vector, [9], 0.6)
    session.run()
    engine.save_trace(session.trace(), tmp_path / "gemma.json")
    assert engine.replay(engine.load_trace(tmp_path / "gemma.json"), gemma3).identical


def test_the_inside_view_reads_the_stream_under_the_direction_in_force(model, happy):
    """The Inside tab under steering: inside_view(..., residual_add=session.residual_table) reads the stream with
    the direction added (the layers after it move, those before do not), and its last row is the steered next
    token's distribution (numpy: the session's numbers; llama.cpp: within the inspection's flash-attention
    difference, the same top token)."""
    session = engine.Session(model, PROMPT, max_new_tokens=4)
    plain = engine.inside_view(model, session.ids)
    session.steer_vector(happy, [LAYER], 8.0)
    steered = engine.inside_view(model, session.ids, residual_add=session.residual_table)
    expected = next_token_probs(session)
    assert int(steered.probs[-1].argmax()) == int(expected.argmax()) != int(plain.probs[-1].argmax())
    tolerance = 0.05 if hasattr(model, "llama") else 1e-5  # llama.cpp: flash attention on in a session only
    np.testing.assert_allclose(steered.probs[-1], expected, atol=tolerance)
    np.testing.assert_allclose(steered.probs[: LAYER + 1], plain.probs[: LAYER + 1], atol=1e-5)  # before it
    assert np.abs(steered.probs[LAYER + 1] - plain.probs[LAYER + 1]).max() > 0.01  # the layer it is added after
    for bad in (np.ones((3, 3)), np.full(model.residual_shape, np.nan)):
        with pytest.raises(ValueError, match="residual_add"):
            engine.inside_view(model, session.ids, residual_add=bad)


@pytest.mark.parametrize("value, strength, message", [
    (float("nan"), 1.0, "strength x the direction is not a number"),
    (3e38, 100.0, "strength x the direction reaches inf"),
    (3e37, 1.0, "reaches 3e\\+37"),
])  # fmt: skip
def test_a_vector_too_large_for_the_stream_is_refused_when_it_is_set(model, happy, value, strength, message):
    """Before: a NaN vector, or a 3e38 control-vector file at strength 100, was taken, and the next step failed
    with "its weights or its cache are damaged"; now it is refused when set, naming the steering."""
    import dataclasses

    directions = happy.directions.copy()
    directions[LAYER, 7] = value
    damaged = dataclasses.replace(happy, directions=directions)
    session = engine.Session(model, PROMPT, max_new_tokens=2)
    with pytest.raises(ValueError, match=message):
        session.steer_vector(damaged, [LAYER], strength)
    assert session.actions == [] and session.vector_steering is None
    assert session.step() is not None  # the session goes on, unsteered


def test_steering_that_makes_the_scores_non_finite_is_blamed(model, happy):
    """Additions past what Session.steer_vector allows, set on a context directly (the contract's
    set_residual_additions, which trusts its caller): the scores come out non-finite, and the error names the
    steering, not damaged weights."""
    context = model.open_context()
    context.set_residual_additions(np.full(happy.shape, 3e38, dtype=np.float32))
    with (
        np.errstate(over="ignore", invalid="ignore"),
        pytest.raises(
            ValueError,
            match=r"with the steering in force "
            r"\(a direction\): it is too strong",
        ),
    ):
        context.distributions(model.tokenizer.encode(PROMPT), engine.Settings())


def test_each_step_keeps_the_steering_it_was_drawn_under_across_rewinds_and_branches(smollm2, happy):
    """Session.steering_at(i) (issue 43, item 1): the tables step i was read under, whatever is in force now; a
    rewind drops them with the steps, a goto brings a branch's back, and its Inside numbers are the step's."""
    session = engine.Session(smollm2, PROMPT, max_new_tokens=8)
    session.step()
    session.steer_vector(happy, [LAYER], 8.0)
    table = session.residual_table
    session.step(), session.step()
    session.steer_vector(happy, [LAYER], 0.0)
    assert session.steering_at(0) == (None, None) and session.steering_at(3) == (None, None)  # the next: none now
    assert session.steering_at(1)[1] is table and session.steering_at(2)[1] is table
    steered_branch = session.path[-1]
    view = engine.inside_view(smollm2, session.ids[:-1], residual_add=session.steering_at(2)[1])
    assert view.probs[-1][session.steps[2].token_id] == pytest.approx(session.steps[2].model_probability, abs=1e-5)
    session.rewind(2)
    session.step()  # read as trained this time
    assert session.steering_at(1) == (None, None)
    session.goto(steered_branch)
    assert session.steering_at(1)[1] is table and session.steering_at(2)[1] is table
    for bad in (-1, 4, True, "1"):
        with pytest.raises(ValueError, match="a step index is an int from 0 to 3"):
            session.steering_at(bad)
