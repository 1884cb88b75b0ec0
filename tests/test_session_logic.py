"""The Session's own rules on fake backends (tests/fake_backend.py): rewind, settings epochs, rules, choose,
force, batched inserts, replay and streams. Every expected value is worked out from the fake's table, so
these run in a fraction of a second and need no real model or server."""

import json
import random
from dataclasses import replace

import numpy as np
import pytest
from fake_backend import END, ID, TABLE, FakeBackend, FakeStreamingBackend, probabilities

import engine
from engine import Rule, Session
from engine.core.trace import ACTION_KINDS


@pytest.fixture
def model():
    return FakeBackend()


@pytest.fixture
def streaming():
    return FakeStreamingBackend()


def ids_of(text: str) -> list[int]:
    return [ID[c] for c in text]


def p(before: str, token: str) -> float:
    """The raw model probability of `token` after `before`, as a Step records it."""
    return float(probabilities(ID[before])[ID[token]])


def snapshot(session):
    return (list(session.ids), session.text, list(session.steps), json.dumps(session.actions), session._ended_at,
            session._context.cache.ids[:], session._rng.getstate(), session._forced, session._returned,
            list(session.events), session.settings)  # fmt: skip


def replays(session, backend) -> engine.ReplayReport:
    report = engine.replay(session.trace(), backend)
    assert report.identical, report.summary() + " " + " ".join(report.notes)
    return report


# --- steps from the table ------------------------------------------------------------------------------


def test_greedy_takes_the_argmax_of_each_row_ties_to_the_lower_id(model):
    session = Session(model, "a", max_new_tokens=7)
    session.run()
    assert session.generated_text == "bc abc " and session.stopped == "max_new_tokens"
    for before, step in zip(session.ids[:-1], session.steps):
        row = TABLE[before]
        assert step.token_id == int(np.argmax(row)) and step.source == "model"
        assert step.probability == 1.0 and step.draw is None and step.model_rank == 1
        assert step.model_probability == float(probabilities(before)[step.token_id])
        assert step.candidates.token_ids == tuple(np.argsort(-row, kind="stable").tolist())
    after_b = session.steps[1]  # c and d tie after b: c, the lower id, is greedy's and ranks first
    assert after_b.candidates.tokens[:2] == ("c", "d") and after_b.candidates.raw[0] == after_b.candidates.raw[1]
    assert after_b.candidates.final[:2] == (1.0, 0.0)
    assert model.calls == [1] * 7  # one position per step: the prompt, then each token once (the last not yet)
    assert session._context.cache.ids == session.ids[:-1]


def test_a_sampled_step_draws_from_the_row_with_the_sessions_random_stream(model):
    session = Session(model, "c", max_new_tokens=12, temperature=1.0, seed=7)
    session.run()
    rng = random.Random(7)
    for before, step in zip(session.ids[:-1], session.steps):
        u = rng.random()
        raw = probabilities(before)
        assert step.draw == u and step.token_id == int(np.searchsorted(np.cumsum(raw), u, side="right"))
        assert step.probability == step.model_probability == float(raw[step.token_id])  # T = 1, no filter


def test_settings_filter_the_row_and_peek_costs_the_step_nothing(model):
    session = Session(model, "c", temperature=1.0, top_k=3)
    shown = session.peek()
    # the nearly uniform row after c: " " (0.3), then a and e tied (0.2: lower id first), then b and d (0.1)
    assert shown.tokens[:5] == (" ", "a", "e", "b", "d")
    kept = probabilities(ID["c"])[ids_of(" ae")]
    assert shown.final[:3] == pytest.approx(tuple(kept / kept.sum()), abs=1e-7) and shown.final[3:] == (0.0,) * 5
    assert shown.raw == tuple(probabilities(ID["c"])[list(shown.token_ids)].tolist())
    assert model.calls == [1]
    step = session.step()
    assert model.calls == [1] and step.candidates == shown and step.token in (" ", "a", "e")


