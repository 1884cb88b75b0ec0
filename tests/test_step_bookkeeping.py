"""A step's bookkeeping made cheaper (issue 30, the story model's step): token texts decoded once per model,
records filled without the frozen dataclasses' per-field __init__. What a step records is unchanged: the
exactness tests, the hypothesis test of step records (test_ranking.py) and the trace replays say so."""

from dataclasses import fields

import numpy as np

import engine
from engine import Session
from engine.core.step_maker import Distributions
from engine.story.model import forward


def test_a_second_session_on_the_same_model_decodes_no_token_text_again(monkeypatch):
    model = engine.load_model()
    decoded = []
    decode = model.tokenizer.decode
    monkeypatch.setattr(model.tokenizer, "decode", lambda ids: decoded.append(list(ids)) or decode(ids))
    first = Session(model, "mia has a red ball.", temperature=1.0, seed=4, max_new_tokens=12).run()
    assert decoded  # the first session decoded its tokens and candidates
    decoded.clear()
    again = Session(model, "mia has a red ball.", temperature=1.0, seed=4, max_new_tokens=12).run()
    assert [s.token for s in again] == [s.token for s in first]
    assert decoded == []  # every text was known from the first session


def test_a_steps_records_filled_at_once_hold_every_field_as_the_dataclasses_own_would(story_model):
    session = Session(story_model, "ben has a blue kite.", temperature=0.8, top_k=30, repeat_penalty=1.2, seed=7,
                      max_new_tokens=6)  # fmt: skip
    for step in session.run():
        for record in (step, step.candidates):
            made = type(record)(**{f.name: getattr(record, f.name) for f in fields(record)})
            assert vars(record) == vars(made) and record == made
    dists = session._context.distributions(session.ids, session.settings)
    assert set(vars(dists)) == {f.name for f in fields(Distributions)}


def test_a_one_token_pass_gives_the_bits_of_the_forward_with_the_models_own_parameters(story_model):
    """forward_cached feeds one token with its gains and biases as [1, n] views (no broadcast): the same bits."""
    ids = story_model.tokenizer.encode("mia has a red ball. mia goes to the park. at the park, mia")
    fast, plain = story_model.new_cache(), story_model.new_cache()
    story_model.forward_cached(ids[:3], fast)
    forward(story_model.params, story_model.config, np.asarray(ids[:3]), plain)
    for token in ids[3:]:
        one = story_model.forward_cached([token], fast)
        assert one.tobytes() == forward(story_model.params, story_model.config, np.asarray([token]), plain).tobytes()
