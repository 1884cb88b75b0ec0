"""Steering a Session on the real story model: step, force, insert, choose, rewind, rules, tools."""

import random
import sys

import numpy as np
import pytest

import engine
from engine import Rule, Session, next_token_probs
from engine.core.sampling import softmax

FIRST = "mia has a red ball."
TO_BEN = "mia has a red ball. mia goes to the park. at the park, mia gives the ball to ben."
AT_COLOR = TO_BEN + " now ben has the"


def model_probs(model, ids):
    return softmax(model.scores(ids)[-1])  # the full forward: independent of the session's cache


class CountingDecode:
    """Wraps model.forward_cached to record how many new positions each forward pass covers."""

    def __init__(self, model, monkeypatch):
        self.calls = []
        original = model.forward_cached

        def forward_cached(ids, cache, **options):
            self.calls.append(len(ids))
            return original(ids, cache, **options)

        monkeypatch.setattr(model, "forward_cached", forward_cached)


def snapshot(session):
    return (
        list(session.ids), session.text, list(session.steps), len(session.actions), session._context.cache.length,
        session._rng.getstate(), session._forced, session._returned, session.stopped,
    )  # fmt: skip


def test_step_records_the_token_and_every_stage(story_model):
    session = Session(story_model, FIRST, temperature=1.3, top_k=5, top_p=0.9, seed=2)
    step = session.step()
    scores = story_model.scores(story_model.tokenizer.encode(FIRST))[-1]
    assert step.source == "model" and step.token == story_model.tokenizer.decode([step.token_id])
    ranking = np.argsort(-scores, kind="stable")
    cand = step.candidates
    assert list(cand.token_ids) == ranking[:20].tolist()
    np.testing.assert_allclose(cand.raw, softmax(scores)[ranking[:20]], atol=1e-6)
    assert cand.stage_names == ("temperature", "top_k", "top_p", "min_p")  # every stage, by name, in order
    np.testing.assert_allclose(cand.stage("temperature"), next_token_probs(scores, 1.3)[ranking[:20]], atol=1e-6)
    after_k = next_token_probs(scores, 1.3, top_k=5)
    np.testing.assert_allclose(cand.stage("top_k"), after_k[ranking[:20]], atol=1e-6)
    final = next_token_probs(scores, 1.3, top_k=5, top_p=0.9)
    np.testing.assert_allclose(cand.stage("top_p"), final[ranking[:20]], atol=1e-6)
    assert cand.stage("min_p") == cand.stage("top_p") == cand.final  # min-p off: a no-op
    assert cand.stage("top_k")[5:] == (0.0,) * 15  # removed tokens shown at 0
    assert step.probability == pytest.approx(float(final[step.token_id]), abs=1e-6)
    assert step.model_probability == pytest.approx(float(softmax(scores)[step.token_id]), abs=1e-6)
    assert step.model_rank == ranking.tolist().index(step.token_id) + 1
    assert step.model_choice_id == ranking[0] and step.model_choice == " mia"


def test_step_returns_none_once_stopped(story_model):
    session = Session(story_model, FIRST, max_new_tokens=3)
    assert [s is not None for s in (session.step(), session.step(), session.step())] == [True] * 3
    assert session.step() is None and session.stopped == "max_new_tokens"


def test_generate_is_the_session_loop(story_model):
    session = Session(story_model, FIRST, temperature=1.0, seed=8)
    session.run()
    result = engine.generate(story_model, FIRST, temperature=1.0, seed=8)
    assert result.steps == session.steps and result.text == session.text and result.stopped == session.stopped


def test_force_token_takes_an_unlikely_token_and_uses_no_draw(story_model):
    session = Session(story_model, FIRST, temperature=1.0, seed=5)
    session.step()
    purple_ish = story_model.tokenizer.ids[" pen"]  # an object where the model expects a name
    session.force_token(purple_ish)
    forced = session.step()
    assert forced.source == "forced" and forced.token == " pen" and forced.draw is None
    assert forced.model_rank > 1 and forced.model_probability < 0.01
    ids = story_model.tokenizer.encode(FIRST) + [session.steps[0].token_id]
    assert forced.model_probability == pytest.approx(float(model_probs(story_model, ids)[purple_ish]), abs=1e-6)
    session.run()
    rng = random.Random(5)
    draws = [s.draw for s in session.steps if s.source == "model"]
    assert draws == [rng.random() for _ in draws]  # forced steps consumed none