def test_the_end_token_and_a_full_context_stop_the_session(model):
    session = Session(model, "e")
    assert [s.token for s in session.run()] == [".", ""] and session.stopped == "end of text"
    assert session.ids[-1] == END and session.step() is None
    short = Session(FakeBackend(context_length=4), "a")
    short.run()
    assert short.text == "abc " and short.stopped == "context full" and short.peek() is None
    with pytest.raises(ValueError, match="cannot add 1 token: 4 of the model's 4 positions are used, 0 left"):
        short.insert_text("a")


# --- rewind --------------------------------------------------------------------------------------------


def test_rewind_brings_the_same_steps_again_without_a_forward_pass(model):
    session = Session(model, "c", max_new_tokens=10, temperature=1.5, seed=21)
    session.run()
    steps, text, ids = list(session.steps), session.text, list(session.ids)
    assert len(steps) == 10
    model.calls.clear()
    session.rewind(6)
    assert model.calls == []  # O(1): the rows are kept by position
    assert session.steps == steps[:4] and session.ids == ids[:5] and session.text == text[:5]
    assert session._context.cache.ids == session.ids and session.actions[-1] == {"kind": "rewind", "n": 6}
    session.run()
    assert session.steps == steps and session.text == text  # the same draws again
    assert model.calls == [1] * 5  # the first step's row was kept: 6 steps, 5 forwards of one position


def test_rewind_to_the_prompt_and_bad_counts(model):
    session = Session(model, "a", max_new_tokens=5)
    session.run()
    before = snapshot(session)
    for n in (6, -1, True, 1.0, "1"):
        with pytest.raises(ValueError, match="can rewind 0 to 5 steps"):
            session.rewind(n)
        assert snapshot(session) == before
    session.rewind(0)
    assert snapshot(session) == before  # nothing to do: nothing logged
    session.rewind(5)
    assert session.text == "a" and session.steps == [] and session.ids == [ID["a"]] and session.stopped is None
    session.insert_text("d")  # a branch
    session.run()
    assert session.text == "ad abc"


def test_steps_that_are_not_drawn_use_no_random_number(model):
    session = Session(model, "c", max_new_tokens=20, temperature=1.0, seed=3)
    session.step()
    session.force_token(ID["e"])
    session.step()
    session.insert_text("ab")
    session.choose(["c", "d"])
    session.step()
    rng = random.Random(3)
    first, second = rng.random(), rng.random()
    assert [s.draw for s in session.steps] == [first, None, None, None, None, second]
    assert [s.source for s in session.steps] == ["model", "forced", "forced", "forced", "forced", "model"]
    session.rewind(5)  # to just after the first sampled step: its draw stays used
    assert session.step().draw == second


# --- settings epochs -----------------------------------------------------------------------------------


def test_rewinding_to_before_a_settings_change_restores_the_earlier_settings(model):
    reference = Session(FakeBackend(), "c", max_new_tokens=30, temperature=1.0, seed=1)
    reference.run()
    session = Session(model, "c", max_new_tokens=30, temperature=1.0, seed=1)
    for _ in range(3):
        session.step()
    session.update_settings(temperature=0.0)
    greedy = [session.step(), session.step()]
    assert all(s.draw is None and s.probability == 1.0 and s.model_rank == 1 for s in greedy)
    session.update_settings(temperature=2.0, seed=9)
    assert session.step().draw == random.Random(9).random()  # a fresh stream from the new seed
    session.rewind(1)  # the change applies from step 5 on: still in force
    assert session.settings.seed == 9 and session.step().draw == random.Random(9).random()
    session.rewind(3)  # back to the greedy epoch
    assert session.settings == replace(session.initial_settings, temperature=0.0)
    session.rewind(1)  # to before the first change: the first settings and their random stream
    assert session.settings == session.initial_settings
    session.run()
    assert session.steps == reference.steps and session.text == reference.text
    kinds = [a["kind"] for a in session.actions]
    assert kinds.count("settings") == 2 and kinds.count("rewind") == 3
    replays(session, FakeBackend())


