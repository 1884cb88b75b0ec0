"""Expansion reads only the rows it needs (issue 30): on a level the budget cuts, a parent whose own sequence
probability cannot beat the level's cut (its best child's p * q <= p) is skipped unread. The tree is the one
the definition gives, reading every parent's row (checked on the story model and SmolLM2, several budgets,
top_k and coverage, raw and the chain); fewer rows are read than there are parents."""

import numpy as np
import pytest

import engine
from engine.core.expand import children
from engine.core.tree import shared_prefix

PROMPT = "mia has a red ball."


def every_row_expansion(model, s, top_k, depth, budget, raw=True, coverage=None) -> list[tuple[tuple[int, ...], float]]:
    """The expansion by its definition, every parent's row read: level by level each parent's children, the
    level's `budget`-left likeliest sequences kept (ties: the order they were made), in the order made.
    -> (token ids below the start, sequence probability) of every node."""
    context, held = model.open_context(), []
    frontier, made = [(list(s.ids), 1.0)], []
    for _ in range(depth):
        room, level = budget - len(made), []
        for path, p in frontier:
            context.truncate(shared_prefix(held, path))
            dists, held = context.distributions(path, s.settings), path
            ids, probs = (np.arange(len(dists.raw)), dists.raw) if raw else (dists.final.token_ids(), dists.final.probs)
            for token_id, q in children(ids, probs, top_k, min(room, 1000), coverage):
                level.append((p * q, len(level), [*path, token_id]))
        kept = sorted(sorted(level, key=lambda c: (-c[0], c[1]))[:room], key=lambda c: c[1])
        made += [(tuple(c[2][len(s.ids) :]), c[0]) for c in kept]
        frontier = [(c[2], c[0]) for c in kept if c[2][-1] not in model.end_token_ids]
        if not frontier or len(made) >= budget:
            break
    return made


def expanded(s, result) -> list[tuple[tuple[int, ...], float]]:
    below = len(s.path)
    leaf_p = dict(result.leaves)
    paths = [tuple(s.tree.nodes[i].step.token_id for i in s.tree.path(n)[below:]) for n in result.nodes]
    return [(path, leaf_p.get(n)) for path, n in zip(paths, result.nodes)]


def same_tree(s, result, reference) -> bool:
    """The same nodes in the same order, the leaves' sequence probabilities the reference's (to float32's
    rounding: the reference reads the text's row from a cache filled in one batch, the session step by step)."""
    got = expanded(s, result)
    return [path for path, _ in got] == [path for path, _ in reference] and all(
        p is None or p == pytest.approx(ref, rel=1e-5) for (_, p), (_, ref) in zip(got, reference)
    )


def rows_read(model) -> list[int]:
    """Count the model's forward passes (each reads one parent's row during an expansion)."""
    count = [0]
    forward = model.forward_cached

    def counted(*args, **kwargs):
        count[0] += 1
        return forward(*args, **kwargs)

    model.forward_cached = counted
    return count


@pytest.mark.parametrize(
    ("top_k", "coverage", "depth", "budget", "raw"),
    [
        (3, None, 3, 30, True),  # the third level cut: 18 of 27
        (3, None, 6, 100, True),
        (3, None, 8, 700, True),
        (4, None, 5, 300, False),  # under the chain (temperature 1, top-k 40)
        (None, 0.9, 4, 150, False),  # coverage: children per parent vary
    ],
)
def test_a_cut_level_keeps_the_same_tree_as_reading_every_parent(story_model, top_k, coverage, depth, budget, raw):
    s = engine.Session(story_model, PROMPT + " ", max_new_tokens=4, temperature=1.0, top_k=40, seed=2)
    s.run()
    reference = every_row_expansion(story_model, s, top_k, depth, budget, raw, coverage)
    result = s.expand(top_k=top_k, coverage=coverage, depth=depth, budget=budget, raw=raw)
    assert len(result.nodes) == len(reference) and same_tree(s, result, reference)


@pytest.mark.parametrize("budget", [30, 100])
def test_smollm2_keeps_the_same_tree_as_reading_every_parent(smollm2_llamacpp, budget):
    model = smollm2_llamacpp
    s = engine.Session(model, "The old lighthouse keeper opened the door and", max_new_tokens=2)
    s.run()
    reference = every_row_expansion(model, s, 3, 5, budget)
    result = s.expand(top_k=3, depth=5, budget=budget, raw=True)
    assert len(result.nodes) == budget and same_tree(s, result, reference)


def test_a_level_the_budget_cuts_reads_fewer_rows_than_it_has_parents(story_model):
    s = engine.Session(story_model, PROMPT + " ", max_new_tokens=4)
    s.run()
    count = rows_read(story_model)
    try:
        result = s.expand(top_k=3, depth=8, budget=5000, raw=True)
    finally:
        del story_model.forward_cached
    parents = 1 + 3 + 9 + 27 + 81 + 243 + 729 + 2187  # every level full but the last (1,721 of 6,561 kept)
    assert result.levels == 8 and len(result.nodes) == 5000
    assert count[0] < 0.7 * parents  # reading every parent: 3,280 rows (0.66 a node); now 2,103 (0.42)
