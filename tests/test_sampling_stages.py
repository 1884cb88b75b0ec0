"""The sampler stages in the Session, on the real story model: every new setting validated, the order as a
setting, what each stage removed recorded per candidate, the chosen token's rank after each stage, XTC's
draw from the session's random stream (replay and rewind stay exact), greedy after the penalties, traces
that record the whole chain, and the CLI's flags. (Exactness against llama.cpp: tests/test_*_exact.py.)"""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

import engine
from engine import Session, Settings
from engine.core.sampling import chain, run_chain, softmax

FIRST = "mia has a red ball."


@pytest.mark.parametrize("values, message", [
    ({"repeat_penalty": 0}, "repeat_penalty must be a number above 0"),
    ({"repeat_penalty": math.nan}, "repeat_penalty must be"),
    ({"presence_penalty": math.inf}, "presence_penalty must be a finite number"),
    ({"frequency_penalty": "1"}, "frequency_penalty must be a finite number"),
    ({"repeat_last_n": -2}, r"repeat_last_n must be -1 \(the whole text\), 0 \(off\) or a positive int"),
    ({"repeat_last_n": 1.5}, "repeat_last_n must be"),
    ({"dry_multiplier": -0.1}, r"dry_multiplier must be a number from 0 \(off\)"),
    ({"dry_base": 0.5}, "dry_base must be a number from 1 to 100"),
    ({"dry_allowed_length": 0}, "dry_allowed_length must be an int from 1 to 1000"),
    ({"dry_last_n": -5}, "dry_last_n must be -1"),
    ({"dry_sequence_breakers": "\n"}, "dry_sequence_breakers must be a list of non-empty strings"),
    ({"dry_sequence_breakers": ["a", ""]}, "dry_sequence_breakers must be a list of non-empty strings"),
    ({"xtc_probability": 1.5}, r"xtc_probability must be a number in \[0, 1\]"),
    ({"xtc_threshold": -0.1}, r"xtc_threshold must be a number in \[0, 1\]"),
    ({"typical_p": 0}, r"typical_p must be a number in \(0, 1\], or None"),
    ({"top_n_sigma": -1}, "top_n_sigma must be a number above 0"),
    ({"logit_bias": [[5, math.nan]]}, "logit_bias for token 5 must be a finite number"),
    ({"logit_bias": [[5, 1.0], [5, 2.0]]}, "logit_bias names token id 5 twice"),
    ({"logit_bias": [[-1, 1.0]]}, "a logit_bias token id must be an int from 0"),
    ({"logit_bias": [5, 1.0]}, "logit_bias must hold pairs of a token id and a finite bias"),
    ({"samplers": ["top_k", "temperature", "top_k"]}, "samplers must name each stage once"),
    ({"samplers": ["temperature", "mirostat"]}, "samplers: unknown stage 'mirostat'"),
    ({"samplers": ["top_k", "top_p", "min_p"]}, "samplers leaves out temperature.*always needed"),
    ({"samplers": ["temperature"], "top_k": 5}, "samplers leaves out top_k, whose settings are on"),
    ({"samplers": ["temperature", "top_k"], "repeat_penalty": 1.1}, "samplers leaves out penalties"),
])  # fmt: skip
def test_every_new_setting_is_checked_with_a_clear_message(story_model, values, message):
    with pytest.raises(ValueError, match=message):
        Settings(**values)
    session = Session(story_model, FIRST, max_new_tokens=3)
    session.step()
    before = (session.settings, list(session.actions))
    with pytest.raises(ValueError, match=message):
        session.update_settings(**values)
    assert (session.settings, session.actions) == before  # nothing half applied, nothing logged


def test_logit_bias_ids_are_checked_against_the_vocabulary(story_model):
    size = story_model.vocab_size
    with pytest.raises(ValueError, match=f"logit_bias names token id {size}, outside the vocabulary"):
        Session(story_model, FIRST, logit_bias=[[size, 1.0]])
    with pytest.raises(ValueError, match="unknown setting 'repeat_penalti'"):
        Session(story_model, FIRST, repeat_penalti=1.1)


