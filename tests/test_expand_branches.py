"""Expansion on llama.cpp reads a level's parents several to a pass (engine/backends/llamacpp/branches.py: one
sequence per branch in a unified KV cache, their tokens fed as a trie), and the tree is the one reading them
one by one makes, every step record bit for bit."""

import dataclasses
import pickle

import numpy as np
import pytest

import engine

PROMPT = "The old lighthouse keeper opened the door and"


def expansion(model, budget: int, raw: bool, one_by_one: bool, steered: bool = False):
    """(every node's token path and full step record, the leaves, forward passes run); steered: a vector added
    to the residual stream after layers 5-8 (llama.cpp's control vector, on every branch)."""
    s = engine.Session(model, PROMPT, max_new_tokens=3, temperature=1.0, top_k=40, seed=2)
    if steered:
        s.steer_vector(engine.steering_vector(model, ["joy and sunshine"], ["fear and darkness"]), [5, 6, 7, 8], 4.0)
    s.run()
    if one_by_one:
        model.branches_per_pass = 1  # the instance's: LocalContext.rows_at reads one branch per pass
    try:
        before = s._context.timing.snapshot()
        result = s.expand(top_k=3, depth=8, budget=budget, raw=raw)
        passes = s._context.timing.since(before).passes
    finally:
        model.__dict__.pop("branches_per_pass", None)
    nodes = s.tree.nodes
    records = [
        ([nodes[i].step.token_id for i in s.tree.path(n)], dataclasses.astuple(nodes[n].step)) for n in result.nodes
    ]
    return records, result.leaves, passes


@pytest.mark.parametrize(("budget", "raw"), [(40, True), (400, True), (1000, True), (300, False)])
def test_smollm2_expands_to_the_same_steps_reading_many_branches_per_pass(smollm2_llamacpp, budget, raw):
    batched = expansion(smollm2_llamacpp, budget, raw, one_by_one=False)
    alone = expansion(smollm2_llamacpp, budget, raw, one_by_one=True)
    assert len(batched[0]) == budget
    assert pickle.dumps(batched[:2]) == pickle.dumps(alone[:2])  # bit for bit (a NaN in a record equals itself)
    assert batched[2] * 3 < alone[2]  # a pass per row read alone; up to 16 rows a pass together


def test_a_steered_expansion_reads_its_branches_under_the_vector(smollm2_llamacpp):
    batched = expansion(smollm2_llamacpp, 200, True, one_by_one=False, steered=True)
    alone = expansion(smollm2_llamacpp, 200, True, one_by_one=True, steered=True)
    plain = expansion(smollm2_llamacpp, 200, True, one_by_one=False)
    assert pickle.dumps(batched[:2]) == pickle.dumps(alone[:2]) and batched[2] * 3 < alone[2]
    assert batched[1] != plain[1]  # the vector moved the probabilities


def fresh_row(model, ids):
    cache = model.new_cache()
    return model.forward_cached(ids, cache, last_only=True)[-1]


def test_the_text_goes_on_as_before_after_branches_it_did_not_keep(smollm2_llamacpp):
    """The cells another branch left free lie after the kept branch's (a cell before them read the kept
    text's later tokens wrongly: 0.84 off in a score)."""
    model = smollm2_llamacpp
    ids = model.tokenizer.encode(PROMPT)
    cache = model.new_cache()
    model.forward_cached(ids, cache, last_only=True)
    rows = model.forward_branches([[9], [378, 11], [378, 12]], cache)
    assert cache.length == len(ids) + 2
    for row, branch in zip(rows, [[9], [378, 11], [378, 12]]):
        assert np.array_equal(row, fresh_row(model, [*ids, *branch]))
    cache.truncate(len(ids) + 1)
    after = model.forward_cached([5, 7], cache)[-1]
    assert np.array_equal(after, fresh_row(model, [*ids, 378, 5, 7]))


def test_branches_one_pass_cannot_hold_are_left_to_be_read_one_by_one(smollm2_llamacpp):
    model = smollm2_llamacpp
    ids = model.tokenizer.encode(PROMPT)
    cache = model.new_cache()
    model.forward_cached(ids, cache, last_only=True)
    assert model.forward_branches([[i] for i in range(17)], cache) is None  # more than 16 sequences
    assert model.forward_branches([[i] * 40 for i in range(1, 15)], cache) is None  # 560 tokens: over the batch
    assert cache.length == len(ids)


def test_each_node_read_keeps_its_cells_so_a_row_costs_one_token(smollm2_llamacpp, monkeypatch):
    """A node's children are read from sequences holding their parents' cells (expand.NodeCells): each row read
    feeds one token, its own; afterwards the text goes on as if nothing had been read."""
    from engine.core import expand

    rows, add_children = [0], expand._add_children
    monkeypatch.setattr(expand, "_add_children", lambda *args: (rows.__setitem__(0, rows[0] + 1), add_children(*args)))
    s = engine.Session(smollm2_llamacpp, PROMPT, max_new_tokens=6, temperature=1.0, top_k=40, seed=2)
    twin = engine.Session(smollm2_llamacpp, PROMPT, max_new_tokens=6, temperature=1.0, top_k=40, seed=2)
    for _ in range(3):
        s.step(), twin.step()
    before = s._context.timing.snapshot()
    result = s.expand(top_k=3, depth=8, budget=120, raw=True)
    fed = s._context.timing.since(before)
    assert len(result.nodes) == 120 and rows[0] > 30
    assert fed.tokens == rows[0]  # the trie of each pass fed ~3.5 tokens a row (its parents' again)
    assert pickle.dumps(s.step()) == pickle.dumps(twin.step())
