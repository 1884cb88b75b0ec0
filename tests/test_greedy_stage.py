"""Greedy decoding (temperature 0) as the chain's last stage, "greedy": every stage before it shows what it
does to the distribution and the records name the stage that really removed each candidate; greedy takes
the best token of what the chain left (ties: the lowest id), so typical-p and XTC act before it chooses (as in
llama.cpp). Traces of schema 1-4, recorded when greedy kept the best token at the temperature stage, replay
with that old greedy bit for bit (Settings.greedy_at)."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from recorded_traces import assert_replays_as_recorded

import engine
from engine import Session, Settings
from engine.core.sampling import chain, run_chain, softmax

FIRST = "mia has a red ball."
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def test_under_greedy_top_k_removes_the_third_candidate_and_greedy_the_second(story_model):
    step = Session(story_model, FIRST, top_k=2).step()
    cands = step.candidates
    assert cands.removed_by[2:] == ("top_k",) * (len(cands.token_ids) - 2)
    assert cands.removed_by[0] is None and cands.removed_by[1] == "greedy"
    assert cands.stage_names == ("temperature", "top_k", "top_p", "min_p", "greedy")
    assert cands.stage("temperature") == cands.raw  # at T = 0 the temperature stage leaves the row as it is
    assert sum(p > 0 for p in cands.stage("top_k")) == 2 and cands.stage("top_k")[1] > 0  # top-k's own work
    assert cands.final == (1.0,) + (0.0,) * (len(cands.token_ids) - 1)  # the final stage: greedy's one token
    assert step.probability == 1.0 and step.token_id == cands.token_ids[0] == step.model_choice_id
    assert dict(step.stage_ranks) == {"temperature": 1, "top_k": 1, "top_p": 1, "min_p": 1, "greedy": 1}


def test_a_token_forced_past_greedy_is_ranked_by_every_stage_and_removed_by_greedy(story_model):
    session = Session(story_model, FIRST, top_k=3)
    second = session.peek().token_ids[1]
    session.force_token(second)
    forced = session.step()
    assert dict(forced.stage_ranks) == {"temperature": 2, "top_k": 2, "top_p": 2, "min_p": 2, "greedy": 0}
    assert forced.probability == 0.0 and forced.source == "forced"


def test_greedy_takes_the_token_the_old_greedy_took_where_only_the_contract_and_penalties_act(story_model):
    """Top-k, top-p, min-p and the score changes keep the best token, so greedy at the end picks what greedy
    at the temperature stage picked: only the records changed."""
    settings = dict(max_new_tokens=40, top_k=5, top_p=0.5, min_p=0.3, repeat_penalty=1.5, dry_multiplier=0.8)
    new = engine.generate(story_model, FIRST, **settings)
    old = engine.generate(story_model, FIRST, greedy_at="temperature", **settings)
    assert [s.token_id for s in new.steps] == [s.token_id for s in old.steps]
    assert all(s.candidates.removed_by[1] != "temperature" for s in new.steps)
    assert all(set(s.candidates.removed_by) <= {None, "temperature"} for s in old.steps)  # what hid the others


def test_xtc_acts_before_greedy_chooses(story_model):
    """XTC removes every token above its threshold but the least likely of them: greedy then takes that one,
    as llama.cpp does (its temperature comes last). The old greedy left XTC one token: it never acted."""
    settings = dict(max_new_tokens=30, xtc_probability=1.0, xtc_threshold=0.05)
    new = engine.generate(story_model, FIRST, **settings)
    acted = [s for s in new.steps if s.candidates.removed_by[0] == "xtc"]
    assert acted and all(s.token_id != s.model_choice_id for s in acted)
    for step in new.steps:  # greedy: the best that XTC left
        before_greedy = np.array(step.candidates.stage("xtc"))
        assert step.token_id == step.candidates.token_ids[int(np.argmax(before_greedy))]
    old = engine.generate(story_model, FIRST, greedy_at="temperature", **settings)
    assert all(s.token_id == s.model_choice_id for s in old.steps)


scores_rows = arrays(np.float32, st.integers(1, 40), elements=st.sampled_from([-3.0, 0.0, 0.5, 2.0, 2.0, 7.25]))


@given(scores=scores_rows, top_k=st.one_of(st.none(), st.integers(1, 40)),
       top_p=st.one_of(st.none(), st.floats(0.001, 1.0)), min_p=st.one_of(st.none(), st.floats(0.0, 1.0)))  # fmt: skip
def test_greedy_keeps_the_best_score_ties_to_the_lowest_id_at_either_place(scores, top_k, top_p, min_p):
    top_k = None if top_k is None else min(top_k, scores.size)
    best = int(np.argmax(scores))  # numpy's argmax: the first of ties
    for greedy_at in ("end", "temperature"):
        settings = Settings(top_k=top_k, top_p=top_p, min_p=min_p, greedy_at=greedy_at)
        rows = run_chain(chain(settings), scores, softmax(scores.copy()))
        final = rows[next(reversed(rows))]
        assert final.token_ids().tolist() == [best] and final.probs.tolist() == [1.0]
        assert (greedy_at == "end") == ("greedy" in rows)


def test_greedy_at_is_checked_and_recorded():
    with pytest.raises(ValueError, match="greedy_at must be one of end, temperature, got 'first'"):
        Settings(greedy_at="first")
    assert Settings().greedy_at == "end" and Settings().to_dict()["greedy_at"] == "end"
    assert [stage.name for stage in chain(Settings(temperature=0.5))][-1] == "min_p"  # sampled: no greedy stage
    assert engine.STAGE_NAMES == ("temperature", "top_k", "top_p", "min_p", "greedy")


def test_a_greedy_trace_records_schema_5_and_replays_bit_for_bit(story_model):
    session = Session(story_model, FIRST, top_k=2, typical_p=0.9, max_new_tokens=12)
    session.run()
    session.update_settings(temperature=0.8, seed=4)
    session.rewind(3)
    session.run()
    session.update_settings(temperature=0.0)
    session.rewind(2)
    session.run()
    trace = session.trace()
    assert trace["schema"] == "token-playground/trace/5" and trace["settings"]["greedy_at"] == "end"
    assert all(a["settings"]["greedy_at"] == "end" for a in trace["actions"] if a["kind"] == "settings")
    report = engine.replay(trace, story_model)
    assert report.identical, report.summary()


def test_a_schema_4_trace_recorded_with_the_old_greedy_replays_bit_for_bit(story_model):
    """tests/fixtures/story-trace-v4.json was written by the engine of trace schema 4, greedy at the temperature
    stage: T 0 with top-k 2 and XTC on (which saw one token, so did nothing), a settings change to T 0.8 with
    typical-p, a rewind, T 0 again, and an expansion. It replays identically, with the old greedy; replayed as
    if it were schema 5 it differs at once (the records, then the tokens XTC now changes)."""
    trace = engine.load_trace(FIXTURES / "story-trace-v4.json")
    assert trace["schema"] == "token-playground/trace/4" and "greedy_at" not in trace["settings"]
    assert_replays_as_recorded("story-trace-v4.json", trace, story_model)  # bit for bit on its kind of CPU
    session, _report = engine.replay_session(trace, story_model)
    assert len(session.tree.nodes) > len(trace["steps"]) + 1  # the expansion's branches too
    assert session.settings.greedy_at == "temperature"  # continuing it keeps its greedy; a new trace says so
    assert session.trace()["settings"]["greedy_at"] == "temperature"
    assert engine.replay(session.trace(), story_model).identical
    as_new = dict(trace, schema="token-playground/trace/5")
    assert engine.replay(as_new, story_model).first_difference["field"] == "candidates.stages.temperature[0]"


def test_any_older_schema_replays_with_the_old_greedy(story_model):
    """A trace of schema 4 or older (here made by the engine's old greedy, its greedy_at left out as those
    schemas had none) replays with the old greedy from its start and through its settings actions."""
    session = Session(story_model, FIRST, temperature=0.7, top_k=2, xtc_probability=1.0, xtc_threshold=0.05,
                      seed=2, max_new_tokens=20, greedy_at="temperature")  # fmt: skip
    session.run()
    session.rewind(8)
    session.update_settings(temperature=0.0)
    session.run()
    trace = session.trace()
    for settings in [trace["settings"], *(a["settings"] for a in trace["actions"] if a["kind"] == "settings")]:
        del settings["greedy_at"]
    for schema in ("token-playground/trace/4", "token-playground/trace/3"):
        report = engine.replay(dict(trace, schema=schema), story_model)
        assert report.identical, report.summary()
    assert not engine.replay(trace, story_model).identical  # as schema 5 it is the new greedy: it differs


def test_smollm2_under_greedy_shows_what_a_yes_no_grammar_allowed(smollm2_llamacpp):
    """The grammar's tokens from outside the raw top 20 join the candidates (the best of what greedy chose
    from); the one greedy took is kept, the other allowed ones are removed by greedy, the model's own best by
    the grammar."""
    model = smollm2_llamacpp
    prompt = model.chat_prompt("Is the sky blue? Answer yes or no.")
    step = Session(model, prompt, max_new_tokens=2, grammar='root ::= ("yes" | "no") "."').step()
    cands = step.candidates
    allowed = [i for i, p in enumerate(cands.stage("grammar")) if p > 0]
    assert len(allowed) >= 2  # "yes", "no", and the tokens that start them
    assert cands.stage_names == ("grammar", "temperature", "top_k", "top_p", "min_p", "greedy")
    assert cands.stage("min_p") == cands.stage("grammar")  # at neutral settings the contract's stages keep them
    assert cands.removed_by[0] == "grammar" and step.token_id in cands.token_ids
    chosen = cands.token_ids.index(step.token_id)
    assert cands.removed_by[chosen] is None and step.probability == 1.0 and chosen in allowed
    assert all(cands.removed_by[i] == "greedy" for i in allowed if i != chosen)
    assert {cands.tokens[i][0] for i in allowed} == {"y", "n"}  # what the grammar allowed: yes and no
