"""The generate() contract on the real shipped story model."""

import json
import random
import subprocess
import sys

import numpy as np
import pytest

import engine
from engine import next_token_probs
from engine.core.sampling import draw, softmax
from engine.story import corpus as stories

FIRST = "mia has a red ball."


def prefix_scores(model, text_ids):
    return model.scores(text_ids)[-1]  # the full forward, independent of the session's KV cache


def test_result_shape_and_json(story_model):
    result = engine.generate(story_model, FIRST, temperature=0.8, top_k=5, top_p=0.95, min_p=0.01, seed=3)
    assert result.text == FIRST + "".join(step.token for step in result.steps)
    assert result.stopped == "end of story"
    assert result.seed == 3 and result.settings.top_k == 5
    data = json.loads(json.dumps(result.to_dict()))
    assert data["settings"] == {**engine.Settings().to_dict(), "max_new_tokens": 60, "temperature": 0.8,
                                "top_k": 5, "top_p": 0.95, "min_p": 0.01, "seed": 3}  # fmt: skip
    assert data["settings"]["samplers"] == list(engine.SAMPLERS)  # the whole chain, in its order
    assert data["steps"][0].keys() >= {"token", "token_id", "probability"}
    assert data["text"] == result.text and data["stopped"] == "end of story"


def test_greedy_takes_the_highest_score_at_every_step(story_model):
    result = engine.generate(story_model, FIRST)
    ids = story_model.tokenizer.encode(FIRST)
    for step in result.steps:
        scores = prefix_scores(story_model, ids)
        assert step.token_id == int(np.flatnonzero(scores == scores.max())[0])
        assert step.probability == 1.0
        ids.append(step.token_id)
    assert result.text.endswith("has the red ball.\n")


def test_greedy_ignores_the_seed(story_model):
    texts = {engine.generate(story_model, FIRST, seed=seed).text for seed in range(5)}
    assert len(texts) == 1


def test_temperature_one_probability_is_the_plain_softmax_of_the_model(story_model):
    result = engine.generate(story_model, FIRST, temperature=1.0, seed=4)
    ids = story_model.tokenizer.encode(FIRST)
    for step in result.steps:
        expected = softmax(prefix_scores(story_model, ids))[step.token_id]
        assert step.probability == pytest.approx(float(expected), abs=1e-5)
        ids.append(step.token_id)


def test_lower_temperature_sharpens_the_real_distribution(story_model):
    ids = story_model.tokenizer.encode("mia has a red ball. mia goes to the")  # the place is a free choice
    scores = prefix_scores(story_model, ids)
    tops = [next_token_probs(scores, t).max() for t in (0.5, 1.0, 2.0)]
    assert tops[0] > tops[1] > tops[2]
    entropy = [-(p[p > 0] * np.log(p[p > 0])).sum() for p in (next_token_probs(scores, t) for t in (0.5, 1.0, 2.0))]
    assert entropy[0] < entropy[1] < entropy[2]


@pytest.mark.parametrize("k", [1, 2, 3, 10, 96])
def test_top_k_keeps_exactly_k_of_the_real_scores(story_model, k):
    scores = prefix_scores(story_model, story_model.tokenizer.encode(FIRST))
    probs = next_token_probs(scores, 1.0, top_k=k)
    assert np.count_nonzero(probs) == k
    kept = set(np.flatnonzero(probs))
    assert kept == set(np.argsort(-scores, kind="stable")[:k].tolist())


def test_top_k_steps_only_ever_take_one_of_the_k_best(story_model):
    result = engine.generate(story_model, FIRST, temperature=1.5, top_k=3, seed=11)
    ids = story_model.tokenizer.encode(FIRST)
    for step in result.steps:
        scores = prefix_scores(story_model, ids)
        assert step.token_id in np.argsort(-scores, kind="stable")[:3]
        ids.append(step.token_id)


def test_each_sampled_step_uses_one_draw_of_random_random_seed(story_model):
    result = engine.generate(story_model, FIRST, temperature=1.5, top_p=0.95, seed=42)
    rng = random.Random(42)
    ids = story_model.tokenizer.encode(FIRST)
    for step in result.steps:
        u = rng.random()
        assert step.draw == u
        probs = next_token_probs(prefix_scores(story_model, ids), 1.5, top_p=0.95)
        assert step.token_id == draw(probs, u)
        ids.append(step.token_id)


def test_same_seed_same_text_and_different_seeds_can_differ(story_model):
    runs = [engine.generate(story_model, FIRST, temperature=1.0, seed=s) for s in (1, 1, 2, 3, 4, 5)]
    assert runs[0].text == runs[1].text and runs[0].steps == runs[1].steps
    assert len({r.text for r in runs}) > 1


def test_stops_after_the_newline_token(story_model):
    result = engine.generate(story_model, FIRST)
    assert result.steps[-1].token == "\n" and result.stopped == "end of story"
    assert sum(step.token == "\n" for step in result.steps) == 1


def test_stops_at_max_new_tokens(story_model):
    result = engine.generate(story_model, FIRST, max_new_tokens=5)
    assert len(result.steps) == 5 and result.stopped == "max_new_tokens"


