"""Expanding the tree (issue 16): each node's children are its most probable next tokens under the raw model
or the chain (checked against a session standing at that node), coverage and the budget as defined, the
session's own text and next steps untouched, Cancel keeps finished levels, replay makes the same nodes; the
tree's edits (delete, name, pin) and the active-branch export; bad input refused with nothing changed."""

import json

import numpy as np
import pytest

import engine
from engine.core.expand import children

PROMPT = "mia has a red ball."


def session(model, **settings):
    s = engine.Session(model, PROMPT, max_new_tokens=8, **settings)
    s.run()
    return s


def standing_at(model, s, node, **settings):
    """A fresh session whose text is the branch ending at `node` (its tokens inserted)."""
    twin = engine.Session(model, PROMPT, max_new_tokens=64, **settings)
    twin.insert_tokens([s.tree.nodes[i].step.token_id for i in s.tree.path(node)])
    return twin


def expanded_children(s, node):
    return [c for c in s.tree.children(node) if c in s.tree.expanded]


def test_raw_children_are_each_nodes_top_k_and_leaves_carry_their_sequence_probability(story_model):
    s = session(story_model)
    result = s.expand(top_k=3, depth=3, budget=500, raw=True)
    assert result.levels == 3 and len(result.nodes) == 3 + 9 + 27 and not result.cancelled
    start = s.path[-1]
    for node in [start, *result.nodes[:12]]:  # every node of the first two levels has its model's top 3
        peek = standing_at(story_model, s, node).peek()
        raw = np.array(peek.raw)
        best = [peek.token_ids[i] for i in np.lexsort((peek.token_ids, -raw))[:3]]
        got = [s.tree.nodes[c].step.token_id for c in s.tree.children(node)]
        assert sorted(got) == sorted(best), node
        for c in s.tree.children(node):  # each child's record: the model's probability at that node
            p = s.tree.nodes[c].step.model_probability
            assert p == pytest.approx(raw[list(peek.token_ids).index(s.tree.nodes[c].step.token_id)], rel=1e-5)
    assert len(result.leaves) == 27
    for leaf, probability in result.leaves:
        below = s.tree.path(leaf)[len(s.path) :]
        assert probability == pytest.approx(np.prod([s.tree.nodes[i].step.model_probability for i in below]))
    assert [p for _, p in result.leaves] == sorted((p for _, p in result.leaves), reverse=True)


def test_under_the_chain_at_temperature_0_an_expansion_is_the_greedy_text(story_model):
    s = session(story_model)
    result = s.expand(top_k=3, depth=10, budget=500)  # the chain keeps one token at temperature 0
    greedy = engine.Session(story_model, PROMPT, max_new_tokens=18)
    greedy.run()
    chain = [s.tree.nodes[n].step.token_id for n in result.nodes]
    assert chain == [step.token_id for step in greedy.steps[8:]]
    assert all(s.tree.nodes[n].step.probability == 1.0 for n in result.nodes)


def test_coverage_takes_children_until_they_hold_that_share(story_model):
    s = engine.Session(story_model, PROMPT + " ", temperature=1.0)  # a new sentence: many ways to start it
    result = s.expand(top_k=None, coverage=0.95, depth=3, budget=2000)
    leaves = {leaf for leaf, _ in result.leaves}
    inner = [0, *(n for n in result.nodes if n not in leaves)]
    assert len(result.nodes) > 100 and len(expanded_children(s, 0)) > 5
    for node in inner:
        kids = sorted((s.tree.nodes[c].step.probability for c in expanded_children(s, node)), reverse=True)
        assert sum(kids) >= 0.95 - 1e-6 and sum(kids[:-1]) < 0.95, node


def test_a_budget_keeps_the_likeliest_sequences_of_the_level_it_cuts(story_model):
    whole = session(story_model).expand(top_k=3, depth=2, budget=100, raw=True)
    cut = session(story_model).expand(top_k=3, depth=2, budget=7, raw=True)
    assert len(cut.nodes) == 7 and cut.levels == 2
    level2 = sorted(whole.leaves, key=lambda leaf: -leaf[1])
    assert sorted(p for _, p in cut.leaves) == pytest.approx(sorted(p for _, p in level2[:4]))


def test_the_session_is_untouched_and_goes_on_as_it_would_have(story_model):
    s, twin = session(story_model, temperature=0.9, seed=3), session(story_model, temperature=0.9, seed=3)
    s.expand(top_k=4, depth=5, budget=300, raw=True)
    assert s.text == twin.text and s.steps == twin.steps
    s.update_settings(max_new_tokens=20), twin.update_settings(max_new_tokens=20)
    assert [x.to_dict() for x in s.run()] == [x.to_dict() for x in twin.run()]