def test_a_change_of_max_new_tokens_alone_keeps_the_random_stream(model):
    reference = Session(FakeBackend(), "c", max_new_tokens=10, temperature=1.0, seed=3)
    reference.run()
    session = Session(model, "c", max_new_tokens=4, temperature=1.0, seed=3)
    session.run()
    assert session.stopped == "max_new_tokens"
    session.update_settings(max_new_tokens=10)
    session.run()
    assert session.steps == reference.steps  # as if it had been 10 from the start
    session.rewind(6)  # the change applies from step 4 on: still in force there
    assert session.settings.max_new_tokens == 10 and session.stopped is None
    session.rewind(1)
    assert session.settings.max_new_tokens == 4 and session.stopped is None
    session.run()
    assert session.steps == reference.steps[:4] and session.stopped == "max_new_tokens"
    replays(session, FakeBackend())


def test_settings_changes_that_change_nothing_log_nothing(model):
    session = Session(model, "c", temperature=1.0, seed=4)
    session.step()
    session.update_settings(temperature=1.0)
    assert session.actions == [{"kind": "sample"}]
    session.update_settings(seed=5)
    session.update_settings(seed=6)  # no step in between: the second replaces the first epoch
    assert session._epochs[-1].settings.seed == 6 and len(session._epochs) == 2
    assert session.step().draw == random.Random(6).random()
    before = snapshot(session)
    for bad in ({"top_k": 9}, {"temperature": -1}, {"colour": 1}):
        with pytest.raises(ValueError):
            session.update_settings(**bad)
        assert snapshot(session) == before


# --- rules ---------------------------------------------------------------------------------------------


def test_rules_insert_choose_and_tool_fire_once_per_occurrence(model):
    seen = []

    def tool(text):
        seen.append(text)
        return " "

    rules = [Rule("c", insert="d"), Rule("cd", tool=tool), Rule(" ", choose=["ab", "e."])]
    session = Session(model, "a", max_new_tokens=14, rules=rules)
    session.run()
    assert session.text == "abcd abcd abcd "
    sources = "".join({"model": "m", "rule": "r", "tool": "t"}[s.source] for s in session.steps)
    assert sources == "mmrtrrmrtrrmrt"  # b c, d, " ", a b, c, d, " ", a b, c, d, " " (then max_new_tokens)
    assert seen == ["abcd", "abcd abcd", "abcd abcd abcd"]
    chosen = session.steps[4]  # greedy: "ab" has probability 1 under the settings, "e." 0
    assert chosen.options == (("ab", 1.0), ("e.", 0.0)) and chosen.source == "rule"
    assert session.actions[2:6] == [
        {"kind": "insert", "token_ids": [ID["d"]], "source": "rule"},
        {"kind": "insert", "token_ids": [ID[" "]], "source": "tool"},
        {"kind": "choose", "options": ["ab", "e."], "source": "rule"},
        {"kind": "sample"},
    ]
    replays(session, FakeBackend())  # what the tool gave is in the log: replay calls no tool
    assert len(seen) == 3


def test_a_rule_does_not_fire_twice_at_the_same_place(model):
    """A tool that gives nothing at the prompt: the model samples instead. The sample fails; the next step
    at the same place does not call the tool again."""
    seen = []
    session = Session(model, "c", rules=[Rule("c", tool=lambda text: seen.append(text) or "")])
    model.broken = True
    with pytest.raises(ValueError, match="broken"):
        session.step()
    model.broken = False
    assert session.step().source == "model" and seen == ["c"]


def test_a_tool_that_fails_or_gives_what_cannot_be_inserted_is_an_event(model):
    def broken(text):
        raise RuntimeError("no network")

    rules = [Rule("b", tool=broken), Rule("c", tool=lambda text: 7), Rule(" ", tool=lambda text: "A")]
    session = Session(model, "a", max_new_tokens=4, rules=rules)
    session.run()
    assert session.text == "abc a" and all(s.source == "model" for s in session.steps)
    assert session.events == [
        "rule 'b': the tool failed: RuntimeError: no network",
        "rule 'c': the tool returned int, not text",
        "rule ' ': cannot insert 'A': 'A' at position 0 is not in the fake alphabet",
    ]