def test_json_shapes_are_taken_and_normalised():
    settings = Settings(
        logit_bias={"7": 1.5, 3: -math.inf}, dry_sequence_breakers=["\n"], samplers=list(engine.LLAMA_CPP_ORDER)
    )
    assert settings.logit_bias == ((3, -math.inf), (7, 1.5)) and settings.samplers == engine.LLAMA_CPP_ORDER
    text = json.dumps(settings.to_dict(), allow_nan=False)  # strict JSON: a ban is null
    assert Settings(**json.loads(text)) == settings


def test_each_candidate_says_which_stage_removed_it_and_the_chosen_rank_per_stage(story_model):
    session = Session(story_model, FIRST, temperature=1.0, top_k=3, min_p=0.2, seed=1, max_new_tokens=6)
    step = session.step()
    cands = step.candidates
    assert cands.removed_by[3:] == ("top_k",) * (len(cands.token_ids) - 3)
    for index in range(3):
        removed = cands.removed_by[index]
        assert removed in (None, "min_p")
        assert (removed is None) == (cands.final[index] > 0)
        assert cands.removed_by_stage(index) == removed
    ranks = dict(step.stage_ranks)
    assert list(ranks) == ["temperature", "top_k", "top_p", "min_p"]
    chosen = cands.token_ids.index(step.token_id)
    assert ranks["temperature"] == step.model_rank == chosen + 1 and ranks["min_p"] >= 1
    session.force_token(session.peek().token_ids[10])  # the next position's 11th most likely token
    forced = session.step()
    assert dict(forced.stage_ranks)["top_k"] == 0 and forced.source == "forced"  # removed by top-k, taken anyway


def test_greedy_takes_the_best_token_left_after_the_penalties(story_model):
    """Greedy is the highest score after every stage: a strong repetition penalty changes what it takes."""
    plain = engine.generate(story_model, FIRST, max_new_tokens=20)
    penalised = engine.generate(story_model, FIRST, max_new_tokens=20, repeat_penalty=3.0, repeat_last_n=-1)
    assert plain.text != penalised.text
    for step in penalised.steps:
        final = np.array(step.candidates.final)
        assert step.probability == 1.0 and step.candidates.token_ids[int(np.argmax(final))] == step.token_id
    assert any(step.token_id != step.model_choice_id for step in penalised.steps)


def test_xtc_draws_from_the_sessions_stream_and_replays_exactly(story_model):
    """XTC takes one draw before the token's own at every sampled step while it is on; a rewind gives both
    back, and replay of the trace is identical."""
    settings = dict(temperature=1.0, xtc_probability=0.5, xtc_threshold=0.1, seed=0, max_new_tokens=30)
    session = Session(story_model, FIRST, **settings)
    session.run()
    draws = [(step.xtc_draw, step.draw) for step in session.steps]
    assert all(x is not None and u is not None for x, u in draws)
    assert any(x <= 0.5 for x, _ in draws) and any(x > 0.5 for x, _ in draws)  # it acted at some steps only
    acted = [s for s in session.steps if s.xtc_draw <= 0.5 and "xtc" in (s.candidates.removed_by or ())]
    assert acted, "XTC removed a top choice at a step where its draw said so"
    trace = session.trace()
    assert engine.replay(trace, story_model).identical
    before = [(s.xtc_draw, s.draw, s.token_id) for s in session.steps[-5:]]
    session.rewind(5)
    assert [(s.xtc_draw, s.draw, s.token_id) for s in (session.step() for _ in range(5))] == before
    greedy = Session(story_model, FIRST, **{**settings, "temperature": 0.0})
    step = greedy.step()
    assert step.draw is None and step.xtc_draw is not None  # greedy after XTC: only XTC draws