def test_context_full_is_checked_before_each_step(story_model):
    tokenizer = story_model.tokenizer
    unit = " the"  # one token
    full = "leo" + unit * 63  # 64 tokens
    assert len(tokenizer.encode(full)) == 64
    result = engine.generate(story_model, full)
    assert result.steps == [] and result.stopped == "context full"
    almost = "leo" + unit * 62
    result = engine.generate(story_model, almost, max_new_tokens=60)
    assert len(result.steps) == 1
    assert result.stopped in ("context full", "end of story")


def test_a_long_generation_fills_the_context_and_never_asks_for_position_64(story_model, monkeypatch):
    trace = json.loads((engine.resources_dir() / "generation-trace.json").read_text())
    prompt = trace["context full"]["prompt"]
    asked = []
    original = story_model.forward_cached

    def recording_decode(ids, cache, **options):
        asked.append(cache.length + len(ids))
        return original(ids, cache, **options)

    monkeypatch.setattr(story_model, "forward_cached", recording_decode)
    result = engine.generate(story_model, prompt)
    assert result.stopped == "context full"
    assert len(story_model.tokenizer.encode(result.text)) == 64
    assert max(asked) <= 64


INVALID = [
    (dict(prompt=""), "^empty prompt$"),
    (dict(prompt="leo" + " the" * 64), "^prompt of 65 tokens is longer than the 64 positions the model has$"),
    (dict(prompt="Mia has a red ball."), "^'M' at position 0 is not in the story model's alphabet"),
    (dict(temperature=-1.0), "temperature must be 0 or a finite number from 0.01 to 100"),
    (dict(temperature=float("nan")), "temperature must be 0 or a finite number from 0.01 to 100"),
    (dict(temperature=float("inf")), "temperature must be 0 or a finite number from 0.01 to 100"),
    (dict(temperature=True), "temperature must be 0 or a finite number from 0.01 to 100"),
    (dict(temperature="hot"), "temperature must be 0 or a finite number from 0.01 to 100"),
    (dict(temperature=0.001), "temperature must be 0 or a finite number from 0.01 to 100"),
    (dict(top_k=0), "top_k must be"),
    (dict(top_k=97), r"top_k must be an int from 1 to 96 \(the vocabulary size\), got 97"),
    (dict(top_k=True), "top_k must be"),
    (dict(top_k=2.5), "top_k must be"),
    (dict(top_p=0), r"top_p must be a number in \(0, 1\]"),
    (dict(top_p=1.1), r"top_p must be a number in \(0, 1\]"),
    (dict(min_p=-0.01), r"min_p must be a number in \[0, 1\]"),
    (dict(min_p=2), r"min_p must be a number in \[0, 1\]"),
    (dict(max_new_tokens=0), "max_new_tokens must be a positive int"),
    (dict(max_new_tokens=-3), "max_new_tokens must be a positive int"),
    (dict(max_new_tokens=2.0), "max_new_tokens must be a positive int"),
    (dict(max_new_tokens=True), "max_new_tokens must be a positive int"),
    (dict(seed=0.5), "seed must be an int"),
    (dict(seed=None), "seed must be an int"),
]


@pytest.mark.parametrize("kwargs, message", INVALID)
def test_invalid_input_raises_and_generates_nothing(story_model, monkeypatch, kwargs, message):
    calls = []
    monkeypatch.setattr(story_model, "forward_cached", lambda *a: calls.append(a))
    arguments = {"prompt": FIRST, **kwargs}
    with pytest.raises(ValueError, match=message):
        engine.generate(story_model, **arguments)
    assert calls == []  # the model was never run


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=120)


def test_cli_json_matches_generate(story_model):
    out = run_cli("generate", FIRST, "--temperature", "1.2", "--top-k", "4", "--seed", "9", "--json")
    assert out.returncode == 0, out.stderr
    expected = engine.generate(story_model, FIRST, temperature=1.2, top_k=4, seed=9).to_dict()
    assert json.loads(out.stdout) == json.loads(json.dumps(expected))


def test_cli_rejects_bad_settings_clearly():
    out = run_cli("generate", FIRST, "--top-p", "0")
    assert out.returncode == 2 and "top_p must be a number in (0, 1]" in out.stderr and "Traceback" not in out.stderr


def test_recorded_settings_trace_is_reproduced():
    out = run_cli("trace", "--check")
    assert out.returncode == 0, out.stdout + out.stderr
    trace = json.loads((engine.resources_dir() / "generation-trace.json").read_text())
    greedy = trace["settings"][0]
    assert greedy["setting"] == "greedy" and greedy["well_formed"] == 60 and greedy["keeps_color_and_object"] >= 57
    assert trace["seed comparison"]["seed 1 reproduces"] is True
    assert trace["context full"]["stopped"] == "context full"
    assert set(trace["color position"]["top 5"]) == {"T 0.5", "T 1.0", "T 2.0"}


def test_trace_check_fails_when_the_record_differs(tmp_path):
    record = tmp_path / "trace.json"
    record.write_text("{}")
    out = run_cli("trace", "--check", "--record", str(record))
    assert out.returncode == 1 and "DIFFERS" in out.stdout


def test_the_test_stories_never_feed_the_trace():
    trace_text = (engine.resources_dir() / "generation-trace.json").read_text()
    _train, _dev, test = stories.split()
    for story in test:
        assert stories.first_sentence(story) + " " + story.split(". ")[1] not in trace_text