def test_set_rules_mid_session(model):
    session = Session(model, "a", max_new_tokens=10)
    session.step(), session.step()
    assert session.text == "abc"
    with pytest.raises(ValueError, match="'X' at position 0"):
        session.set_rules([Rule("c", insert="X")])
    assert session.rules == () and len(session.actions) == 2
    session.set_rules([Rule("c", insert="e")])  # the text already ends with its trigger: it fires at once
    assert session.step().source == "rule" and session.text == "abce"
    assert session.actions[2:] == [
        {"kind": "rules", "rules": [{"when": "c", "regex": False, "action": "insert", "insert": "e"}]},
        {"kind": "insert", "token_ids": [ID["e"]], "source": "rule"},
    ]
    assert session.set_rules(session.rules) is session.rules and len(session.actions) == 4  # no change
    session.set_rules([])
    session.run()
    assert session.text == "abce." and session.stopped == "end of text"
    replays(session, FakeBackend())


# --- choose, force, insert -----------------------------------------------------------------------------


def test_choose_takes_the_most_probable_option_as_a_whole(model):
    session = Session(model, " ", temperature=1.0)
    steps = session.choose(["ab", "da", "e"])
    expected = {"ab": p(" ", "a") * p("a", "b"), "da": p(" ", "d") * p("d", "a"), "e": p(" ", "e")}
    assert dict(steps[0].options) == expected and steps[1].options is None
    assert "".join(s.token for s in steps) == max(expected, key=expected.get) == "ab"
    assert [s.model_probability for s in steps] == [p(" ", "a"), p("a", "b")]
    assert all(s.source == "forced" and s.draw is None for s in steps)
    assert session.actions == [{"kind": "choose", "options": ["ab", "da", "e"], "source": "forced"}]
    assert session._context.cache.ids == ids_of(" a")  # the options' trial positions are forgotten


def chosen(session, options) -> str:
    return "".join(step.token for step in session.choose(options))


def test_choose_ties_go_to_the_raw_probability_then_the_first_listed(model):
    assert chosen(Session(model, "b", temperature=1.0), ["d", "c"]) == "d"  # c and d tie after b
    assert chosen(Session(model, "b", temperature=1.0), ["c", "d"]) == "c"
    assert chosen(Session(model, "b", temperature=1.0, top_k=1), ["d", "c"]) == "c"  # top-k keeps only c
    # after "a", top_k=1 keeps only b: "e" and "c" both have 0 under the settings; the raw model prefers c
    steps = Session(model, "a", temperature=1.0, top_k=1).choose(["e", "c"])
    assert steps[0].token == "c" and steps[0].options == (("e", 0.0), ("c", 0.0))


def test_bad_choices_are_refused_and_change_nothing(model):
    session = Session(model, "a")
    before = snapshot(session)
    for options in ("ab", [], ["a", "a"], ["a", ""], ["a", "X"], [3]):
        with pytest.raises(ValueError):
            session.choose(options)
        assert snapshot(session) == before


def test_force_token_takes_the_token_with_the_rows_probability(model):
    session = Session(model, "a")  # greedy: b
    session.force_token(ID["d"])
    session.force_token(ID["e"])  # a later force replaces an earlier one
    step = session.step()
    assert (step.token, step.source, step.draw, step.probability) == ("e", "forced", None, 0.0)
    assert step.model_probability == p("a", "e") and step.model_choice == "b"
    assert step.model_rank == 4  # b, then c and d (tied: lower id first), then e
    assert session.actions == [{"kind": "force", "token_id": ID["e"]}]
    before = snapshot(session)
    for bad in (len(TABLE), -1, True, 1.5, "a"):
        with pytest.raises(ValueError, match="token id"):
            session.force_token(bad)
        assert snapshot(session) == before


