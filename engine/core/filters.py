"""Filters on a row of scores, exactly as llama.cpp defines them (src/llama-sampler.cpp, min_keep = 1):
locally typical sampling, top-n-sigma and XTC.

Every function takes a float32 [V] row of logits (-inf = a token an earlier stage removed: it stays removed
and counts for nothing, in no mean, standard deviation, softmax or entropy), never changes it in place and
returns a float32 [V] row: the kept logits unchanged, -inf for what it removes. Neutral settings return the
input itself.

Exactness. llama.cpp computes in float32, and typical's cut (a running sum compared with p), XTC's threshold
and top-n-sigma's bound notice a single ulp, so the arithmetic follows llama.cpp's step for step:
- its softmax (llama_sampler_softmax_impl) adds exp(logit - max) one at a time in float32, highest logit
  first; a float sum depends on its order, so we add in that order too (a sort of the values, then a
  sequential np.cumsum; numpy's pairwise np.sum differs from it by ~1e-5 relative over 262,144 terms);
- glibc's expf and logf are within 0.502 ulp of exact, so exp and log are taken in float64 and rounded to
  float32 (numpy's own float32 exp and log are 1 ulp away on a third and an eighth of inputs);
- top-n-sigma's mean is a float32 sum in token order, and its `float acc += pow(float d, 2)` squares and adds
  in double and rounds to float at every step: `_sum_of_squares` replays exactly that.
XTC needs the softmax's exact sum only for a probability within its rounding error of the threshold, and
skips the sort otherwise (`_count_at_least`). What may still differ is rounding alone, at an exact boundary:
glibc 2.36 rounds about 1 expf in 1,800 and 1 logf in 330 the other way, which can move a sum by an ulp. (No
such case showed in ~4,000 comparisons on random and SmolLM2 rows of up to 262,144 tokens, thresholds set on
exact boundaries included.)

Ties. llama.cpp's sorts are not stable (its softmax's bucket sort by logit runs std::sort and
std::partial_sort inside buckets; typical then std::sorts by distance), so where a cut falls among tokens
whose sort key ties, llama.cpp keeps an unspecified set of them. Here the ranking puts the lower token id
first, as everywhere in the engine. Keys tie for equal logits, and in typical also for two different logits
at the same float32 distance from the entropy, one on each side of it. Top-n-sigma is a threshold: no ties.

Deliberate differences, for rows llama.cpp itself mishandles: llama.cpp's typical and XTC count -inf tokens
left in its candidates array (by top-n-sigma, say): typical's entropy then becomes NaN (0 * log 0), and so
does it for a finite token more than ~104 below the best (its probability rounds to 0); here 0 * log 0 = 0.
XTC at threshold <= 0 keeps the lowest-ranked token, which in llama.cpp can be such a -inf one; here it is the
lowest-ranked finite token.
"""

import numpy as np

from engine.core.ranking import top_ids

NEG_INF = np.float32(-np.inf)


def _expf(x):  # float32 [m] -> float32 [m]: exp correctly rounded to float32, as glibc's expf (0.502 ulp)
    wide = x.astype(np.float64)
    return np.exp(wide, out=wide).astype(np.float32)


def _logf(x):  # float32 [m] -> float32 [m]: log correctly rounded to float32, as glibc's logf
    wide = x.astype(np.float64)
    with np.errstate(divide="ignore"):  # log 0 = -inf
        return np.log(wide, out=wide).astype(np.float32)


def _sequential_sum(terms):  # float32 [m] -> float32: ((t0 + t1) + t2) + ..., in float32 as C adds them
    return np.cumsum(terms)[-1]


def _softmax(x):  # float32 [m] finite logits -> float32 [m], and the [m] exponentials highest first
    """llama_sampler_softmax_impl: p_i = expf(x_i - max) / sum, the sum taken in float32 from the highest
    logit down (llama.cpp sorts first). exp is monotonic, so sorting the exponentials gives that order."""
    e = _expf(x - x.max())  # [m] in (0, 1]
    descending = np.sort(e)[::-1]  # [m]: the order llama.cpp adds them in (ties: equal values, any order)
    total = _sequential_sum(descending)
    return e / total, descending / total


def _softmax_sum(e):  # float32 [m] exponentials, the largest exactly 1 -> float32: llama.cpp's sum of them
    """The float32 sum highest first, sorting only what counts: the running sum is >= 1 from its first term
    (exp(0) = 1) on, and a term under 2**-24, half an ulp of 1, then leaves it unchanged; the terms come in
    decreasing order, so none after the first such one changes it."""
    return _sequential_sum(np.sort(e[e >= np.float32(2.0**-24)])[::-1])


