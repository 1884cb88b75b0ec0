"""The filters (engine/core/filters.py) against llama.cpp's own samplers, each applied alone to the same row:
the same kept tokens and probabilities within 1e-5, on random rows (several sizes and spreads, -inf entries)
and on SmolLM2's real rows.

How a row reaches llama.cpp. Top-n-sigma gets the whole row, -inf entries included: it skips them itself,
as it must in llama.cpp's chain, where some samplers mark tokens -inf. Typical and XTC get the tokens still
in play only, their ids mapped back: in llama.cpp's chain the samplers that remove tokens shrink the
candidates array, and a -inf token left in it would count in typical's entropy as 0 * log 0 = NaN
(`test_llama_cpp_counts_removed_tokens_in_typical` shows that deliberate difference).

Exactness down to the ulp: three tests put the setting exactly on a boundary (typical's p on a running sum,
XTC's threshold on a probability, top-n-sigma's bound on a logit) and one float beside it; llama.cpp agrees
only if its sums, exps and std are replayed bit for bit.

XTC draws its own random number in llama.cpp; here it is forced to act (probability 1), and the engine's
draw `u` is tested on its own (`test_xtc_acts_when_the_draw_is_at_most_probability`).

Ties. llama.cpp's sorts are unstable (std::sort, std::partial_sort), so where its sort key ties at a cut it
keeps an unspecified one of the tied tokens; filters.py ranks the lower id first. Tied keys: equal logits
(XTC and typical), and for typical also two different logits at exactly the same float32 distance from the
entropy, one on each side of it. `assert_matches` allows exactly that difference (same count, the differing
tokens all share one key value) and says so; the tie tests build such cuts on purpose.
"""

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

import llama_samplers  # noqa: E402

from engine.backends.llamacpp.library import llama  # noqa: E402
from engine.core import filters  # noqa: E402
from engine.core.filters import apply_top_n_sigma, apply_typical, apply_xtc  # noqa: E402

SEEDS = (0, 1, 2, 3)
SIZES = (10, 1000, 49152)
TYPICAL_PS = (1e-6, 0.2, 0.5, 0.9, 0.95, 0.999)
SIGMA_NS = (1e-3, 0.5, 1.0, 2.0, 3.0)
XTC_THRESHOLDS = (0.0, 1e-4, 0.01, 0.05, 0.1, 0.3, 0.5)
PROMPTS = (
    "Once upon a time, in a small village by the sea, there lived",
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
)


@pytest.fixture(scope="module")
def model(smollm2_llamacpp):
    return smollm2_llamacpp