def test_insert_text_is_one_batched_forward_with_the_models_own_probabilities(story_model, monkeypatch):
    session = Session(story_model, TO_BEN)
    counter = CountingDecode(story_model, monkeypatch)
    steps = session.insert_text(" now ben has the blue pen")
    new = story_model.tokenizer.encode(" now ben has the blue pen")
    assert [s.token_id for s in steps] == new and all(s.source == "forced" for s in steps)
    assert counter.calls == [len(story_model.tokenizer.encode(TO_BEN)), len(new) - 1]  # prefill, then one batch
    ids = story_model.tokenizer.encode(TO_BEN)
    for step in steps:
        assert step.model_probability == pytest.approx(float(model_probs(story_model, ids)[step.token_id]), abs=1e-5)
        ids.append(step.token_id)
    session.run()
    assert session.text.startswith(TO_BEN + " now ben has the blue pen")


def test_choose_picks_the_more_probable_option_and_records_both(story_model):
    session = Session(story_model, AT_COLOR, temperature=1.0)
    steps = session.choose([" blue", " red"])
    ids = story_model.tokenizer.encode(AT_COLOR)
    expected = {}
    for option in (" blue", " red"):
        p, context = 1.0, list(ids)
        for token in story_model.tokenizer.encode(option):
            p *= float(model_probs(story_model, context)[token])
            context.append(token)
        expected[option] = p
    assert "".join(s.token for s in steps) == " red"
    recorded = dict(steps[0].options)
    assert recorded.keys() == {" blue", " red"}
    for option, p in expected.items():
        assert recorded[option] == pytest.approx(p, rel=1e-4, abs=1e-9)
    assert all(s.draw is None for s in steps)


def test_choose_against_the_model_when_told(story_model):
    session = Session(story_model, AT_COLOR)
    session.insert_text(" blue")  # the person overrides the model's color
    session.run()
    assert session.text.startswith(AT_COLOR + " blue ball.")


def test_rewind_reproduces_the_dropped_steps_including_the_random_state(story_model, monkeypatch):
    session = Session(story_model, FIRST, temperature=1.5, seed=21)
    session.run()
    before = [s.to_dict() for s in session.steps]
    counter = CountingDecode(story_model, monkeypatch)
    session.rewind(10)
    assert counter.calls == []  # O(1): no forward pass
    # the cache stands one token short where that position's row was let go (more than RECENT_ROWS back): the
    # next step feeds that token alone again, as it was first fed, which makes the same row
    assert len(session.steps) == len(before) - 10 and session._context.cache.length == len(session.ids) - 1
    session.run()
    assert [s.to_dict() for s in session.steps] == before


def test_a_long_text_keeps_the_rows_of_its_last_tokens_only_and_rewinds_anywhere_the_same(story_model):
    """Memory grows with the text by the KV cache (and the steps' records), not a row of scores a token (issue
    42: 1 MB a Gemma 3 token); every rewind, however far, still writes the same steps again."""
    from engine.backends.kept_rows import RECENT_ROWS

    session = Session(story_model, FIRST, temperature=1.5, seed=3, max_new_tokens=60)
    session.run()
    before = [s.to_dict() for s in session.steps]
    assert len(session.steps) > 3 * RECENT_ROWS
    assert len(session._context._rows) <= RECENT_ROWS + 1  # the prompt's first row, and the last few
    for back in (1, RECENT_ROWS + 3, 2, len(before) - 1, len(before)):
        session.rewind(back)
        session.run()
        assert [s.to_dict() for s in session.steps] == before, back