def test_insert_is_one_batched_forward_with_the_rows_probabilities(model):
    session = Session(model, "a")
    session.step()  # b
    session.peek()  # the row after b
    model.calls.clear()
    steps = session.insert_text("cd e")
    assert model.calls == [3]  # the new positions in one forward; the last new token is not fed yet
    assert session._context.cache.ids == session.ids[:-1]
    for before, step in zip("bcd ", steps):
        assert step.source == "forced" and step.draw is None and step.model_probability == p(before, step.token)
        assert step.probability == (1.0 if step.token_id == int(np.argmax(TABLE[ID[before]])) else 0.0)
    assert [s.token for s in steps] == list("cd e") and session.text == "abcd e"
    assert session.actions == [{"kind": "sample"}, {"kind": "insert", "token_ids": ids_of("cd e"), "source": "forced"}]
    with pytest.raises(ValueError, match="source must be 'forced', 'rule' or 'tool'"):
        session.insert_text("a", source="model")


@pytest.mark.parametrize("action", ["step", "insert", "choose"])
def test_a_failing_forward_pass_changes_nothing(model, action):
    reference = Session(FakeBackend(), "c", temperature=1.0, seed=5, max_new_tokens=20)
    reference.step(), reference.insert_text("ab"), reference.run()
    session = Session(model, "c", temperature=1.0, seed=5, max_new_tokens=20)
    session.step(), session.insert_text("ab")
    before = snapshot(session)
    model.broken = True
    perform = {"insert": lambda: session.insert_text("ab"), "choose": lambda: session.choose(["ab", "c"])}
    with pytest.raises(ValueError, match="broken"):
        perform.get(action, session.step)()
    assert snapshot(session) == before
    model.broken = False
    session.run()
    assert session.steps == reference.steps


class FailingOnce(Exception):
    pass


def test_a_step_that_fails_after_its_draws_gives_them_back(model):
    """The step's XTC and token draws are taken, then making its record fails (a token's text cannot be read,
    once): the session is as before, the random stream included, and the steps after are those of a session
    that never failed (the stream is rebuilt from the draws counted, not saved before every step)."""
    settings = dict(temperature=1.0, seed=7, max_new_tokens=12, xtc_probability=0.5, xtc_threshold=0.1)
    reference = Session(FakeBackend(), "a", **settings)
    reference.run()
    session = Session(model, "a", **settings)
    session.step(), session.step()
    before = snapshot(session)
    decode, failed = model.tokenizer.decode, []

    def fails_once(ids):
        if not failed:
            failed.append(ids)
            raise FailingOnce("cannot read that token")
        return decode(ids)

    model.tokenizer.decode = fails_once
    session._context._texts.clear()  # every token's text is read again
    with pytest.raises(FailingOnce):
        session.step()
    after = snapshot(session)
    assert failed and after[:5] + after[6:] == before[:5] + before[6:]  # [5]: the cache keeps the row it read
    session.run()
    assert session.steps == reference.steps and session._draws == reference._draws > 12


# --- replay --------------------------------------------------------------------------------------------