def _sum_of_squares(d):  # float32 [m] -> float32: C's `float acc = 0; for (...) acc += pow((double) d, 2)`
    """That sum exactly: each square is exact in double, added to acc in double and rounded to float. A
    float32 cumsum of the float32 squares (each correctly rounded) is right at all but a few steps (where
    rounding the square first tips the sum's rounding: a chance of ~1 / (2 i) at step i, so ~ln(m) / 2 steps
    in all, most of them early). Each step is checked; after the first wrong one the cumsum resumes from its
    right value. The chunks double, so a wrong step costs a redo of its chunk only."""
    with np.errstate(over="ignore"):  # a square or a sum past float32's range is inf, as C's float makes it
        rounded = np.square(d)  # [m] float32
        exact = np.square(d, dtype=np.float64)  # [m]
        acc, start, size = np.float32(0), 0, len(d)
        while start < size:
            end = min(size, max(2 * start, start + 1024))
            chunk = rounded[start:end].copy()  # [c]
            chunk[0] = np.float32(np.float64(acc) + exact[start])  # the first step exactly
            guess = np.cumsum(chunk)  # [c]: guess[j] = acc after term start + j, if no step went wrong
            redone = np.add(guess[:-1], exact[start + 1 : end], dtype=np.float64).astype(np.float32)  # [c - 1]
            wrong = np.flatnonzero(redone != guess[1:])
            if len(wrong) == 0:
                acc, start = guess[-1], end
            else:  # guess[first] is right, guess[first + 1] is not
                first = int(wrong[0])
                acc, start = redone[first], start + first + 2
    return acc


def _sort_keys(distance):  # float32 [m] >= 0 -> uint64 [m]: (distance's bits, position), one key per token
    """Keys that sort as (distance, position): a non-negative float's bits sort as the float does, so one
    SIMD sort of these orders by distance with ties to the lower position (an argsort with a tie-break,
    lexsort or a stable argsort, is ~10x slower on 262,144 tokens)."""
    return distance.view(np.uint32).astype(np.uint64) << np.uint64(32) | np.arange(len(distance), dtype=np.uint64)


def _smallest_first(keys, n: int):  # uint64 [m] -> [min(n, m)] positions of the n smallest keys, in order
    if n < len(keys):
        keys = np.partition(keys, n - 1)[:n]  # [n]: the n smallest, unordered (O(m))
    return (np.sort(keys) & np.uint64(0xFFFFFFFF)).astype(np.intp)


def _typical_distance(x):  # float32 [m] finite logits -> [m] probabilities, [m] |surprisal - entropy|
    """Typical's sort key as llama.cpp computes it: the entropy added highest logit first (log is monotonic,
    so the sorted logs pair with the sorted probabilities), then fabsf(-logf(p) - H) in float32. A probability
    that rounds to 0 adds 0 * log 0 = 0 (llama.cpp: NaN) and lies at distance inf."""
    probs, descending = _softmax(x)  # [m], [m]
    log_probs = _logf(probs)  # [m]; -inf where a probability rounded to 0
    with np.errstate(invalid="ignore"):  # 0 * -inf, replaced just below
        terms = -descending * np.sort(log_probs)[::-1]  # [m]
    if descending[-1] == 0:  # the smallest: some probabilities rounded to 0
        terms[descending == 0] = 0
    entropy = _sequential_sum(terms)
    return probs, np.abs(-log_probs - entropy)


def apply_typical(logits, p: float | None) -> np.ndarray:  # [V] -> [V]
    """Locally typical sampling (llama_sampler_init_typical): rank the tokens by how far their surprisal
    -log p_i is from the entropy H = -sum p log p, closest first, and keep the shortest prefix of that ranking
    whose probabilities sum to more than p (all of it if none does). p >= 1 (or None) is a no-op.

    The entropy needs every token (O(V), plus the value sort that fixes the order of llama.cpp's float sums);
    the ranking is built in growing slices, so only about as many tokens as are kept are sorted by distance."""
    logits = np.asarray(logits, dtype=np.float32)
    p = None if p is None else np.float32(p)  # llama_sampler_typical.p is a float
    if p is None or p >= 1:
        return logits
    ids = np.flatnonzero(~np.isneginf(logits))  # [m] the tokens still in play, in id order
    if len(ids) == 0:
        return logits
    probs, distance = _typical_distance(logits[ids])  # [m], [m]
    keys = _sort_keys(distance)  # [m]
    n = 64
    while True:
        ranked = _smallest_first(keys, n)  # [min(n, m)] positions: most typical first, ties to the lower id
        cumulative = np.cumsum(probs[ranked])  # float32, added in that order as llama.cpp adds them
        if cumulative[-1] > p or len(ranked) == len(ids):
            break
        n *= 8
    count = int(np.searchsorted(cumulative, p, side="right")) + 1  # the first prefix whose sum is > p
    if count >= len(ids):
        return logits  # none removed
    kept = ids[ranked[:count]]
    out = np.full_like(logits, NEG_INF)
    out[kept] = logits[kept]
    return out


def _sigma_bound(logits, n, gone=None):  # float32 [V], float32 n, [g] removed positions -> float32 max - n * std
    """max - n * std as llama.cpp computes it over the finite logits. A removed token counts as a 0 in both
    float sums: adding +0.0 leaves a float sum exactly as it was, so they are the sums of the finite ones."""
    count = np.float32(len(logits) - (0 if gone is None else len(gone)))  # size_t -> float, exact below 2**24
    x = logits
    if gone is not None:
        x = logits.copy()
        x[gone] = 0
    mean = _sequential_sum(x) / count
    d = x - mean  # [V] float32
    if gone is not None:
        d[gone] = 0
    std = np.sqrt(_sum_of_squares(d) / count)  # float32
    return logits.max() - n * std  # float32