def test_walking_into_an_expanded_branch_and_replay_of_everything(story_model, tmp_path):
    s = session(story_model, temperature=0.7, seed=5)
    result = s.expand(top_k=2, depth=4, budget=30, raw=True)
    leaf = result.leaves[0][0]
    s.goto(leaf)
    assert not set(s.path) & s.tree.expanded  # walked into: no longer marked
    assert [st.source for st in s.steps[8:]] == ["expanded"] * 4
    s.update_settings(max_new_tokens=16)
    s.run()  # goes on from the expanded branch with the session's own stream
    s.name_branch(leaf, "best guess")
    s.pin_branch(leaf)
    other = next(n for n, _ in result.leaves if n not in s.path and n != leaf)
    s.delete_branch(other)
    s.goto(result.nodes[0])
    s.expand(top_k=2, coverage=0.5, depth=2, budget=10)
    engine.save_trace(s.trace(), tmp_path / "t.json")
    trace = engine.load_trace(tmp_path / "t.json")
    kinds = [a["kind"] for a in trace["actions"]]
    assert {"expand", "name", "pin", "delete", "goto"} <= set(kinds)
    nodes = trace["tree"]["nodes"]
    assert nodes[leaf]["name"] == "best guess" and nodes[leaf]["pinned"] and nodes[other]["deleted"]
    report = engine.replay(trace, story_model)
    assert report.identical and report.nodes == len(nodes) - 1, report.summary()
    trace["tree"]["nodes"][leaf]["name"] = "another"
    assert not engine.replay(trace, story_model).identical


def test_cancel_keeps_the_finished_levels_and_replays(story_model):
    s = session(story_model)
    calls = []

    def cancelled():
        calls.append(1)
        return len(calls) > 4  # level 1 is one node, level 2 three: stop during level 3

    result = s.expand(top_k=3, depth=5, budget=500, raw=True, cancelled=cancelled)
    assert result.cancelled and result.levels == 2 and len(result.nodes) == 12
    assert len(s.tree.nodes) == len(s.path) + 1 + 12
    assert s.actions[-1] == {"kind": "expand", "top_k": 3, "coverage": None, "depth": 2, "budget": 500, "raw": True}
    assert engine.replay(s.trace(), story_model).identical


def test_the_tree_edits_refuse_what_would_lose_the_text_or_a_pin(story_model):
    s = session(story_model)
    result = s.expand(top_k=2, depth=2, budget=10, raw=True)
    before = (len(s.actions), set(s.tree.deleted))
    with pytest.raises(ValueError, match="on the branch the text is on: go to another branch first"):
        s.delete_branch(s.path[3])
    with pytest.raises(ValueError, match="the prompt is the root"):
        s.delete_branch(0)
    s.pin_branch(result.nodes[-1])
    pinned_parent = s.tree.nodes[result.nodes[-1]].parent
    with pytest.raises(ValueError, match=f"holds pinned node {result.nodes[-1]}: unpin it first"):
        s.delete_branch(pinned_parent)
    with pytest.raises(ValueError, match="no node 9999"):
        s.name_branch(9999, "x")
    with pytest.raises(ValueError, match="one line"):
        s.name_branch(result.nodes[0], "two\nlines")
    assert (len(s.actions) - 1, set(s.tree.deleted)) == before  # only the pin was logged
    s.delete_branch(result.nodes[0])
    with pytest.raises(ValueError, match=f"node {result.nodes[0]} was deleted"):
        s.goto(result.nodes[0])


@pytest.mark.parametrize("params, message", [
    (dict(budget=0), "budget must be an int from 1 to 10,000 nodes, not 0"),
    (dict(budget=1_000_000), "budget must be an int from 1 to 10,000 nodes, not 1000000"),
    (dict(depth=100), "depth 100 goes past the context: 46 of the model's 64 positions are left"),
    (dict(top_k=0), "top_k must be an int from 1"),
    (dict(coverage=1.5), "coverage must be a probability"),
    (dict(top_k=None), "give top_k"),
    (dict(raw="yes"), "raw must be True or False"),
])  # fmt: skip
def test_bad_expansions_are_refused_and_change_nothing(story_model, params, message):
    s = session(story_model)
    before = (len(s.tree.nodes), len(s.actions), s.text)
    with pytest.raises(ValueError, match=message):
        s.expand(**params)
    assert (len(s.tree.nodes), len(s.actions), s.text) == before


