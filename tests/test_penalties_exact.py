"""The penalties (engine/core/penalties.py) against llama.cpp's own samplers, each applied alone to the same
row after the same history: the same kept tokens, scores within 1e-5 relative and probabilities within 1e-5,
on random rows (ties, zeros, -inf) and on SmolLM2's real rows with its real vocabulary.

One deliberate difference: last_n -1 means the whole history here (llama.cpp's common parameters once defined
-1 as the context size); llama.cpp's samplers clamp it to 0, off, so llama.cpp gets len(history) instead."""

import ctypes

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

import llama_samplers  # noqa: E402

from engine.backends.llamacpp.library import llama  # noqa: E402
from engine.core.penalties import apply_dry, apply_logit_bias, apply_penalties, dry_breakers  # noqa: E402

DEFAULT_BREAKERS = ("\n", ":", '"', "*")  # llama.cpp's defaults (common/common.h)
MORE_BREAKERS = (*DEFAULT_BREAKERS, "\nUser:", "\u201c")  # restart sequences of several tokens, partial bytes
TEXT = (
    'Alice said: "the cat sat on the mat, and the dog sat on the rug."\n'
    'Bob said: "the cat sat on the mat, and the dog sat on the rug."\n'
    "User: the red fox ran past the old barn and the red fox ran past the old\n"
    "*Alice* said: the cat sat on the mat, and the dog sat on the"
)
SEEDS = (0, 1, 2, 3)


@pytest.fixture(scope="module")
def model(smollm2_llamacpp):
    return smollm2_llamacpp


@pytest.fixture(scope="module")
def vocab(model):
    return llama().llama_model_get_vocab(model.handle)


@pytest.fixture(scope="module")
def texts(model, vocab):
    """Each token's text as llama.cpp's DRY reads it: the token detokenized alone, special tokens as text."""
    lib, buffer, out = llama(), ctypes.create_string_buffer(256), []
    for token_id in range(model.vocab_size):
        n = lib.llama_detokenize(vocab, (lib.llama_token * 1)(token_id), 1, buffer, len(buffer), False, True)
        assert 0 <= n
        out.append(buffer.raw[:n])
    return out


@pytest.fixture(scope="module")
def tokenize(vocab):
    """A breaker's rest as llama.cpp's DRY tokenizes it: no BOS, special tokens not parsed."""
    lib = llama()

    def tokenize(text: bytes) -> list[int]:
        buffer = (lib.llama_token * 64)()
        n = lib.llama_tokenize(vocab, text, len(text), buffer, len(buffer), False, False)
        assert n >= 0
        return list(buffer[:n])

    return tokenize


@pytest.fixture(scope="module")
def real(model):
    """SmolLM2 on TEXT -> (ids, rows [len(ids), V] float32)."""
    ids = model.tokenizer.encode(TEXT)
    return ids, model.forward_cached(ids, model.new_cache())