def top_n_sigma_kept(logits, n: float | None) -> np.ndarray | None:  # [V] -> [k] positions kept, or None
    """Top-n-sigma (llama_sampler_init_top_n_sigma): keep the tokens whose logit is >= max - n * std, std the
    population standard deviation (divided by the count, not count - 1) of the finite logits. -> the kept
    positions (ascending), or None when it removes nothing: n <= 0 (or None), rows of one token.

    As llama.cpp computes it: the mean is a float32 sum in token order divided by the count, each square
    (d = logit - mean in float32) is taken and added in double and rounded to float, std = sqrt(acc / count)
    in float32, the bound max - n * std in float32, and a token goes when logit < bound."""
    logits = np.asarray(logits, dtype=np.float32)
    n = None if n is None else np.float32(n)  # llama_sampler_top_n_sigma.n is a float
    if n is None or n <= 0 or len(logits) <= 1:
        return None
    gone = np.flatnonzero(logits == NEG_INF) if logits.min() == NEG_INF else None  # [g] positions removed
    if gone is not None and len(gone) == len(logits):
        return None
    kept = np.flatnonzero(logits >= _sigma_bound(logits, n, gone))  # [k]
    return None if len(kept) == len(logits) - (0 if gone is None else len(gone)) else kept


def apply_top_n_sigma(logits, n: float | None) -> np.ndarray:  # [V] -> [V]
    """Top-n-sigma as a row: -inf where `top_n_sigma_kept` removes a token."""
    logits = np.asarray(logits, dtype=np.float32)
    kept = top_n_sigma_kept(logits, n)
    if kept is None:
        return logits
    out = np.full_like(logits, NEG_INF)
    out[kept] = logits[kept]
    return out


def _count_at_least(logits, threshold) -> int:  # float32 [V], -inf = removed -> how many in play have p >= threshold
    """How many of llama.cpp's softmax probabilities (over the tokens in play) are >= threshold, without its
    sort where that cannot matter: llama.cpp's float32 sum of m positive terms is within (m - 1) * 2**-24
    (relative, to first order) of the exact sum, and expf and the division add an ulp or two; so a
    probability estimated in float64 that is further than that from the threshold compares as llama.cpp's
    does. Only when one is that close (a chance of a few percent at 262,144 tokens, less below) is llama.cpp's
    softmax replayed."""
    if threshold <= 0:
        return int(np.count_nonzero(~np.isneginf(logits)))  # every probability is >= 0
    e = np.exp(logits - logits.max())  # [V] float32, 0 where removed: numpy's exp, within an ulp of glibc's
    total = np.sum(e, dtype=np.float64)
    margin = (len(logits) + 8) * 2.0**-24 * 1.01  # relative: the float32 sum, two exps and a division
    low = float(threshold) * total * (1 - margin)
    near_or_above = e[e >= np.float32(low * (1 - 2.0**-20))]  # [c] the few that can be at or above it
    estimate = near_or_above.astype(np.float64) / total  # [c]
    if np.any(np.abs(estimate - float(threshold)) <= margin * float(threshold)):
        e = _expf(logits - logits.max())  # [V] float32, 0 where removed
        probs = e / _softmax_sum(e)  # [V] float32: llama.cpp's, but for glibc's rare misroundings
        return int(np.count_nonzero(probs[~np.isneginf(logits)] >= threshold))
    return int(np.count_nonzero(estimate >= float(threshold)))


def apply_xtc(logits, probability: float, threshold: float, u: float) -> np.ndarray:  # [V] -> [V]
    """XTC, "exclude top choices" (llama_sampler_init_xtc): when it acts, remove every token whose
    probability is >= threshold except the least likely of them (so it acts only where two or more are).

    u in [0, 1) is this step's random draw (llama.cpp draws its own float); XTC acts when u <= probability.
    No-ops, as in llama.cpp: probability <= 0, threshold > 0.5, fewer than 2 tokens in play. The candidates
    are ranked by logit (ties to the lower id; llama.cpp's sort leaves them unspecified), so among tokens tied
    at the least likely place above the threshold the highest id is the one kept."""
    logits = np.asarray(logits, dtype=np.float32)
    probability, threshold = np.float32(probability), np.float32(threshold)  # floats in llama_sampler_xtc
    if probability <= 0 or threshold > np.float32(0.5) or np.isneginf(logits.max()):
        return logits  # (one token in play: XTC never removes it, below)
    if np.float32(u) > probability:  # llama.cpp: `if (chance > probability) return;`, chance a float
        return logits
    above = _count_at_least(logits, threshold)  # the ranking's first `above`: a probability falls with its logit
    last = above - 1  # llama.cpp's pos_last: the place of the least likely token at or above the threshold
    if last <= 0:
        return logits
    out = logits.copy()
    out[top_ids(logits, last)] = NEG_INF  # the `last` best go, ties to the lower id (never a -inf one: last < m)
    return out