def test_the_active_branch_alone_exports_and_replays(story_model, tmp_path):
    s = session(story_model)
    s.expand(top_k=3, depth=3, budget=50, raw=True)
    s.rewind(3)
    s.update_settings(temperature=1.0)
    s.run()
    trace = s.trace(branches="active")
    assert len(trace["tree"]["nodes"]) == len(s.steps) + 1 and trace["path"] == list(range(1, len(s.steps) + 1))
    engine.save_trace(trace, tmp_path / "a.json")
    assert engine.replay(engine.load_trace(tmp_path / "a.json"), story_model).identical
    trace["tree"]["nodes"].append({"id": len(trace["tree"]["nodes"]), "parent": 1, "step": trace["steps"][0]})
    (tmp_path / "b.json").write_text(json.dumps(trace))
    with pytest.raises(ValueError, match="a trace of the active branch holds that branch alone"):
        engine.load_trace(tmp_path / "b.json")
    with pytest.raises(ValueError, match="branches must be one of"):
        s.trace(branches="some")


def test_children_picks_by_probability_then_id():
    ids = np.arange(6)
    probs = np.array([0.1, 0.3, 0.3, 0.0, 0.2, 0.1], dtype=np.float32)
    assert children(ids, probs, 2, 10) == [(1, pytest.approx(0.3)), (2, pytest.approx(0.3))]
    assert [t for t, _ in children(ids, probs, None, 10, 0.7)] == [1, 2, 4]
    assert [t for t, _ in children(ids, probs, None, 10, 1.0)] == [1, 2, 4, 0, 5]  # never the token of p 0
    assert [t for t, _ in children(ids, probs, 2, 10, 0.9)] == [1, 2]
    assert [t for t, _ in children(ids, probs, None, 3, 1.0)] == [1, 2, 4]  # no more than the budget's room


def test_llamacpp_expansion_matches_a_session_standing_there(smollm2_llamacpp):
    model = smollm2_llamacpp
    s = engine.Session(model, "The capital of France is", max_new_tokens=2)
    s.run()
    result = s.expand(top_k=3, depth=2, budget=12, raw=True)
    assert len(result.nodes) == 12
    for node in result.nodes[:3]:
        twin = engine.Session(model, "The capital of France is", max_new_tokens=64)
        twin.insert_tokens([s.tree.nodes[i].step.token_id for i in s.tree.path(node)])
        peek = twin.peek()
        kids = {s.tree.nodes[c].step.token_id: s.tree.nodes[c].step.model_probability for c in s.tree.children(node)}
        assert set(kids) == set(peek.token_ids[:3])
        for token_id, p in kids.items():
            assert p == pytest.approx(peek.raw[peek.token_ids.index(token_id)], rel=1e-4)
    assert engine.replay(s.trace(), model).identical


def test_expanding_a_healed_prompt_keeps_every_child_to_the_cut_text(story_model):
    """Token healing cut ' pa' from the prompt: the first children spell it (' park', or ' p' then 'a...'), each
    with the record a step there has; walking into one goes on as the session would; replay makes the same."""
    prompt = "mia has a red ball. mia goes to the pa"
    s = engine.Session(story_model, prompt, heal=True, temperature=1.0, max_new_tokens=30)
    assert s.healing == " pa"
    for raw in (False, True):
        result = s.expand(top_k=4, depth=2, budget=60, raw=raw)
        assert result.levels == 2
    pieces = lambda node: story_model.tokenizer.token_bytes(s.tree.nodes[node].step.token_id)  # noqa: E731
    first = s.tree.children(0)
    assert len(first) >= 3
    peek = engine.Session(story_model, prompt, heal=True, temperature=1.0).peek()  # what a step there draws from
    for child in first:
        piece = pieces(child)
        assert piece.startswith(b" pa") or b" pa".startswith(piece), piece  # keeps to the cut text
        step = s.tree.nodes[child].step
        assert step.healing == " pa"
        if step.token_id in peek.token_ids:
            at = peek.token_ids.index(step.token_id)
            assert (step.probability, step.model_probability) == pytest.approx((peek.final[at], peek.raw[at]))
    park = next(c for c in first if pieces(c) == b" park")
    s.goto(park)
    assert s.text.endswith(" park") and s.healing is None
    partial = next(c for c in first if pieces(c) == b" p")
    below = [c for c in s.tree.children(partial) if c in s.tree.expanded]
    assert below and all(pieces(c).startswith(b"a") for c in below)  # what is left, 'a', spelled next
    s.goto(partial)
    assert s.healing == "a"
    assert engine.replay(s.trace(), story_model).identical
