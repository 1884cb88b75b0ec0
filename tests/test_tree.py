"""The tree of a session's branches (issue 16, the engine's part): a rewind keeps what it leaves, a different
step makes a sibling, the very same step is the same token the same node; goto puts a branch back as it was; the trace holds
every branch (schema 4) and replay checks every node, naming the first that differs with its branch; a tree
with a dangling parent or a cycle is refused by load_trace, naming the node; schema-3 traces still replay."""

import json

import numpy as np
import pytest

import engine

PROMPT = "mia has a red ball."


def branched(story_model):
    """Eight steps (branch A), back four, another temperature and seed, six steps (branch B)."""
    session = engine.Session(story_model, PROMPT, temperature=1.0, seed=1, max_new_tokens=60)
    a = [session.step() for _ in range(8)]
    leaf_a, text_a, settings_a = session.path[-1], session.text, session.settings
    session.rewind(4)
    session.update_settings(temperature=1.5, seed=9)
    session.run()
    return session, leaf_a, text_a, settings_a, a


def test_a_rewind_keeps_the_branch_it_leaves(story_model):
    session, leaf_a, _text, _settings, a = branched(story_model)
    tree = session.tree
    assert tree.path(leaf_a)[:4] == session.path[:4] and leaf_a not in session.path
    assert [tree.nodes[i].step for i in tree.path(leaf_a)] == a
    assert len(tree.children(session.path[3])) == 2  # the branch point: A's fifth step and B's first
    assert [tree.nodes[i].step.token_id for i in session.path] == [step.token_id for step in session.steps]


def test_the_same_token_again_is_the_same_node(story_model):
    session = engine.Session(story_model, PROMPT, temperature=1.0, seed=3, max_new_tokens=60)
    for _ in range(5):
        session.step()
    nodes, path = len(session.tree.nodes), list(session.path)
    session.rewind(3)
    for _ in range(3):
        session.step()  # the random state rewound too: the very same steps
    assert len(session.tree.nodes) == nodes and session.path == path


def test_goto_puts_a_branch_back_as_it_was(story_model):
    session, leaf_a, text_a, settings_a, a = branched(story_model)
    leaf_b, text_b = session.path[-1], session.text
    session.goto(leaf_a)
    assert session.text == text_a and session.steps == a and session.settings == settings_a
    assert session.path == session.tree.path(leaf_a)
    reference = engine.Session(story_model, PROMPT, temperature=1.0, seed=1, max_new_tokens=60)
    expected = [reference.step() for _ in range(12)]
    going_on = [session.step() for _ in range(4)]  # A's random stream goes on where A left it
    assert [s.token_id for s in going_on] == [s.token_id for s in expected[8:]]
    session.goto(leaf_b)
    assert session.text == text_b
    session.goto(session.tree.path(leaf_b)[1])  # an ancestor: as a rewind
    assert len(session.steps) == 2
    with pytest.raises(ValueError, match="no node 999"):
        session.goto(999)
    assert len(session.steps) == 2


def test_every_branch_replays_and_a_changed_node_is_named_with_its_branch(story_model, tmp_path):
    session, leaf_a, *_ = branched(story_model)
    session.goto(leaf_a)
    session.step()
    trace = session.trace()
    assert trace["schema"] == "token-playground/trace/5" and trace["path"] == session.path
    engine.save_trace(trace, tmp_path / "tree.json")
    report = engine.replay(engine.load_trace(tmp_path / "tree.json"), story_model)
    assert report.identical and report.nodes == len(session.tree.nodes) - 1, report.summary()
    off_path = next(n for n in trace["tree"]["nodes"][1:] if n["id"] not in trace["path"])
    changed = json.loads(json.dumps(trace))
    changed["tree"]["nodes"][off_path["id"]]["step"]["probability"] = 0.25
    report = engine.replay(changed, story_model)
    branch = session.tree.path(off_path["id"])
    assert not report.identical and report.first_difference["node"] == off_path["id"]
    assert report.first_difference["branch"] == branch and report.first_difference["field"] == "step.probability"
    assert f"node {off_path['id']} (branch {'>'.join(map(str, branch))})" in report.summary()