def test_a_trace_of_every_kind_of_action_replays_bit_for_bit_in_the_same_chunks(model, tmp_path):
    seen = []
    tool = Rule("cd", tool=lambda text: seen.append(text) or " ")
    session = Session(model, "a", max_new_tokens=30, temperature=1.2, top_k=5, seed=4, rules=[Rule("c", insert="d")])
    session.step(), session.step()
    session.force_token(ID["d"])
    session.step()
    session.insert_text(" a")
    session.choose(["bc", "e."])
    session.update_settings(temperature=0.7, top_p=0.9, seed=8)
    session.step(), session.step(), session.step()
    left = session.path[-1]  # the branch a rewind leaves: kept in the tree
    session.rewind(2)
    session.set_rules([Rule("c", insert="d"), tool])
    session.update_settings(max_new_tokens=40)
    session.run()
    session.goto(left)  # that branch back, as it was
    session.run()
    grown = session.expand(top_k=2, depth=2, budget=6, raw=True)
    session.name_branch(grown.nodes[0], "first")
    session.pin_branch(grown.nodes[0])
    session.delete_branch(grown.nodes[1])
    session.delete_branch(grown.nodes[2])
    session.undo_tree_edit()  # the last delete taken back
    session.set_thinking_budget("a", "d", 3)  # logged; replay runs no budget (what it inserts is in the log)
    trace = session.trace()
    # "heads" and "vector" need a model whose layers the engine runs: replayed in tests/test_inside.py and
    # tests/test_steering_vectors.py
    assert {a["kind"] for a in trace["actions"]} == ACTION_KINDS - {"stream", "heads", "vector"} and seen
    engine.save_trace(trace, tmp_path / "trace.json")
    fresh, called = FakeBackend(), len(seen)
    report = engine.replay(engine.load_trace(tmp_path / "trace.json"), fresh)
    assert report.identical and report.steps == len(session.steps) > 20, report.summary()
    assert report.nodes == len(session.tree.nodes) - 1 > report.steps and "every branch" in report.summary()
    assert fresh.calls == model.calls  # the same forward passes, in the same chunks
    assert len(seen) == called  # replay called no tool


def test_replay_on_another_table_says_where_it_differs(model):
    session = Session(model, "a", max_new_tokens=5)
    session.run()
    other = TABLE.copy()
    other[ID["b"], ID["d"]] = 2.5  # after b, d now beats c
    with pytest.raises(engine.OtherModelError, match="^This trace was recorded with fake bigram .*, and the loaded"):
        engine.replay(session.trace(), FakeBackend(table=other))  # another model's weights: refused, unless asked
    report = engine.replay(session.trace(), FakeBackend(table=other), other_model=True)
    assert not report.identical and report.notes[0].startswith("recorded with fake bigram")
    difference = report.first_difference
    assert [difference[key] for key in ("step", "field", "recorded", "replayed")] == [1, "token", "c", "d"]


# --- streams (a server-like backend) -------------------------------------------------------------------


def test_a_stream_is_one_request_and_one_action_until_it_is_stopped(streaming):
    session = Session(streaming, "a", max_new_tokens=20)
    taken = [session.step(stream=True) for _ in range(4)]
    assert "".join(s.token for s in taken) == "bc a" and all(s.token_id == -1 for s in taken)
    assert session.ids == [ID["a"], -1, -1, -1, -1]  # the stream gave text only
    assert streaming.requests == ["stream"] and session.actions == [{"kind": "stream", "n": 4}]
    session.interrupt()  # Stop: the stream closes and the ids it left unknown are filled in
    assert streaming.requests == ["stream", "closed"] and session.ids == ids_of("abc a")
    assert [s.token_id for s in session.steps] == ids_of("bc a")
    assert session.steps == [replace(s, token_id=i) for s, i in zip(taken, ids_of("bc a"))]
    session.interrupt()  # nothing open: nothing asked
    assert session.step() is not None and session.actions == [{"kind": "stream", "n": 4}, {"kind": "sample"}]
    session.step(stream=True)  # a new stream, a new action
    assert session.actions[-1] == {"kind": "stream", "n": 1} and streaming.requests.count("stream") == 2
    session.interrupt()
    assert session.text == "abc abc"
    replays(session, FakeStreamingBackend())


def test_a_backend_that_cannot_stream_samples_one_step_at_a_time(model):
    session = Session(model, "a", max_new_tokens=3)
    session.run(stream=True)
    assert session.actions == [{"kind": "sample"}] * 3 and session.text == "abc "


STEERING = {
    "force": lambda s: s.force_token(ID["e"]),
    "insert": lambda s: s.insert_text("e"),
    "choose": lambda s: s.choose(["e", "d"]),
    "settings": lambda s: s.update_settings(max_new_tokens=30),
    "rules": lambda s: s.set_rules([Rule("e", insert=".")]),
    "rewind": lambda s: s.rewind(1),
}