def test_the_llama_cpp_order_with_every_stage_runs_records_and_replays(story_model, tmp_path):
    session = Session(story_model, FIRST, temperature=0.9, top_k=20, top_p=0.95, min_p=0.02, seed=5,
                      max_new_tokens=20, repeat_penalty=1.2, presence_penalty=0.3, frequency_penalty=0.1,
                      dry_multiplier=0.8, xtc_probability=0.3, typical_p=0.9, top_n_sigma=2.5,
                      logit_bias=[[story_model.tokenizer.encode(" red")[0], -math.inf]],
                      samplers=engine.LLAMA_CPP_ORDER)  # fmt: skip
    session.run()
    step = session.steps[0]
    assert step.candidates.stage_names == engine.LLAMA_CPP_ORDER
    assert " red" not in session.generated_text  # banned by its bias
    path = tmp_path / "trace.json"
    engine.save_trace(session.trace(), path)
    loaded = engine.load_trace(path)
    assert loaded["schema"] == "token-playground/trace/5"
    assert (
        loaded["settings"]["samplers"] == list(engine.LLAMA_CPP_ORDER) and loaded["settings"]["dry_multiplier"] == 0.8
    )
    assert engine.replay(loaded, story_model).identical
    session.rewind(3)
    session.update_settings(samplers=list(engine.SAMPLERS))  # reordering is a logged settings change
    assert session.actions[-1]["kind"] == "settings"
    assert session.peek().stage_names[:3] == ("logit_bias", "penalties", "dry")


def run(*args):
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, timeout=120)


def test_the_cli_takes_the_sampler_flags(story_model):
    ban = story_model.tokenizer.encode(" red")[0]
    result = run("generate", FIRST, "--temperature", "0.9", "--seed", "2", "--repeat-penalty", "1.3",
                 "--samplers", "penalties;top_k;typ_p;temperature", "--top-k", "8", "--typical", "0.9",
                 "--logit-bias", f"{ban}-inf", "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["settings"]["samplers"] == ["logit_bias", "penalties", "top_k", "typical_p", "temperature"]
    assert data["settings"]["logit_bias"] == [[ban, None]]  # a ban: null in JSON (strict JSON has no -inf)
    assert list(data["steps"][0]["candidates"]["stages"]) == data["settings"]["samplers"]
    expected = engine.generate(story_model, FIRST, temperature=0.9, seed=2, repeat_penalty=1.3, top_k=8, typical_p=0.9,
                               logit_bias=[[ban, -math.inf]], samplers=["logit_bias", "penalties", "top_k", "typical_p", "temperature"])  # fmt: skip
    assert data["text"] == expected.text
    for args, message in ((["--repeat-penalty", "0"], "repeat_penalty must be a number above 0"),
                          (["--logit-bias", "12x"], "--logit-bias must be a token id then a signed number"),
                          (["--samplers", "top_k;temperature;bogus"], "unknown stage 'bogus'")):  # fmt: skip
        result = run("generate", FIRST, *args)
        assert result.returncode == 2 and message in result.stderr, result.stderr


def test_a_ban_over_tokens_already_removed_still_bans_the_others():
    """A logit-bias ban that names a token an earlier stage removed bans the rest it names; a ban of every
    token still in the row is refused (it used to give way silently, drawing a banned token)."""
    scores = np.array([-np.inf, 1.0, 2.0, 3.0], dtype=np.float32)
    inf = -float("inf")
    partial = run_chain(chain(Settings(logit_bias=((0, inf), (1, inf), (2, inf)))), scores, softmax(scores))
    assert partial["logit_bias"].dense_logits().tolist() == [inf, inf, inf, 3.0]
    assert partial["logit_bias"].probs_at([3]).tolist() == [1.0]
    with pytest.raises(ValueError, match="logit_bias bans all 3 tokens the grammar or the stages before it left"):
        run_chain(chain(Settings(logit_bias=((1, inf), (2, inf), (3, inf)))), scores, softmax(scores))
