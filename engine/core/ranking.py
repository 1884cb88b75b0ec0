"""Ranking a row of scores: the n best tokens in O(V), and one token's rank. Ties go to the lower token id
everywhere (the generation contract's rule); the sampler stages in sampling.py and filters.py share these."""

import math

import numpy as np

# the stages that keep an upper part of their input's ranking (every token ranked before one they keep is kept) with
# the scores as they were: the rank of a token they keep is its rank before them
RANK_KEEPING = ("top_k", "top_p", "greedy")  # ("greedy": sampling.GREEDY, which imports this module)

SORTED_UP_TO = 512  # rows up to this long are sorted whole (the story model's 96 tokens): one call, fastest
GROUPED_FROM = 4096  # rows from this long are ranked in two passes (SmolLM2's 49,152, Gemma 3's 262,144)


def top_ids(scores, n: int):  # [V] -> [min(n, V)] ids: highest score first, ties to the lower id
    """The n best tokens in O(V) (a full sort of a 49,152-token row costs milliseconds per step). A long row
    is ranked in two passes: the best of each group of scores, then only the scores of the groups that can
    hold the n best (partitioning all of Gemma's 262,144 scores costs several times more)."""
    size = len(scores)
    if n >= size or size <= SORTED_UP_TO:
        return (-scores).argsort(kind="stable")[:n]  # the method: np.argsort's wrapper costs as much on 96
    found = _group_candidates(scores, n) if size >= GROUPED_FROM else None
    if found is None:
        return _ranked_best(scores, n)
    ids, values = found  # a few dozen: sorted whole
    return ids[np.argsort(-values, kind="stable")[:n]] if len(ids) <= SORTED_UP_TO else ids[_ranked_best(values, n)]


def top_ids_among(scores, leaders, n: int):  # [V], [m] ids -> [n] ids, or None
    """The n best of scores (ranked as top_ids ranks) found among `leaders`: ids whose scores are each >= every
    other id's (a row's best m, or any order-keeping image of them). None where that cannot settle it: n >= m,
    or the n-th best ties the leaders' floor (an id outside may tie it with a lower id)."""
    if n >= len(leaders):
        return None
    values = scores[leaders]  # [m]
    order = np.lexsort((leaders, -values))  # best first, ties to the lower id
    return leaders[order[:n]] if values[order[n - 1]] > values.min() else None


def _ranked_best(scores, n: int):  # [m] -> [n] positions (n <= m): highest first, ties to the lower position
    size = len(scores)
    threshold = np.partition(scores, size - n)[size - n]  # the n-th highest score
    above = np.flatnonzero(scores > threshold)
    tied = np.flatnonzero(scores == threshold)[: n - len(above)]  # lowest positions first
    best = np.concatenate([above, tied])
    return best[np.lexsort((best, -scores[best]))]


def _group_candidates(scores, n: int):
    """[V] -> (ids ascending, their scores): a few scores that hold the n best; None where too many groups
    tie at their best (ranking the whole row is as cheap). Group c is the ids c, c + G, c + 2G, ... (a
    column of the row seen as rows of G, so the maxima of all G groups cost about one pass over the row).
    The n-th best group maximum m is at most the n-th best score (n groups each hold a score >= m), so the
    n best are among the scores >= m, all in the groups whose best is >= m."""
    size = len(scores)
    columns = 1 << math.isqrt(n * size).bit_length()  # G ~ sqrt(nV) to 2 sqrt(nV): few groups, few inside
    rows = size // columns
    if n * 4 > columns or rows < 2:
        return None
    body = scores[: rows * columns].reshape(rows, columns)
    maxima = body.max(axis=0)  # [G]
    tail = scores[rows * columns :]  # id rows * G + c is in group c
    if len(tail):
        np.maximum(maxima[: len(tail)], tail, out=maxima[: len(tail)])
    floor = np.partition(maxima, columns - n)[columns - n]
    chosen = np.flatnonzero(maxima >= floor)  # [c] group numbers, ascending
    if len(chosen) * 4 > columns:
        return None
    inside = body[:, chosen]  # [rows, c]
    row, column = np.nonzero(inside >= floor)  # row by row: the ids ascend
    ids, values = row * columns + chosen[column], inside[row, column]
    if len(tail):
        in_tail = np.flatnonzero(tail >= floor)
        ids, values = np.concatenate([ids, rows * columns + in_tail]), np.concatenate([values, tail[in_tail]])
    return ids, values


def model_rank(scores, token_id: int) -> int:
    """1 + how many tokens come before token_id in the ranking by score (ties: lower id first)."""
    score = scores[token_id]
    return int(np.count_nonzero(scores > score) + np.count_nonzero(scores[:token_id] == score)) + 1


def raw_rank(scores, token_id: int, raw_top=None) -> int:
    """The token's rank in the raw ranking: its place among the raw top where it is there (no pass over
    the vocabulary), else counted (ranking.model_rank)."""
    if raw_top is not None:
        top = raw_top.tolist()  # [20] ids: a list's index is cheaper than an array comparison
        if token_id in top:
            return top.index(token_id) + 1
    return model_rank(scores, token_id)


def stage_ranks(rows: dict, token_id: int, scores, rank: int) -> tuple[tuple[str, int], ...]:
    """The token's rank after each stage (Row.rank), the last first: a stage in RANK_KEEPING that kept the
    token leaves its rank as it was, a stage that changed nothing gives the row it was given, and the raw
    scores' row (temperature 1) has the raw rank `rank`; only the other rows are ranked (a pass over the
    vocabulary for a whole row)."""
    names = list(rows)
    ranks = [0] * len(names)
    for index in reversed(range(len(names))):
        row, after = rows[names[index]], names[index + 1] if index + 1 < len(names) else None
        if after and (rows[after] is row or (after in RANK_KEEPING and ranks[index + 1] > 0)):
            ranks[index] = ranks[index + 1]
        elif row.logits is scores and row.ids is None and scores[token_id] != -np.inf:
            ranks[index] = rank
        else:
            ranks[index] = row.rank(token_id)
    return tuple(zip(names, ranks))