@pytest.fixture(scope="module")
def real_rows(model):
    """SmolLM2's rows: the last and a middle position of each prompt, each as is, at temperature 0.7 and
    with all but its best 2,000 tokens removed (-inf) -> [(name, row [V] float32)]."""
    rows = []
    for prompt_index, prompt in enumerate(PROMPTS):
        ids = model.tokenizer.encode(prompt)
        scores = model.forward_cached(ids, model.new_cache())  # [len(ids), V]
        for position in (len(ids) - 1, len(ids) // 2):
            row = scores[position]
            cut = row.copy()
            cut[np.argsort(-row, kind="stable")[2000:]] = -np.inf
            name = f"prompt {prompt_index} position {position}"
            rows += [(name, row), (f"{name} T=0.7", row / np.float32(0.7)), (f"{name} best 2000", cut)]
    return rows


def random_row(seed: int, size: int) -> np.ndarray:  # [size] float32: spread by seed, -inf in odd seeds
    rng = np.random.default_rng([seed, size])
    scale = (0.5, 1.0, 3.0, 6.0)[seed % 4]  # flat to peaked
    row = (rng.standard_normal(size) * scale).astype(np.float32)
    if seed % 2:
        row[rng.random(size) < 0.3] = -np.inf  # removed by an earlier stage
        row[0] = -np.inf
    return row


def in_play(make_sampler, row) -> dict[int, float]:
    """llama.cpp's sampler on the tokens still in play only -> {kept id: logit}, ids of the whole row."""
    ids = np.flatnonzero(~np.isneginf(row))
    kept = llama_samplers.apply(make_sampler(), row[ids])
    return {int(ids[i]): logit for i, logit in kept.items()}


def llama_typical(row, p):
    return in_play(lambda: llama().llama_sampler_init_typical(p, 1), row)


def llama_top_n_sigma(row, n):
    return llama_samplers.apply(llama().llama_sampler_init_top_n_sigma(n), row)


def llama_xtc(row, threshold):  # forced to act: probability 1 (its draw is always < 1)
    return in_play(lambda: llama().llama_sampler_init_xtc(1.0, threshold, 1, 1234), row)


def typical_key(row) -> np.ndarray:  # [V]: typical's sort key (|surprisal - entropy|), NaN where removed
    ids = np.flatnonzero(~np.isneginf(row))
    key = np.full(len(row), np.nan, dtype=np.float32)
    key[ids] = filters._typical_distance(row[ids])[1]
    return key


def kept_ids(out) -> np.ndarray:
    return np.flatnonzero(~np.isneginf(out))


def assert_matches(ours, row, theirs: dict[int, float], key=None) -> int:
    """Our output row against llama.cpp's kept {id: logit} for the same input row: the same kept tokens,
    their logits unchanged, the same probabilities within 1e-5. One difference is allowed, and counted
    (returns 1): a cut inside a group of tokens whose sort key `key` ties, where llama.cpp's unstable sort
    keeps an unspecified one and filters.py the lower id in ranking order."""
    size = len(row)
    assert ours.dtype == np.float32 and ours.shape == row.shape
    mine = kept_ids(ours)
    assert np.array_equal(ours[mine], row[mine])  # kept logits unchanged
    assert all(row[i] == logit for i, logit in theirs.items())  # llama.cpp's too
    differ = sorted(set(mine.tolist()) ^ set(theirs))
    ours_p = llama_samplers.probabilities({i: float(row[i]) for i in mine.tolist()}, size)
    theirs_p = llama_samplers.probabilities(theirs, size)
    if not differ:
        np.testing.assert_allclose(ours_p, theirs_p, rtol=0, atol=1e-5)
        return 0
    assert key is not None and len(mine) == len(theirs), f"kept sets differ: {differ[:10]}"
    assert len(set(key[differ].tolist())) == 1, f"tokens {differ[:10]} differ but do not tie in the sort key"
    if len(set(row[differ].tolist())) == 1:  # tied logits: the same probabilities, on other ids
        np.testing.assert_allclose(np.sort(ours_p), np.sort(theirs_p), rtol=0, atol=1e-5)
    return 1


# -- each filter against llama.cpp ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("size", SIZES)
def test_typical_matches_llama_cpp_on_random_rows(seed, size):
    row = random_row(seed, size)
    before, key, ties, removed = row.copy(), typical_key(row), 0, 0
    for p in TYPICAL_PS:
        ours = apply_typical(row, p)
        ties += assert_matches(ours, row, llama_typical(row, p), key)
        removed += len(kept_ids(ours)) < len(kept_ids(row))
    assert np.array_equal(row, before)  # the input is untouched
    assert removed >= len(TYPICAL_PS) - 1  # not a no-op (p = 0.999 may keep all of a small row)
    assert ties <= 1


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("size", SIZES)
def test_top_n_sigma_matches_llama_cpp_on_random_rows(seed, size):
    row = random_row(seed, size)
    before, removed = row.copy(), 0
    for n in SIGMA_NS:
        ours = apply_top_n_sigma(row, n)
        assert_matches(ours, row, llama_top_n_sigma(row, n))  # a threshold: no ties to allow
        removed += len(kept_ids(ours)) < len(kept_ids(row))
    assert np.array_equal(row, before)
    assert removed == len(SIGMA_NS) if size >= 1000 else removed >= 2  # not a no-op (in 1,000: max > 3 std up)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("size", SIZES)
def test_xtc_matches_llama_cpp_on_random_rows(seed, size):
    row = random_row(seed, size)
    before, removed = row.copy(), 0
    for threshold in XTC_THRESHOLDS:
        ours = apply_xtc(row, 1.0, threshold, 0.5)
        assert_matches(ours, row, llama_xtc(row, threshold), row)  # random rows: ties at the cut are unlikely
        removed += len(kept_ids(ours)) < len(kept_ids(row))
    assert np.array_equal(row, before)
    assert removed >= 1  # threshold 0 always removes all but one


def test_filters_match_llama_cpp_on_real_rows(real_rows):
    ties = removed = checked = 0
    for _name, row in real_rows:
        key = typical_key(row)
        for p in TYPICAL_PS:
            ours = apply_typical(row, p)
            ties += assert_matches(ours, row, llama_typical(row, p), key)
            removed += len(kept_ids(ours)) < len(kept_ids(row))
        for n in SIGMA_NS:
            ours = apply_top_n_sigma(row, n)
            assert_matches(ours, row, llama_top_n_sigma(row, n))
            removed += len(kept_ids(ours)) < len(kept_ids(row))
        for threshold in XTC_THRESHOLDS:
            ours = apply_xtc(row, 1.0, threshold, 0.0)
            ties += assert_matches(ours, row, llama_xtc(row, threshold), row)
            removed += len(kept_ids(ours)) < len(kept_ids(row))
        checked += len(TYPICAL_PS) + len(SIGMA_NS) + len(XTC_THRESHOLDS)
    assert removed >= checked // 2, "the filters removed nothing in most cases"
    assert ties <= 2


def test_each_filter_removes_tokens_where_llama_cpp_does():
    """A hand-checked row where each filter acts (a no-op fails here)."""
    row = np.array([4.0, 3.0, 2.5, 1.0, 0.0, -1.0, -2.0, -np.inf, 0.5, -3.0], dtype=np.float32)
    # top-n-sigma, n = 1: mean 0.5, population std ~2.13 over the 9 finite logits: keep logits >= 1.87
    assert kept_ids(apply_top_n_sigma(row, 1.0)).tolist() == [0, 1, 2]
    assert sorted(llama_top_n_sigma(row, 1.0)) == [0, 1, 2]
    # XTC at 0.1: tokens 0, 1 and 2 are above it (p ~0.52, 0.19, 0.12): all but the least likely go
    assert kept_ids(apply_xtc(row, 1.0, 0.1, 0.0)).tolist() == [2, 3, 4, 5, 6, 8, 9]
    assert sorted(llama_xtc(row, 0.1)) == [2, 3, 4, 5, 6, 8, 9]
    # typical at 0.5: entropy ~1.17 nats; the closest surprisals are token 1's (1.53, p 0.22) and token 0's
    # (0.53, p 0.59): 0.22 + 0.59 > 0.5
    ours = kept_ids(apply_typical(row, 0.5))
    assert ours.tolist() == [0, 1] and sorted(llama_typical(row, 0.5)) == [0, 1]


# -- settings and the draw -----------------------------------------------------------------------------------


def test_neutral_settings_are_no_ops():
    row = random_row(1, 1000)
    before = row.copy()
    everything = set(kept_ids(row).tolist())
    for p in (None, 1.0, 1.5, 0.99999999):  # 0.99999999 is 1.0 as llama.cpp's float
        assert apply_typical(row, p) is row
    assert set(llama_typical(row, 0.99999999)) == everything
    for n in (None, 0.0, -1.0):
        assert apply_top_n_sigma(row, n) is row
    assert set(llama_top_n_sigma(row, 0.0)) == set(llama_top_n_sigma(row, -1.0)) == everything
    for probability, threshold in ((0.0, 0.1), (-1.0, 0.1), (1.0, 0.51), (1.0, 0.50000006)):
        assert apply_xtc(row, probability, threshold, 0.0) is row
        sampler = llama().llama_sampler_init_xtc(probability, threshold, 1, 1)
        assert set(in_play(lambda sampler=sampler: sampler, row)) == everything
    two = np.array([1.0, 1.0], dtype=np.float32)  # both at p = 0.5: XTC acts at threshold 0.5 (as a float)
    assert kept_ids(apply_xtc(two, 1.0, 0.50000001, 0.0)).tolist() == [1] and len(llama_xtc(two, 0.50000001)) == 1
    # rows of fewer than two tokens in play
    single = np.array([-np.inf, 2.0, -np.inf], dtype=np.float32)
    assert apply_xtc(single, 1.0, 0.0, 0.0) is single and apply_top_n_sigma(single, 1.0) is single
    assert np.array_equal(apply_typical(single, 0.5), single)
    assert apply_top_n_sigma(np.array([1.0], dtype=np.float32), 1.0).tolist() == [1.0]
    gone = np.full(4, -np.inf, dtype=np.float32)
    for out in (apply_typical(gone, 0.5), apply_top_n_sigma(gone, 1.0), apply_xtc(gone, 1.0, 0.1, 0.0)):
        assert out is gone
    assert np.array_equal(row, before)


def test_xtc_acts_when_the_draw_is_at_most_probability():
    """llama.cpp: `if (chance > probability) return;` with chance a float in [0, 1): it acts at chance ==
    probability, never at probability 0."""
    row = random_row(3, 1000)
    acted = apply_xtc(row, 1.0, 0.01, 0.0)
    assert len(kept_ids(acted)) < len(kept_ids(row))
    assert apply_xtc(row, 0.3, 0.01, 0.30001) is row
    assert apply_xtc(row, 0.3, 0.01, 0.9) is row
    assert np.array_equal(apply_xtc(row, 0.3, 0.01, 0.3), acted)  # equal: acts
    assert np.array_equal(apply_xtc(row, 0.3, 0.01, 0.1), acted)
    assert np.array_equal(apply_xtc(row, 1.0, 0.01, 0.9999999), acted)  # probability 1: always
    assert apply_xtc(row, 0.0, 0.01, 0.0) is row  # probability 0: never, even at u = 0


def test_typical_p_at_or_below_zero_keeps_the_most_typical_token():
    row = random_row(2, 1000)
    key = typical_key(row)
    for p in (0.0, -1.0):
        ours = kept_ids(apply_typical(row, p))
        assert ours.tolist() == [int(np.nanargmin(key))]
        assert set(llama_typical(row, p)) == set(ours.tolist())


def test_xtc_threshold_zero_keeps_the_lowest_token():
    """Every token in play is at or above threshold 0, so all but the lowest-ranked go (llama.cpp too, on the
    tokens in play; on an array that still holds -inf tokens it keeps one of those, nothing: see the module)."""
    row = random_row(1, 1000)
    lowest = int(np.flatnonzero(row == row[~np.isneginf(row)].min())[-1])
    assert kept_ids(apply_xtc(row, 1.0, 0.0, 0.0)).tolist() == [lowest]
    assert list(llama_xtc(row, 0.0)) == [lowest]
    assert llama_samplers.apply(llama().llama_sampler_init_xtc(1.0, 0.0, 1, 1), row) == {}  # the -inf kept


# -- the definitions ------------------------------------------------------------------------------------------


def test_top_n_sigma_uses_the_population_std_of_the_finite_logits():
    """[0, 1, 1.8, 3]: mean 1.45, population std 1.099 -> bound 1.901 keeps only 3; the sample std (1.269)
    would keep 1.8 too. -inf entries change nothing (they count in neither the mean nor the std)."""
    row = np.array([0.0, 1.0, 1.8, 3.0], dtype=np.float32)
    padded = np.array([-np.inf, 0.0, 1.0, -np.inf, 1.8, 3.0, -np.inf], dtype=np.float32)
    assert kept_ids(apply_top_n_sigma(row, 1.0)).tolist() == [3] and sorted(llama_top_n_sigma(row, 1.0)) == [3]
    assert kept_ids(apply_top_n_sigma(padded, 1.0)).tolist() == [5]
    assert sorted(llama_top_n_sigma(padded, 1.0)) == [5]
    constant = np.array([2.0, 2.0, -np.inf, 2.0], dtype=np.float32)  # std 0: keeps every token at the max
    assert apply_top_n_sigma(constant, 1.0) is constant and sorted(llama_top_n_sigma(constant, 1.0)) == [0, 1, 3]


def test_running_sum_replays_c_float_accumulation():
    """top-n-sigma's `float acc; acc += pow(float d, 2)` adds each double square to acc in double and rounds
    to float; _sum_of_squares reproduces that bit for bit (a float32 cumsum of float32 squares does not)."""
    rng = np.random.default_rng(7)
    differs = 0
    for size in (1, 5, 5000, 20000):
        d = (rng.standard_normal(size) * 3).astype(np.float32)
        acc = np.float32(0)
        for term in d.tolist():
            acc = np.float32(float(acc) + term * term)  # term * term in double: exact
        assert filters._sum_of_squares(d) == acc
        differs += np.cumsum(d * d)[-1] != acc
    assert differs  # the shortcut would not have been exact


def test_removed_tokens_count_for_nothing():
    """A -inf token stays removed and changes nothing: each filter on a row with -inf entries keeps what it
    keeps on the row of the tokens in play alone."""
    row = random_row(3, 1000)
    ids = kept_ids(row)
    compact = row[ids]
    for ours, alone in (
        (apply_typical(row, 0.9), apply_typical(compact, 0.9)),
        (apply_top_n_sigma(row, 1.0), apply_top_n_sigma(compact, 1.0)),
        (apply_xtc(row, 1.0, 0.01, 0.0), apply_xtc(compact, 1.0, 0.01, 0.0)),
    ):
        assert np.array_equal(ours[ids], alone) and np.isneginf(np.delete(ours, ids)).all()


def test_llama_cpp_counts_removed_tokens_in_typical():
    """The deliberate difference: llama.cpp's typical, given an array that still holds -inf tokens (or a
    token ~104 below the best, whose probability rounds to 0), adds 0 * log 0 = NaN to its entropy and keeps
    something else; on the tokens in play it agrees with filters.py."""
    row = random_row(3, 1000)
    full = set(llama_samplers.apply(llama().llama_sampler_init_typical(0.5, 1), row))
    ours = set(kept_ids(apply_typical(row, 0.5)).tolist())
    assert ours == set(llama_typical(row, 0.5)) and full != ours
    far = random_row(2, 1000)
    far[5] = far.max() - 120
    assert set(llama_samplers.apply(llama().llama_sampler_init_typical(0.5, 1), far)) != set(
        kept_ids(apply_typical(far, 0.5)).tolist()
    )
    assert 5 not in kept_ids(apply_typical(far, 0.5))


# -- ties -----------------------------------------------------------------------------------------------------


def test_typical_ties_at_the_cut_keep_the_lower_ids():
    """Eight tokens of logit 0 share one distance from the entropy, the smallest, and p = 0.3 cuts after five
    of them. filters.py keeps the five lowest ids; llama.cpp keeps five of the eight, which five unspecified
    (this llama.cpp build keeps 0, 3, 7, 8, 9)."""
    row = np.array([0, 2, 0, 0, -1, 0, 0, 0, 0, 0], dtype=np.float32)
    tied = [0, 2, 3, 5, 6, 7, 8, 9]
    ours = apply_typical(row, 0.3)
    assert kept_ids(ours).tolist() == tied[:5]
    theirs = llama_typical(row, 0.3)
    assert len(theirs) == 5 and set(theirs) <= set(tied)
    assert_matches(ours, row, theirs, typical_key(row))


def test_xtc_ties_at_the_threshold_keep_the_highest_id():
    """Tokens 2, 5 and 8 tie as the least likely above the threshold: XTC removes the ranking's first ones
    (ties: lower id first) and keeps token 8; llama.cpp keeps one of the three, which one unspecified."""
    row = np.array([6.0, 0.0, 4.0, 0.0, 0.0, 4.0, 1.0, 0.0, 4.0, 0.0], dtype=np.float32)
    ours = apply_xtc(row, 1.0, 0.05, 0.0)
    assert kept_ids(ours).tolist() == [1, 3, 4, 6, 7, 8, 9]
    theirs = llama_xtc(row, 0.05)
    assert len(theirs) == 7 and len(set(theirs) & {2, 5, 8}) == 1
    assert_matches(ours, row, theirs, row)


def test_xtc_threshold_exactly_at_a_probability():
    """Thresholds at a token's float32 probability exactly (llama.cpp's softmax replayed bit for bit: its sum
    in its order, correctly rounded exp) and one float above it: >= keeps the token above the threshold in
    the first case, not in the second, in llama.cpp and here."""
    for seed in SEEDS:
        row = random_row(seed, 49152) * np.float32(3)
        probs, _ = filters._softmax(row[~np.isneginf(row)])
        third = np.sort(probs)[-3]  # three tokens at or above it: XTC removes two
        for threshold, removed in ((third, 2), (np.nextafter(third, np.float32(1)), 1)):
            ours = apply_xtc(row, 1.0, threshold, 0.0)
            assert len(kept_ids(row)) - len(kept_ids(ours)) == removed
            assert_matches(ours, row, llama_xtc(row, float(threshold)), row)


def test_typical_p_exactly_at_a_running_sum():
    """p set to a running sum of typical's ranking exactly (float32, added in llama.cpp's order): `cum > p`
    is false there, so the cut comes one token later; one float below it, it comes there. Both as llama.cpp
    cuts, which needs its probabilities and sums bit for bit (a flat row of 49,152: the sums run long)."""
    for seed in SEEDS:
        row = random_row(seed, 49152)
        ids = kept_ids(row)
        probs, distance = filters._typical_distance(row[ids])
        order = filters._smallest_first(filters._sort_keys(distance), len(ids))
        running = np.cumsum(probs[order])  # [m] float32
        k = int(np.searchsorted(running, np.float32(0.7)))
        for p, count in ((running[k], k + 2), (np.nextafter(running[k], np.float32(0)), k + 1)):
            ours = apply_typical(row, float(p))
            assert len(kept_ids(ours)) == count
            assert_matches(ours, row, llama_typical(row, float(p)), typical_key(row))


def test_top_n_sigma_bound_exactly_at_a_logit():
    """n chosen so that max - n * std lands exactly on a token's logit (which stays: llama.cpp removes
    logit < bound), and the next float below n, which moves the bound just above it (it goes). Both as
    llama.cpp decides, which needs its mean, std and bound bit for bit."""
    tested = 0
    for seed in SEEDS:
        row = random_row(seed, 49152)
        x = row[~np.isneginf(row)]
        target = np.sort(x)[-200]  # the 200th best logit
        n = np.float32(1.0)
        for _ in range(60):  # Newton steps on n in float32, then a few floats either way
            step = (filters._sigma_bound(x, n) - target) / (filters._sigma_bound(x, n + 1) - filters._sigma_bound(x, n))
            n = np.float32(n - step)
        candidates, down, up = [n], n, n
        for _ in range(8):
            down, up = np.nextafter(down, np.float32(0)), np.nextafter(up, np.float32(10))
            candidates += [down, up]
        at = [c for c in candidates if filters._sigma_bound(x, c) == target]
        if not at:
            continue  # no float n puts the bound exactly on this logit
        n = min(at)
        below = np.nextafter(n, np.float32(0))
        assert filters._sigma_bound(x, below) > target
        for n_try, kept in ((n, 200), (below, 199)):
            ours = apply_top_n_sigma(row, float(n_try))
            assert len(kept_ids(ours)) == kept
            assert_matches(ours, row, llama_top_n_sigma(row, float(n_try)))
        tested += 1
    assert tested >= 3, tested