def test_a_bad_tree_is_refused_naming_the_node(story_model, tmp_path):
    session, *_ = branched(story_model)
    trace = session.trace()
    for change, message in (
        (lambda t: t["tree"]["nodes"][5].update(parent=99), "node 5: its parent 99 is not a node of the tree"),
        (lambda t: t["tree"]["nodes"][3].update(parent=7), "node 3: its parent 7 does not come before it"),
        (lambda t: t["tree"]["nodes"][2].update(id=4), "node 2 must be an object whose 'id' is 2"),
        (lambda t: t["tree"]["nodes"][4].update(step={"token": 3}), "node 4:"),
        (lambda t: t.update(path=[1, 2]), "trace field 'path'"),
        (lambda t: t.pop("tree"), "trace field 'tree'"),
    ):  # fmt: skip
        bad = json.loads(json.dumps(trace))
        change(bad)
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=message):
            engine.load_trace(tmp_path / "bad.json")


def test_a_schema_3_trace_opens_as_one_branch_and_replays(story_model):
    session = engine.Session(story_model, PROMPT, temperature=1.0, seed=4, max_new_tokens=20)
    session.run()
    old = session.trace()
    old["schema"] = "token-playground/trace/3"
    del old["tree"], old["path"]
    engine.validate_trace(old)
    assert engine.replay(old, story_model).identical


def test_the_same_token_under_other_settings_is_one_branch(story_model):
    """At T 1.0 and then T 1.2 with another seed the story model writes " mia" first (p ~0.999): one node, with
    the first record; the branches part where the tokens do."""
    session = engine.Session(story_model, PROMPT, temperature=1.0, seed=3, max_new_tokens=60)
    first = session.step()
    session.run()
    session.rewind(len(session.steps))
    session.update_settings(temperature=1.2, seed=8)
    again = session.step()
    assert again.token_id == first.token_id and again.draw != first.draw
    assert len(session.tree.children(0)) == 1 and session.tree.nodes[session.path[0]].step == first


def test_undo_brings_a_deleted_branch_back_with_its_ids_and_replays(story_model, tmp_path):
    """Issue 24: Delete could not be undone. undo_tree_edit takes back the last delete, name or pin (the last
    first): the tree is as it was before (ids, names, expansion marks), steps are not undone, and the "undo"
    action replays bit for bit."""
    session, leaf_a, text_a, *_ = branched(story_model)
    first_a = session.tree.path(leaf_a)[4]  # A's first step after the branch point
    session.name_branch(leaf_a, "first try")
    session.goto(session.path[6])  # B's text ended: expand from before its end
    expanded = session.expand(top_k=2, depth=1, raw=True).nodes  # marked expanded, not walked into
    before = session.tree.to_dict()
    session.delete_branch(first_a)
    session.delete_branch(expanded[1])
    assert leaf_a in session.tree.deleted and "name" not in session.tree.to_dict()["nodes"][leaf_a]
    steps = list(session.steps)
    assert session.undo_tree_edit().node == expanded[1]  # the last edit first
    edit = session.undo_tree_edit()
    assert (edit.kind, edit.node) == ("delete", first_a) and leaf_a in edit.nodes
    assert session.tree.to_dict() == before and session.steps == steps
    assert session.tree.children(session.path[3]) == [first_a, session.path[4]]  # back in its place
    assert session.actions[-2:] == [{"kind": "undo"}, {"kind": "undo"}]
    session.goto(leaf_a)  # the branch is whole again, under its old ids
    assert session.text == text_a
    engine.save_trace(session.trace(), tmp_path / "undo.json")
    report = engine.replay(engine.load_trace(tmp_path / "undo.json"), story_model)
    assert report.identical and report.nodes == len(session.tree.nodes) - 1, report.summary()


