"""Ranking a row of scores: the n best tokens in O(V), and one token's rank. Ties go to the lower token id
everywhere (the generation contract's rule); the sampler stages in sampling.py and filters.py share these."""

import numpy as np


def top_ids(scores, n: int):  # [V] -> [min(n, V)] ids: highest score first, ties to the lower id
    """The n best tokens in O(V) (a full sort of a 49,152-token row costs milliseconds per step)."""
    size = len(scores)
    if n >= size:
        return np.argsort(-scores, kind="stable")
    threshold = np.partition(scores, size - n)[size - n]  # the n-th highest score
    above = np.flatnonzero(scores > threshold)
    tied = np.flatnonzero(scores == threshold)[: n - len(above)]  # lowest ids first
    ids = np.concatenate([above, tied])
    return ids[np.lexsort((ids, -scores[ids]))]


def model_rank(scores, token_id: int) -> int:
    """1 + how many tokens come before token_id in the ranking by score (ties: lower id first)."""
    score = scores[token_id]
    return int(np.count_nonzero(scores > score) + np.count_nonzero(scores[:token_id] == score)) + 1