def test_rewind_then_change_is_a_branch(story_model):
    session = Session(story_model, FIRST)
    session.run()
    session.rewind(len(session.steps))
    assert session.text == FIRST and session.steps == []
    session.insert_text(" ben")
    session.run()
    assert session.text.startswith(FIRST + " ben")


def test_rules_insert_choose_and_tool_fire_once_per_occurrence(story_model):
    seen = []

    def tool(text):
        seen.append(text)
        return " tom"

    rules = [Rule(" to", insert=" the"), Rule("now ben has the", choose=[" gold", " tan"]), Rule(" at the", tool=tool)]
    session = Session(story_model, FIRST, rules=rules)
    session.run()
    sources = [s.source for s in session.steps]
    assert "rule" in sources and "tool" in sources
    assert seen and all(text.endswith(" at the") for text in seen)
    assert len(seen) == session.text.count(" at the tom")
    occurrences = session.text.count(" to the")
    assert sum(1 for i, s in enumerate(session.steps) if s.source == "rule" and s.token == " the") == occurrences


def test_regex_rule_matches_at_the_end_of_the_text(story_model):
    rule = Rule(r"now (mia|ben|leo|bob|kim|tom) has the", tool=lambda text: " " + text.split()[3], regex=True)
    session = Session(story_model, "kim has a blue fan.", temperature=1.0, seed=0, rules=[rule])
    session.run()
    tool_steps = [s for s in session.steps if s.source == "tool"]
    assert "".join(s.token for s in tool_steps) == " blue"
    assert rule.matches("x now bob has the") and not rule.matches("now bob has the red")


def test_a_failing_tool_does_not_end_the_session(story_model):
    def broken(text):
        raise RuntimeError("no network")

    session = Session(story_model, FIRST, rules=[Rule(" goes", tool=broken), Rule(" at", tool=lambda t: "CAPS")])
    session.run()
    assert session.stopped == "end of story"
    assert any("no network" in e for e in session.events)
    assert any("'C' at position 0" in e for e in session.events)