@pytest.mark.parametrize("steer", sorted(STEERING))
def test_any_steering_closes_an_open_stream(streaming, steer):
    session = Session(streaming, "a", max_new_tokens=20)
    session.step(stream=True), session.step(stream=True)
    STEERING[steer](session)
    assert streaming.requests[:2] == ["stream", "closed"] and session._context._stream is None
    assert -1 not in session.ids and session.actions[0] == {"kind": "stream", "n": 2}
    while session.step(stream=True).source != "model":  # a forced token goes first
        pass
    assert session.actions[-1] == {"kind": "stream", "n": 1} and streaming.requests.count("stream") == 2
    session.interrupt()
    replays(session, FakeStreamingBackend())


def test_a_rule_that_fires_mid_stream_closes_it(streaming):
    session = Session(streaming, "a", max_new_tokens=10, rules=[Rule("c", insert="d")])
    session.run(stream=True)
    session.interrupt()
    assert session.text == "abcd abcd a" and -1 not in session.ids
    insert = {"kind": "insert", "token_ids": [ID["d"]], "source": "rule"}
    assert session.actions == [{"kind": "stream", "n": 2}, insert, {"kind": "stream", "n": 4}, insert,
                               {"kind": "stream", "n": 2}]  # fmt: skip
    assert streaming.requests == ["stream", "closed", "score"] * 2 + ["stream", "closed"]
    replays(session, FakeStreamingBackend())


@pytest.mark.parametrize("stream", [False, True], ids=["sample", "stream"])
def test_the_backend_ends_the_text(streaming, stream):
    session = Session(streaming, "e", max_new_tokens=10)
    session.run(stream=stream)
    assert session.text == "e." and session.stopped == "end of text" and session.ids == ids_of("e.")
    assert session.actions == ([{"kind": "stream", "n": 1}] if stream else [{"kind": "sample"}] * 2)
    asked = len(streaming.requests)
    assert session.step(stream=stream) is None and len(streaming.requests) == asked  # stopped: nothing asked
    replays(session, FakeStreamingBackend())
    session.rewind(1)  # the end is forgotten with the step before it
    assert session.stopped is None and session.step(stream=stream).token == "."


def test_a_stream_that_fails_midway_keeps_what_it_gave_and_adds_nothing(streaming):
    streaming.fail_after = 3
    session = Session(streaming, "a", max_new_tokens=20)
    taken = [session.step(stream=True) for _ in range(3)]
    rng = session._rng.getstate()
    with pytest.raises(ValueError, match="cut the stream"):
        session.step(stream=True)
    assert session.text == "abc " and session.ids == ids_of("abc ") and session._rng.getstate() == rng
    assert session.steps == [replace(s, token_id=i) for s, i in zip(taken, ids_of("bc "))]
    assert session.actions == [{"kind": "stream", "n": 3}] and session._context._stream is None
    assert streaming.requests == ["stream", "closed"]
    streaming.fail_after = None
    assert session.step(stream=True).token == "a" and session.actions[-1] == {"kind": "stream", "n": 1}
    session.interrupt()
    replays(session, FakeStreamingBackend())


def test_a_plain_step_after_streaming_continues_from_the_text(streaming):
    session = Session(streaming, "a", max_new_tokens=20)
    session.step(stream=True), session.step(stream=True)
    session.step()  # the open stream is not closed: the server's stream goes on from "abc"
    session.step(stream=True)
    session.interrupt()
    assert session.text == "abc a"  # today: "abc  ", and the log puts the 4th token in the first stream
    replays(session, FakeStreamingBackend())


def test_a_stream_that_reaches_max_new_tokens_leaves_no_unknown_ids(streaming):
    session = Session(streaming, "a", max_new_tokens=5)
    session.run(stream=True)
    assert -1 not in session.ids  # today: the ids stay unknown (and the trace replays differently) until interrupt()
    replays(session, FakeStreamingBackend())
