"""Issue 15, the engine's part: every step records the raw and final entropy, the chosen token's surprisal and
the top-1/top-2 margin over the whole vocabulary; engine.score reads any text once and gives each token after
the first the record a generated step has, equal to what the steps recorded when the model wrote that text."""

import math

import numpy as np
import pytest

import engine
from engine.core.sampling import softmax

FIRST = "mia has a red ball."


def direct(scores, token_id):
    """The definitions, written out in float64 over the whole row."""
    x = scores.astype(np.float64)
    log_p = x - x.max() - np.log(np.exp(x - x.max()).sum())
    p = np.exp(log_p)
    top = np.sort(p)[::-1]
    return -(p * log_p).sum(), -log_p[token_id], top[0] - top[1]


@pytest.mark.parametrize("which", ["story", "smollm2"])
def test_each_step_records_entropy_surprisal_and_margin_by_their_definitions(which, story_model):
    model = story_model if which == "story" else engine.load_model("smollm2", backend="numpy")
    prompt = FIRST if which == "story" else "The history of computing"
    session = engine.Session(model, prompt, temperature=0.9, top_k=20, seed=2, max_new_tokens=6)
    steps = session.run()
    context = model.open_context()
    for index, step in enumerate(steps):
        ids = session.prompt_ids + [s.token_id for s in steps[:index]]
        scores = context._scores(ids)
        entropy, surprisal, margin = direct(scores, step.token_id)
        assert step.entropy == pytest.approx(entropy, abs=2e-5, rel=1e-4)
        assert step.surprisal == pytest.approx(surprisal, abs=2e-5, rel=1e-4)
        assert step.margin == pytest.approx(margin, abs=1e-6)
        final = np.array(step.candidates.final)
        assert 0 <= step.final_entropy <= step.entropy + 1e-6 or final.max() < 1  # top-k 20 narrows it
    greedy = engine.Session(model, prompt, max_new_tokens=2).run()[0]
    assert greedy.final_entropy == 0.0 and greedy.surprisal == pytest.approx(-math.log(greedy.model_probability))


def test_a_generated_text_scores_as_its_steps_recorded(story_model):
    session = engine.Session(story_model, FIRST, temperature=1.0, seed=5, max_new_tokens=20)
    session.run()
    scored = engine.score(story_model, session.ids, temperature=1.0)
    assert scored.token_ids == tuple(session.ids) and len(scored.steps) == len(session.ids) - 1
    generated = scored.steps[len(session.prompt_ids) - 1 :]
    for mine, theirs in zip(generated, session.steps):
        assert mine.token_id == theirs.token_id and mine.source == "forced"
        assert mine.model_probability == pytest.approx(theirs.model_probability, abs=1e-5)
        assert mine.candidates.token_ids == theirs.candidates.token_ids
    assert scored.log_likelihood == pytest.approx(-sum(s.surprisal for s in scored.steps))
    assert scored.perplexity == pytest.approx(math.exp(-scored.log_likelihood / len(scored.steps)))
    as_text = engine.score(story_model, session.text)
    assert as_text.text == session.text and as_text.log_likelihood == pytest.approx(scored.log_likelihood, abs=1e-4)


def test_smollm2_scores_its_own_text_within_1e_5():
    model = engine.load_model("smollm2", backend="numpy")
    session = engine.Session(model, "The history of computing", temperature=0.8, seed=3, max_new_tokens=30)
    session.run()
    scored = engine.score(model, session.ids)
    generated = scored.steps[len(session.prompt_ids) - 1 :]
    worst = max(abs(a.model_probability - b.model_probability) for a, b in zip(generated, session.steps))
    assert worst < 1e-5, worst
    data = scored.to_dict()
    assert data["perplexity"] == scored.perplexity and len(data["steps"]) == len(scored.steps)


def test_bad_texts_are_named(story_model):
    from fake_backend import FakeStreamingBackend

    for text, message in (("", "the text to score is empty"), ("a", "at least two tokens"),
                          ("mia has a Red ball.", "R"), ([3, 10**9], "token ids must be ints from 0"),
                          (" mia has a red ball." * 20, r"the text is \d+ tokens long; story model reads at most 64")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            engine.score(story_model, text)
    served = engine.score(FakeStreamingBackend(), "abcab")  # a server: scored through its own forced-token path
    assert len(served.steps) == 4 and served.log_likelihood < 0
    with pytest.raises(ValueError, match="top_k must be"):
        engine.score(story_model, FIRST, top_k=0)


def test_the_raw_entropy_of_a_uniform_row_is_log_v():
    from engine.core.step_maker import raw_entropy_and_surprisal

    scores = np.zeros(1000, dtype=np.float32)
    entropy, surprisal = raw_entropy_and_surprisal(scores, softmax(scores), 3)
    assert entropy == pytest.approx(math.log(1000), rel=1e-6) and surprisal == pytest.approx(math.log(1000))


def test_the_cli_scores_a_text(story_model):
    import json
    import subprocess
    import sys

    text = "mia has a red ball. mia goes to the park."
    result = subprocess.run([sys.executable, "-m", "engine", "score", text, "--json"], capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["log_likelihood"] == pytest.approx(engine.score(story_model, text).log_likelihood)
    result = subprocess.run([sys.executable, "-m", "engine", "score", "mia has a Red ball."], capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert result.returncode == 2 and "'R' at position 10" in result.stderr


def test_a_sessions_prompt_is_scored_once_under_its_settings(story_model):
    session = engine.Session(story_model, "mia has a red ball. mia goes to the", temperature=0.7, seed=1)
    scored = session.score_prompt()
    assert scored is session.score_prompt()  # once
    assert scored.token_ids == tuple(session.prompt_ids) and scored.settings == session.initial_settings
    direct = engine.score(story_model, session.prompt_ids, temperature=0.7, seed=1)
    assert [s.model_probability for s in scored.steps] == [s.model_probability for s in direct.steps]
    first = session.step()
    assert first.surprisal is not None and session.actions == [{"kind": "sample"}]  # scoring logged nothing
    with pytest.raises(ValueError, match="at least two tokens"):
        engine.Session(story_model, "a").score_prompt()