def test_command_tool_turns_every_failure_into_readable_text(tmp_path):
    ok = engine.CommandTool([sys.executable, "-c", "import sys; print(sys.stdin.read()[-5:])"])
    assert ok("hello world") == "world\n"
    assert (
        engine.CommandTool([sys.executable, "-c", "import sys; sys.exit(3)"])("x") == "[command exited with status 3]"
    )
    slow = engine.CommandTool([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2)
    assert slow("x") == "[command timed out after 0.2 s]"
    missing = engine.CommandTool([str(tmp_path / "no-such-program")])("x")
    assert missing.startswith("[command could not run:")
    long = engine.CommandTool([sys.executable, "-c", "print('a' * 10000)"], max_output=100)
    assert long("x") == "a" * 100
    outcome = engine.CommandTool(
        [sys.executable, "-c", "import sys; sys.exit(1)"], on_exit={0: " passed"}, otherwise=" failed"
    )
    assert outcome("x") == " failed"


BAD_STEERING = [
    (lambda s: s.force_token(96), "token id 96 is outside the vocabulary"),
    (lambda s: s.force_token(-1), "outside the vocabulary"),
    (lambda s: s.force_token(True), "token id must be an int"),
    (lambda s: s.insert_text("Blue"), "'B' at position 0 is not in the story model's alphabet"),
    (lambda s: s.insert_text(""), "inserted text must be non-empty"),
    (lambda s: s.insert_text(" the" * 60), "cannot add 60 tokens"),
    (lambda s: s.insert_tokens([5, 200]), "token id 200 is outside the vocabulary"),
    (lambda s: s.choose([]), "options must be a non-empty list"),
    (lambda s: s.choose(" red"), "options must be a non-empty list"),
    (lambda s: s.choose([" red", ""]), "each option must be non-empty"),
    (lambda s: s.choose([" red", "RED"]), "'R' at position 0"),
    (lambda s: s.choose([" red", " red"]), "options must differ"),
    (lambda s: s.rewind(99), "can rewind 0 to 2 steps"),
    (lambda s: s.rewind(-1), "can rewind 0 to 2 steps"),
]


@pytest.mark.parametrize("action, message", BAD_STEERING)
def test_bad_steering_is_refused_and_changes_nothing(story_model, action, message):
    session = Session(story_model, FIRST, temperature=1.0, seed=1)
    session.step()
    session.step()
    before = snapshot(session)
    with pytest.raises(ValueError, match=message):
        action(session)
    assert snapshot(session) == before


def test_forcing_past_the_context_is_refused(story_model):
    session = Session(story_model, "leo" + " the" * 63)
    before = snapshot(session)
    with pytest.raises(ValueError, match="64 of the model's 64 positions are used, 0 left"):
        session.force_token(5)
    assert snapshot(session) == before
    session = Session(story_model, "leo" + " the" * 62)
    session.force_token(5)
    with pytest.raises(ValueError, match="cannot add 1 token"):
        session.insert_text(" the")  # the pending forced token holds the last position


@pytest.mark.parametrize("kwargs, message", [
    ({}, "exactly one action .* has none"),
    ({"insert": " a", "choose": [" b"]}, "exactly one action .* has insert, choose"),
    ({"insert": ""}, "insert must be non-empty"),
    ({"choose": " red"}, "choose must be a list of strings"),
    ({"tool": "not callable"}, "tool must be callable"),
])  # fmt: skip
def test_bad_rules_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Rule("now", **kwargs)
    with pytest.raises(ValueError, match="non-empty string"):
        Rule("", insert=" a")
    with pytest.raises(ValueError, match="not a valid regular expression"):
        Rule("(", insert=" a", regex=True)


def test_rules_with_unencodable_text_are_refused_before_anything_runs(story_model):
    with pytest.raises(ValueError, match="'X' at position 1"):
        Session(story_model, FIRST, rules=[Rule(" to", insert=" X")])


def test_peek_shows_the_next_distribution_and_costs_the_step_nothing(story_model, monkeypatch):
    session = Session(story_model, FIRST, temperature=1.0, seed=3)
    plain = Session(story_model, FIRST, temperature=1.0, seed=3)
    preview = session.peek()
    counter = CountingDecode(story_model, monkeypatch)
    step = session.step()
    assert counter.calls == []  # the peek already computed what the step needed
    assert step.candidates == preview and step == plain.step()
    full = Session(story_model, "leo" + " the" * 63)
    assert full.peek() is None


def test_update_settings_branches_and_rewinding_past_it_restores_the_old_settings(story_model):
    session = Session(story_model, FIRST, temperature=1.0, seed=1)
    for _ in range(6):
        session.step()
    first_six = [s.to_dict() for s in session.steps]
    session.update_settings(temperature=1.4, seed=7)
    assert session.settings.seed == 7 and session.settings.temperature == 1.4
    session.run()
    branch = [s.to_dict() for s in session.steps]
    assert branch[:6] == first_six
    session.rewind(len(session.steps) - 6)  # back to where the settings changed: they still hold
    assert session.settings.seed == 7
    session.run()
    assert [s.to_dict() for s in session.steps] == branch
    session.rewind(3)
    session.rewind(len(session.steps) - 4)  # before the change: the old settings and random stream
    assert session.settings.seed == 1 and session.settings.temperature == 1.0
    session.run()
    original = engine.generate(story_model, FIRST, temperature=1.0, seed=1)
    assert [s.to_dict() for s in session.steps] == [s.to_dict() for s in original.steps]
    assert engine.replay(session.trace(), story_model).identical


def test_bad_settings_updates_are_refused_and_change_nothing(story_model):
    session = Session(story_model, FIRST, temperature=1.0)
    session.step()
    before = snapshot(session)
    for changes, message in (({"temperature": -2}, "temperature must be"), ({"top_k": 500}, "top_k must be"),
                             ({"colour": 1}, "unknown setting 'colour'")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            session.update_settings(**changes)
        assert snapshot(session) == before