def random_row(seed: int, size: int = 3000) -> np.ndarray:  # [size] float32 with ties, zeros and -inf
    rng = np.random.default_rng(seed)
    row = (rng.standard_normal(size) * 4).astype(np.float32)
    tied = rng.choice(size, size // 5, replace=False)
    row[tied] = np.round(row[tied])  # many exact ties
    row[rng.choice(size, 20, replace=False)] = 0.0  # the <= 0 boundary of the repetition penalty
    row[rng.choice(size, size // 20, replace=False)] = -np.inf  # removed by an earlier stage
    row[:4] = [-np.inf, 0.0, 2.5, -2.5]  # the tokens every random history uses
    return row


def random_history(seed: int, length: int = 400, alphabet: int = 80) -> list[int]:  # many repeated ids
    rng = np.random.default_rng(seed + 100)
    return [0, 1, 2, 3, *rng.integers(0, alphabet, length).tolist()]


def repetitive_history(seed: int, words, breakers, length: int = 300) -> list[int]:
    """Random words, now and then a breaker, and copies of earlier stretches (the last one at the end):
    repeats of many lengths."""
    rng = np.random.default_rng(seed + 200)
    out = rng.choice(words, 10).tolist()
    while len(out) < length:
        if rng.random() < 0.5:
            start = int(rng.integers(len(out)))
            out += out[start : start + int(rng.integers(2, 15))]
        else:
            out += rng.choice(words, int(rng.integers(1, 4))).tolist()
            if rng.random() < 0.1:
                out += rng.choice(breakers, int(rng.integers(1, 3))).tolist()
    start = int(rng.integers(length // 2))
    return out[: length - 8] + out[start : start + 8]  # it ends repeating something


def assert_same(ours, kept: dict[int, float], size: int) -> None:
    """Our row against llama.cpp's kept {id: logit}: the same kept tokens, scores, probabilities."""
    assert ours.dtype == np.float32 and ours.shape == (size,)
    ids = np.flatnonzero(~np.isneginf(ours))
    assert set(ids.tolist()) == set(kept)
    theirs = np.array([kept[i] for i in ids.tolist()], dtype=np.float32)
    np.testing.assert_allclose(ours[ids], theirs, rtol=1e-5, atol=1e-6)
    ours_kept = {i: float(ours[i]) for i in ids.tolist()}
    np.testing.assert_allclose(
        llama_samplers.probabilities(ours_kept, size), llama_samplers.probabilities(kept, size), rtol=0, atol=1e-5
    )


def llama_penalties(size, last_n, repeat, frequency, presence):
    return llama().llama_sampler_init_penalties(size, last_n, repeat, frequency, presence)


def llama_logit_bias(size, bias):
    lib = llama()
    items = (lib.llama_logit_bias * len(bias))(*(lib.llama_logit_bias(t, b) for t, b in bias.items()))
    return lib.llama_sampler_init_logit_bias(size, len(bias), items)


def llama_dry(vocab, multiplier, base, allowed_length, last_n, breakers):
    lib = llama()
    array = (ctypes.c_char_p * len(breakers))(*(b.encode() for b in breakers))  # processed during init
    return lib.llama_sampler_init_dry(vocab, multiplier, base, allowed_length, last_n, array, len(breakers))


PENALTY_SETTINGS = [  # last_n, repeat, frequency, presence
    (64, 1.3, 0.0, 0.0),
    (-1, 1.1, 0.2, 0.5),
    (10, 1.0, 0.3, 0.0),
    (300, 0.8, -0.1, 0.4),  # repeat < 1 and a negative frequency: allowed by llama.cpp, mirrored
    (1, 2.0, 1.0, 1.0),
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("settings", PENALTY_SETTINGS)
def test_penalties_match_llama_cpp_on_random_rows(seed, settings):
    last_n, repeat, frequency, presence = settings
    row, history = random_row(seed), random_history(seed)
    history[-5:-5] = [len(row) + 5, -2]  # ids outside the row: ignored on both sides
    before = row.copy()
    ours = apply_penalties(row, history, last_n, repeat, frequency, presence)
    assert np.array_equal(row, before, equal_nan=True)  # the input is untouched
    assert not np.array_equal(ours, row)  # the penalties did something
    llama_n = len(history) if last_n == -1 else last_n  # the one deliberate difference
    kept = llama_samplers.apply(llama_penalties(len(row), llama_n, repeat, frequency, presence), row, history)
    assert_same(ours, kept, len(row))


def test_penalties_match_llama_cpp_on_real_rows(real):
    ids, rows = real
    for position in (len(ids) - 1, len(ids) - 8, len(ids) // 2):
        row, history = rows[position], ids[: position + 1]
        for last_n, repeat, frequency, presence in PENALTY_SETTINGS:
            ours = apply_penalties(row, history, last_n, repeat, frequency, presence)
            assert not np.array_equal(ours, row)
            llama_n = len(history) if last_n == -1 else last_n
            sampler = llama_penalties(len(row), llama_n, repeat, frequency, presence)
            assert_same(ours, llama_samplers.apply(sampler, row, history), len(row))


def test_penalties_definition_by_hand():
    row = np.array([2.0, -2.0, 0.0, 3.0, -np.inf, 1.0], dtype=np.float32)
    ours = apply_penalties(row, [0, 0, 1, 2, 4, 9], -1, 2.0, 0.5, 0.25)
    # 0: 2 / 2 - (2 * 0.5 + 0.25); 1: -2 * 2 - 0.75; 2: 0 * 2 - 0.75; -inf stays; 3 and 5 unseen; 9 outside
    np.testing.assert_array_equal(ours, np.array([-0.25, -4.75, -0.75, 3.0, -np.inf, 1.0], dtype=np.float32))
    np.testing.assert_array_equal(apply_penalties(row, [0, 0, 1, 2], 2, 2.0, 0.5, 0.25)[:3], [2.0, -4.75, -0.75])


def test_last_n_minus_one_is_the_whole_history_on_purpose():
    row, history = random_row(0), random_history(0)
    whole = apply_penalties(row, history, -1, 1.3, 0.1, 0.1)
    np.testing.assert_array_equal(whole, apply_penalties(row, history, len(history), 1.3, 0.1, 0.1))
    assert not np.array_equal(whole, row)
    # llama.cpp's own sampler clamps -1 to 0: off (the deliberate difference)
    kept = llama_samplers.apply(llama_penalties(len(row), -1, 1.3, 0.1, 0.1), row, history)
    assert_same(row, kept, len(row))
    with pytest.raises(ValueError, match="last_n"):
        apply_penalties(row, history, -2, 1.3, 0.1, 0.1)


@pytest.mark.parametrize("seed", SEEDS)
def test_logit_bias_matches_llama_cpp(seed, real):
    rng = np.random.default_rng(seed)
    rows = [random_row(seed), real[1][-1 - seed]]
    for row in rows:
        size = len(row)
        bias = {int(t): float(b) for t, b in zip(rng.choice(size, 30, replace=False), rng.normal(0, 3, 30))}
        bias.update({0: 5.0, 1: -1.5, 2: -np.inf, 3: 0.0, size + 7: 4.0, -3: 4.0})  # -inf bans; outside: skipped
        bias[int(np.flatnonzero(row == row.max())[0])] = -np.inf  # ban the favourite
        ours = apply_logit_bias(row, bias)
        assert np.isneginf(ours[2]) and not np.array_equal(ours, row)
        assert_same(ours, llama_samplers.apply(llama_logit_bias(size, bias), row), size)


def test_token_texts_are_llamas(model, texts):
    """The engine's token_bytes is exactly what llama.cpp's DRY reads for SmolLM2 (no space clean-up)."""
    assert texts == [model.tokenizer.token_bytes(i) for i in range(model.vocab_size)]


def test_dry_breakers_are_llamas_restart_sequences(texts, tokenize):
    breakers = dry_breakers(texts, MORE_BREAKERS, tokenize)
    newline, colon, user = tokenize(b"\n")[0], tokenize(b":")[0], tokenize(b"User")[0]
    assert breakers.restarts[newline] == ((), (user, colon))  # "\n" alone, and the start of "\nUser:"
    partial = texts.index(b"\xe2")  # the first byte of \u201c: a head whose tail is the rest, tokenized
    assert breakers.restarts[partial] == (tuple(tokenize(b"\x80\x9c")),)
    assert breakers.breaks_alone[colon] and not breakers.breaks_alone[partial]
    assert not breakers.is_head.flags.writeable
    with pytest.raises(ValueError, match="tokenize"):
        dry_breakers(texts, ["\nUser:"])  # a breaker of several bytes needs the tokenizer for its rest


DRY_SETTINGS = [  # multiplier, base, allowed_length, last_n
    (0.8, 1.75, 2, -1),
    (1.5, 1.1, 3, 50),
    (0.5, 3.0, 1, 200),
    (2.0, 1.0, 2, 100),  # base 1: no exponent cap (llama.cpp caps only for base > 1.000001)
    (0.3, 2.0, 0, 80),
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("breaker_set", [DEFAULT_BREAKERS, MORE_BREAKERS])
def test_dry_matches_llama_cpp_on_random_rows(seed, breaker_set, model, vocab, texts, tokenize):
    breakers = dry_breakers(texts, breaker_set, tokenize)
    words = [tokenize(word.encode())[0] for word in (" the", " cat", " sat", " on", " mat", "User", " dog")]
    words += [4, 5, 6, 7]
    stops = [*tokenize(b"\n:\n\n\xe2\x80"), *tokenize("\u201c*".encode())]  # breakers and heads
    row = random_row(seed, model.vocab_size)
    row[words[:3]] = [-np.inf, 0.0, -1.0]  # a removed follower stays removed
    changed = 0
    for index, (multiplier, base, allowed_length, last_n) in enumerate(DRY_SETTINGS):
        history = repetitive_history(seed * 10 + index, words, stops)
        ours = apply_dry(row, history, multiplier, base, allowed_length, last_n, breakers)
        changed += not np.array_equal(ours, row)
        llama_n = len(history) if last_n == -1 else last_n
        sampler = llama_dry(vocab, multiplier, base, allowed_length, llama_n, breaker_set)
        assert_same(ours, llama_samplers.apply(sampler, row, history), len(row))
    assert changed >= 3  # most settings find a repeat to penalise (a breaker near the end stops some)


def test_dry_matches_llama_cpp_on_real_rows(real, vocab, texts, tokenize):
    ids, rows = real
    for breaker_set in (DEFAULT_BREAKERS, MORE_BREAKERS, ()):
        breakers = dry_breakers(texts, breaker_set, tokenize)
        for position in (len(ids) - 1, len(ids) - 5, len(ids) - 30):
            row, history = rows[position], ids[: position + 1]
            for multiplier, base, allowed_length, last_n in DRY_SETTINGS:
                ours = apply_dry(row, history, multiplier, base, allowed_length, last_n, breakers)
                llama_n = len(history) if last_n == -1 else last_n
                sampler = llama_dry(vocab, multiplier, base, allowed_length, llama_n, breaker_set)
                assert_same(ours, llama_samplers.apply(sampler, row, history), len(row))
        last = apply_dry(rows[-1], ids, 0.8, 1.75, 2, -1, breakers)
        assert not np.array_equal(last, rows[-1])  # " rug" would extend a long repeat


def test_dry_on_llamas_own_example():
    """llama-sampler.cpp's example: last tokens a b c c b c y a b c, repeat counts 0 0 3 1 0 2 0 0 0 0, so
    c would extend a repeat of 3, b of 1, y of 2."""
    a, b, c, y = 10, 11, 12, 13
    history, row = [a, b, c, c, b, c, y, a, b, c], np.zeros(20, dtype=np.float32)
    ours = apply_dry(row, history, 1.0, 2.0, 1, -1, None)
    expected = np.zeros(20, dtype=np.float32)
    expected[[c, b, y]] = [-(2.0**2), -(2.0**0), -(2.0**1)]  # multiplier * base ** (length - allowed_length)
    np.testing.assert_array_equal(ours, expected)
    sampler = llama().llama_sampler_init_dry(None, 1.0, 2.0, 1, len(history), None, 0)
    assert_same(ours, llama_samplers.apply(sampler, row, history), len(row))


def test_dry_restart_sequence_limits_the_repeat(vocab, texts, tokenize):
    """A repeat does not reach back past "\\nUser:" (a head token, then its tail), and a token that is a
    breaker by itself is never lowered."""
    words = [tokenize(w.encode())[0] for w in (" p", " q", " r", " s", " t", " u", " v")]
    p, q, r, s, t, u, v = words
    restart = tokenize(b"\nUser:")
    history = [p, q, r, s, *restart, t, u, v, p, q, r, s, *restart, t, u]
    row = np.zeros(len(texts), dtype=np.float32)
    limited = apply_dry(row, history, 1.0, 2.0, 1, -1, dry_breakers(texts, ["\nUser:"], tokenize))
    free = apply_dry(row, history, 1.0, 2.0, 1, -1, dry_breakers(texts, ["*"]))
    assert limited[v] == -(2.0 ** (2 - 1))  # only " t u" counts
    assert free[v] == -(2.0 ** (len([p, q, r, s, *restart, t, u]) - 1))  # the whole repeat
    for breaker_set, ours in ((["\nUser:"], limited), (["*"], free)):
        sampler = llama_dry(vocab, 1.0, 2.0, 1, len(history), breaker_set)
        assert_same(ours, llama_samplers.apply(sampler, row, history), len(row))
    colon = tokenize(b":")[0]
    history = [p, q, colon, p, q, colon, p, q]  # ":" would extend " p q", but it breaks by itself
    ours = apply_dry(row, history, 1.0, 2.0, 1, -1, dry_breakers(texts, [":"]))
    assert ours[colon] == 0
    sampler = llama_dry(vocab, 1.0, 2.0, 1, len(history), [":"])
    assert_same(ours, llama_samplers.apply(sampler, row, history), len(row))


def test_dry_exponent_cap_and_overflow(vocab, texts):
    """llama.cpp caps the exponent at int(88.7228391 / log(base)) (80 for base 3), computes the penalty in
    double and stores it as a float: 0.5 * 3**80 is finite; 3 * 3**80 overflows to inf, removing the token."""
    breakers = dry_breakers(texts, DEFAULT_BREAKERS)
    stretch = [int(i) for i in np.flatnonzero(~breakers.is_head[1000:])[:120] + 1000]  # 120 tokens, no breaker
    history = stretch + stretch[:-1]  # a repeat of 119 tokens: the last one would extend it
    row = random_row(5, len(texts))
    row[stretch[-1]] = 7.0
    capped = apply_dry(row, history, 0.5, 3.0, 2, -1, breakers)
    assert capped[stretch[-1]] == np.float32(7.0 - np.float32(0.5 * 3.0**80))
    overflow = apply_dry(row, history, 3.0, 3.0, 2, -1, breakers)
    assert np.isneginf(overflow[stretch[-1]])
    for multiplier, ours in ((0.5, capped), (3.0, overflow)):
        sampler = llama_dry(vocab, multiplier, 3.0, 2, len(history), DEFAULT_BREAKERS)
        assert_same(ours, llama_samplers.apply(sampler, row, history), len(row))


def test_neutral_settings_are_no_ops(texts):
    row, history = random_row(1), random_history(1)
    breakers = dry_breakers(texts[: len(row)], DEFAULT_BREAKERS)
    same = [
        apply_penalties(row, history, 64, 1.0, 0.0, 0.0),
        apply_penalties(row, history, 0, 1.5, 0.5, 0.5),
        apply_penalties(row, [], 64, 1.5, 0.5, 0.5),
        apply_logit_bias(row, {}),
        apply_dry(row, history, 0.0, 1.75, 2, -1, breakers),
        apply_dry(row, history, 0.8, 1.75, 2, 0, breakers),
        apply_dry(row, history, 0.8, 0.9, 2, -1, breakers),  # base < 1: off in llama.cpp
        apply_dry(row, history[:2], 0.8, 1.75, 2, -1, breakers),  # no longer than allowed_length
    ]
    for out in same:
        assert out is row
    assert not np.array_equal(apply_dry(row, history + history[:10], 0.8, 1.75, 2, -1, breakers), row)