def test_undo_takes_back_names_and_pins_one_at_a_time_and_then_says_nothing_to_undo(story_model):
    session, leaf_a, *_ = branched(story_model)
    session.name_branch(leaf_a, "old")
    session.name_branch(leaf_a, "new")
    session.pin_branch(leaf_a)
    session.step()  # steps are not tree edits: undo passes over them
    steps = list(session.steps)
    assert session.undo_tree_edit().kind == "pin" and leaf_a not in session.tree.pinned
    assert session.undo_tree_edit().kind == "name" and session.tree.names[leaf_a] == "old"
    session.undo_tree_edit()
    assert leaf_a not in session.tree.names and session.steps == steps
    actions = len(session.actions)
    with pytest.raises(ValueError, match="nothing to undo"):
        session.undo_tree_edit()
    assert len(session.actions) == actions  # a refusal is not logged


def test_undo_refuses_a_branch_whose_token_was_taken_again(story_model):
    """One token under a node is one branch: a deleted branch whose first token the text took again since
    cannot come back beside it (ValueError naming the node, nothing changes)."""
    session, leaf_a, *_ = branched(story_model)
    first_a = session.tree.path(leaf_a)[4]
    session.delete_branch(first_a)
    session.rewind(len(session.steps) - 4)
    session.force_token(session.tree.nodes[first_a].step.token_id)
    session.step()
    again = session.path[-1]
    assert again != first_a
    tree, actions = session.tree.to_dict(), len(session.actions)
    with pytest.raises(ValueError, match=f"taken again there since \\(node {again}\\); delete that branch first"):
        session.undo_tree_edit()
    assert session.tree.to_dict() == tree and len(session.actions) == actions


def test_an_inserted_step_shows_the_models_probability(story_model):
    """Issue 24: a forced branch showed "p 0" (the chain's probability of a token it did not draw): the tree's
    view of an inserted step carries the model's own probability."""
    session = engine.Session(story_model, PROMPT, temperature=0.0)
    session.step()
    session.insert_text(" ben")
    forced = session.steps[-1]
    assert forced.source == "forced" and forced.probability == 0.0 < forced.model_probability
    view = session.tree.view(session.path[-1])
    assert view.probability == forced.model_probability and view.source == "forced"
    drawn = session.tree.view(session.path[0])  # the model's own too, and the chain's beside it
    assert drawn.probability == session.steps[0].model_probability and drawn.drawn == session.steps[0].probability
    assert view.drawn is None  # a forced step was not drawn


def test_siblings_show_one_measure_whoever_chose_them_and_under_any_settings(story_model):
    """Issue 43, item 2: greedy's 1.00 stood beside temperature-1 probabilities and a forced sibling's model p:
    every node's number is the model's own probability (temperature 1, before any sampler); the chain's, where it
    drew the step, is apart (NodeView.drawn)."""
    session = engine.Session(story_model, "mia has a red ball. ben goes to the", temperature=0.0)
    session.step()  # park, barn, garden, mall: 0.29, 0.25, 0.24, 0.22
    greedy = session.path[0]
    session.rewind(1)
    for seed in range(200):  # a sibling drawn at temperature 1 (a rewind rewinds the draws: another seed each)
        session.update_settings(temperature=1.0, seed=seed)
        session.step()
        if session.path[0] != greedy:
            break
        session.rewind(1)
    sampled = session.path[0]
    session.rewind(1)
    raw = session._context.distributions(session.ids, session.settings).raw
    forced_id = next(i for i in np.argsort(raw)[::-1] if session.tree.nodes[greedy].step.token_id != i
                     and session.tree.nodes[sampled].step.token_id != i)  # fmt: skip
    session.force_token(int(forced_id))
    session.step()
    siblings = [session.tree.view(n) for n in (greedy, sampled, session.path[0])]
    assert sampled != greedy and [v.source for v in siblings] == ["model", "model", "forced"]
    for view in siblings:
        assert view.probability == pytest.approx(float(raw[session.tree.nodes[view.id].step.token_id]), abs=1e-6)
    assert siblings[0].drawn == 1.0 and siblings[1].drawn == pytest.approx(siblings[1].probability, abs=1e-6)
    assert siblings[2].drawn is None
