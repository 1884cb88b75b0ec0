"""Wrong errors and silent ignores (issue 25, items 9 and 10): what raised TypeError or IndexError, or went on
with NaN, is a ValueError saying what is allowed, and nothing changes."""

import math

import numpy as np
import pytest

import engine
from engine import Session

PROMPT = "mia has a red ball."


@pytest.mark.parametrize("seeds", [None, 5, 2.5, "12", {1: 2}])
def test_run_seeds_of_something_not_a_list_of_seeds_is_a_value_error(story_model, seeds):
    session = Session(story_model, PROMPT, temperature=1.0)
    with pytest.raises(ValueError, match=r"seeds must be a list \(or range\) of ints from 0 to 2147483647"):
        session.run_seeds(seeds)
    assert session.steps == [] and session.actions == []


@pytest.mark.parametrize("text, message", [
    (None, "the text to score must be a string or a list of token ids, got None"),
    (5, "the text to score must be a string or a list of token ids, got 5"),
    (b"mia", "the text to score must be a string or a list of token ids"),
])  # fmt: skip
def test_score_of_something_not_a_text_is_a_value_error(story_model, text, message):
    with pytest.raises(ValueError, match=message):
        engine.score(story_model, text)


def test_score_with_an_unknown_setting_names_it_and_the_settings(story_model):
    with pytest.raises(ValueError, match=r"unknown setting 'bogus'; settings are \['dry_allowed_length'"):
        engine.score(story_model, PROMPT, bogus=1)
    assert engine.score(story_model, PROMPT, temperature=0.5).steps  # a known one still works


@pytest.mark.parametrize("grid", [0, -3, 2.5, None, True])
def test_inside_view_with_a_grid_of_no_columns_is_a_value_error(story_model, grid):
    ids = story_model.tokenizer.encode(PROMPT)
    with pytest.raises(ValueError, match=r"grid_positions must be an int >= 1 \(the lens grid's columns\)"):
        engine.inside_view(story_model, ids, grid)
    assert engine.inside_view(story_model, ids, 1).grid_top.shape[1] == 1


@pytest.mark.parametrize("factor", [math.nan, math.inf, -math.inf, 11.0])
def test_nan_or_infinite_head_scales_are_refused_not_turned_into_nan_probabilities(story_model, factor):
    ids = story_model.tokenizer.encode(PROMPT)
    table = np.ones(story_model.heads_shape, dtype=np.float32)
    table[0, 1] = factor
    with pytest.raises(ValueError, match=r"head_scales must be None or a 1 x 8 table of factors from -10 to 10"):
        engine.inside_view(story_model, ids, head_scales=table)
    with pytest.raises(ValueError, match="head_scales must be None or a 1 x 8 table"):
        engine.inside_view(story_model, ids, head_scales=np.ones((2, 8)))
    session = Session(story_model, PROMPT)
    with pytest.raises(ValueError, match="a head's factor must be a number from -10 to 10"):
        session.steer_heads([(0, 1, factor)])
    assert session.head_scales == () and session.actions == []
    table[0, 1] = 0.5
    assert np.isfinite(engine.inside_view(story_model, ids, head_scales=table).probs).all()


# --- 10: lone surrogates in string settings -----------------------------------------------------------------
@pytest.mark.parametrize("breakers", [["\ud800"], ["\n", "a\udfffb"]])
def test_a_dry_breaker_with_a_lone_surrogate_is_refused_before_any_step(story_model, tmp_path, breakers):
    with pytest.raises(ValueError, match="a DRY sequence breaker holds a lone surrogate"):
        engine.Settings(dry_sequence_breakers=breakers)
    with pytest.raises(ValueError, match="a DRY sequence breaker holds a lone surrogate"):
        Session(story_model, PROMPT, dry_multiplier=0.8, dry_sequence_breakers=breakers)
    session = Session(story_model, PROMPT, dry_multiplier=0.8)
    session.step()
    with pytest.raises(ValueError, match="a DRY sequence breaker holds a lone surrogate"):
        session.update_settings(dry_sequence_breakers=breakers)
    session.step()  # the session goes on as it was, and saves
    engine.save_trace(session.trace(), tmp_path / "t.json")
    assert engine.replay(engine.load_trace(tmp_path / "t.json"), story_model).identical
