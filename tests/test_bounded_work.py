"""Bounded work (issue 25, items 6 and 7): a trace asks replay for no more nodes than its tree holds, and replay
can be cancelled; a regex trigger rule matches a bounded tail of the text within a time bound, and a rule
that runs past it is disabled with an event naming it."""

import time

import pytest

import engine

PROMPT = "mia has a red ball."
BIG = {"kind": "expand", "top_k": None, "coverage": 1.0, "depth": 40, "budget": 10_000, "raw": True}


@pytest.fixture
def two_node_trace(story_model):
    """A trace of one step: its tree holds two nodes (the root and the step)."""
    s = engine.Session(story_model, PROMPT, max_new_tokens=8, seed=1)
    s.step()
    return s.trace()


def test_a_trace_naming_nodes_its_tree_never_had_is_refused_before_any_work(story_model, two_node_trace):
    """The issue's 14 KB trace: 21 goto + expand (budget 10,000) pairs built 191,618 nodes in 42.8 s."""
    trace = dict(two_node_trace, actions=[*two_node_trace["actions"], BIG])
    for node in range(2, 2 + 20 * 9_000, 9_000):
        trace["actions"] += [{"kind": "goto", "node": node}, BIG]
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"actions\[2\]'\]?: a goto names node 2, but the trace's tree holds 2"):
        engine.replay_session(trace, story_model)
    assert time.perf_counter() - started < 0.5


def test_an_expansion_in_a_trace_makes_no_more_nodes_than_its_tree_holds(story_model, two_node_trace):
    trace = dict(two_node_trace)
    trace["actions"] = [*trace["actions"], BIG, {"kind": "goto", "node": 0}, BIG, {"kind": "goto", "node": 1}, BIG]
    started = time.perf_counter()
    session, report = engine.replay_session(trace, story_model)
    assert time.perf_counter() - started < 2
    assert not report.identical
    assert report.notes == ("replay stopped at action 1 (expand): the replay has made 3 nodes, more than the 2 "
                            "of the trace's tree",)  # fmt: skip
    assert len(session.tree.nodes) == 3


def test_an_expansion_whose_budget_exceeds_what_it_made_still_replays_bit_for_bit(story_model):
    s = engine.Session(story_model, PROMPT, max_new_tokens=8, seed=2, temperature=0.8)
    s.run()
    s.expand(top_k=2, depth=3, budget=10_000, raw=True)  # 14 nodes made; the log keeps budget 10,000
    s.goto(len(s.tree.nodes) - 1)
    s.expand(top_k=None, coverage=0.6, depth=2, budget=9_000)
    assert [a["budget"] for a in s.actions if a["kind"] == "expand"] == [10_000, 9_000]
    report = engine.replay(s.trace(), story_model)
    assert report.identical and report.nodes == len(s.tree.nodes) - 1, report.summary()


def test_an_active_branch_trace_bounds_replay_by_the_whole_tree_it_came_from(story_model):
    s = engine.Session(story_model, PROMPT, max_new_tokens=8, seed=2)
    s.run()
    result = s.expand(top_k=3, depth=3, budget=500, raw=True)
    s.goto(result.nodes[0])
    trace = s.trace(branches="active")
    assert trace["tree_size"] == len(s.tree.nodes) > len(trace["tree"]["nodes"])
    assert engine.replay(trace, story_model).identical
    trace["tree_size"] = len(s.tree.nodes) - 1  # a file claiming a smaller tree than its log makes
    report = engine.replay(trace, story_model)
    assert not report.identical and "made 48 nodes, more than the 47 of the trace's tree" in report.notes[0]


def test_replay_stops_between_actions_when_cancelled(story_model):
    s = engine.Session(story_model, PROMPT, max_new_tokens=30, seed=3, temperature=1.0)
    for _ in range(12):
        s.step()
    asked = []

    def cancelled():
        asked.append(1)
        return len(asked) > 5

    session, report = engine.replay_session(s.trace(), story_model, cancelled=cancelled)
    assert len(session.steps) == 5 and not report.identical
    assert "replay stopped at action 5 (sample): cancelled, 7 of 12 actions left" in report.notes


def test_replay_stops_inside_an_expansion_when_cancelled(story_model):
    s = engine.Session(story_model, PROMPT, max_new_tokens=8, seed=3)
    s.run()
    s.expand(top_k=3, depth=4, budget=500, raw=True)
    assert [a["kind"] for a in s.actions] == ["sample"] * 8 + ["expand"]
    asked = []

    def cancelled():
        asked.append(1)
        return len(asked) > 9 + 2  # one check before each action, then the expansion's first level and one node

    session, report = engine.replay_session(s.trace(), story_model, cancelled=cancelled)
    assert report.notes == ("replay stopped at action 8 (expand): cancelled during an expansion",)
    assert len(session.tree.nodes) < len(s.tree.nodes)
