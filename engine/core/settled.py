"""Where each token settled (the commitment view, issue 46): for every position of a text, the first row of the
logit lens from which on the model's final choice for the next token stays chosen.

Rows are the lens's (engine/core/inside.py): 0 the embedding, i the stream after layer i, the last the model's own
distribution. The final choice at a position is its top-1 under the last row (ties to the lower id, as the chart
ranks). One forward pass keeps every position's stream; each row is unembedded a chunk of positions at a time, from
the last row down, so a position's answer is known once a row breaks the run.
"""

import numpy as np

from engine.core.inside import checked_model

SETTLED_BY = ("top1", "top5", "p>0.5")  # what "chosen" means at a row: its top-1, within its top 5, above p 0.5
CHUNK = 256  # positions unembedded at once (SmolLM2: 256 x 49,152 scores, 50 MB)


def settled_layers(model, token_ids, by: str = "top1") -> np.ndarray:  # [T] ids -> [T] rows, int64
    """For each position, the first lens row (0: the embedding, i: after layer i, layers: the model's own) at which
    the model's final top-1 next token is chosen by `by` and stays chosen at every later row: "top1" (the row's
    own top-1), "top5" (among the row's 5 most probable) or "p>0.5" (the row gives it more than half). -1 where
    it never is (only under "p>0.5": the model itself gives its choice half or less)."""
    checked_model(model)
    if by not in SETTLED_BY:
        raise ValueError(f"by must be one of {', '.join(SETTLED_BY)}, not {by!r:.40}")
    residuals = model.inside(token_ids).residuals  # [layers + 1, T, d]
    rows, positions = residuals.shape[0], residuals.shape[1]
    settled = np.full(positions, -1, dtype=np.int64)
    for start in range(0, positions, CHUNK):
        chunk = residuals[:, start : start + CHUNK]  # [layers + 1, c, d]
        final = model.unembed(chunk[-1])  # [c, V]
        choice = _top1(final)  # [c]
        holding = np.ones(len(choice), dtype=bool)  # chosen at every row after this one
        for row in range(rows - 1, -1, -1):
            scores = final if row == rows - 1 else model.unembed(chunk[row])
            holding &= _chosen(scores, choice, by)
            settled[start : start + CHUNK][holding] = row
    return settled


def _top1(scores) -> np.ndarray:  # [c, V] -> [c] the best id of each row, ties to the lower id
    return np.argmax(scores, axis=-1)


def _chosen(scores, choice, by: str) -> np.ndarray:  # [c, V] scores, [c] ids -> [c] bool
    if by == "top1":
        return _top1(scores) == choice
    mine = scores[np.arange(len(choice)), choice][:, None]  # [c, 1]
    if by == "top5":  # ranked as the chart ranks: those above it, and those level with it at a lower id
        ids = np.arange(scores.shape[-1])
        ahead = (scores > mine).sum(axis=-1) + ((scores == mine) & (ids < choice[:, None])).sum(axis=-1)
        return ahead < 5
    best = scores.max(axis=-1, keepdims=True)  # p > 0.5: log p = s - best - log sum exp(s - best) > log 0.5
    log_z = np.log(np.exp(scores - best).sum(axis=-1, keepdims=True))
    return (mine - best - log_z)[:, 0] > np.float32(np.log(0.5))
