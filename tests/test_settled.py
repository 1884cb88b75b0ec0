"""Where each token settled (engine.settled_layers, issue 46): the first logit-lens row from which the model's
final top-1 stays chosen, against a brute-force loop over the lens of every prefix."""

import numpy as np
import pytest

import engine


def brute_force(model, ids, by: str) -> list[int]:
    """Each position's lens read alone (engine.logit_lens of the prefix ending there), rows walked from the last."""
    out = []
    for end in range(1, len(ids) + 1):
        probs = engine.logit_lens(model, ids[:end])  # [layers + 1, V]
        choice = int(np.argmax(probs[-1]))
        settled = -1
        for row in range(len(probs) - 1, -1, -1):
            p = probs[row]
            rank = int((p > p[choice]).sum() + (p[:choice] == p[choice]).sum())
            chosen = {"top1": int(np.argmax(p)) == choice, "top5": rank < 5, "p>0.5": p[choice] > 0.5}[by]
            if not chosen:
                break
            settled = row
        out.append(settled)
    return out


@pytest.mark.parametrize("by", engine.SETTLED_BY)
def test_the_story_model_settles_where_a_loop_over_the_lens_says(story_model, by):
    ids = story_model.tokenizer.encode("tom had a red ball. he threw it to sue and she said, the ball is")
    settled = engine.settled_layers(story_model, ids, by=by)
    assert settled.tolist() == brute_force(story_model, ids, by)
    assert set(settled.tolist()) <= {-1, 0, 1}  # the story model's one layer: rows 0 and 1


def test_smollm2_settles_in_its_upper_layers_and_looser_rules_settle_earlier(smollm2_llamacpp):
    model = smollm2_llamacpp
    ids = model.tokenizer.encode("The capital of France is Paris. The capital of Italy is")
    top1, top5 = engine.settled_layers(model, ids), engine.settled_layers(model, ids, by="top5")
    layers = model.n_layers
    assert top1.shape == (len(ids),) and ((0 <= top1) & (top1 <= layers)).all()
    assert (top5 <= top1).all() and top5.sum() < top1.sum()
    assert top1[-5:].tolist() == brute_force(model, ids, "top1")[-5:]
    with pytest.raises(ValueError, match="top1, top5, p>0.5"):
        engine.settled_layers(model, ids, by="top3")
