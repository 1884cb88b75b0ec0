"""The engine's sampler chain against llama.cpp's own: the contract's stages (temperature, top-k, top-p, min-p)
each alone, and llama.cpp's default order as a whole with every stage on, on random rows and on SmolLM2's real
rows after a real history: the same kept tokens and probabilities within 1e-5. (The other stages alone:
tests/test_penalties_exact.py and tests/test_filters_exact.py.)

Named differences:
- top-p: llama.cpp adds float32 probabilities one by one, and on a real row of 49,152 tokens its running
  sum drifts below the exact one at high p (p 0.97: it keeps 412 tokens where the exact float64 sum keeps
  417; p 0.99: 1,755 for 1,792). The engine's contract top-p (numpy's float32 softmax and cumsum) keeps the
  exact set on these rows. Where the two differ, the test requires the engine's set to be the float64
  answer and llama.cpp's to be a prefix of it, instead of equal sets.
- llama.cpp draws XTC's chance from its own generator, so its XTC runs at probability 1 here (the engine's
  draw is tested in tests/test_sampling_stages.py); -1 for a last-n means the whole text here, len(history)
  is given to llama.cpp."""

import ctypes

import numpy as np
import pytest

import engine
from engine.core.sampling import ChainInput, chain, run_chain, softmax
from engine.core.settings import LLAMA_CPP_ORDER, Settings

pytest.importorskip("llama_cpp")

import llama_samplers  # noqa: E402

from engine.backends.llamacpp.library import llama  # noqa: E402

TEXT = (
    'Alice said: "the cat sat on the mat, and the dog sat on the rug."\n'
    'Bob said: "the cat sat on the mat, and the dog sat on the rug."\n'
    "*Alice* said: the cat sat on the mat, and the dog sat on the"
)
EVERY_STAGE = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.02, repeat_penalty=1.3, presence_penalty=0.4,
                   frequency_penalty=0.2, repeat_last_n=64, dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2,
                   dry_last_n=-1, xtc_probability=1.0, xtc_threshold=0.02, typical_p=0.95, top_n_sigma=3.0,
                   samplers=LLAMA_CPP_ORDER)  # fmt: skip


@pytest.fixture(scope="module")
def model(smollm2_llamacpp):
    return smollm2_llamacpp


@pytest.fixture(scope="module")
def real(model):
    """SmolLM2 on TEXT -> (ids, rows [len(ids), V] float32)."""
    ids = model.tokenizer.encode(TEXT)
    return ids, model.forward_cached(ids, model.new_cache())


def ours(settings: Settings, row, history=(), breakers=None):
    """The engine's chain on one row -> (kept ids as a set, final probabilities [V] float64, the rows)."""
    given = ChainInput(np.asarray(history, dtype=np.int64), 0.0, breakers)
    rows = run_chain(chain(settings), row, softmax(row), given)
    final = rows[next(reversed(rows))]
    probs = np.zeros(len(row))
    probs[final.token_ids()] = final.probs
    return set(final.token_ids()[np.isfinite(final.logits)].tolist()), probs, rows


def assert_same(settings: Settings, row, llama_kept: dict, history=(), breakers=None):
    """The same kept set and probabilities within 1e-5."""
    kept, probs, _rows = ours(settings, row, history, breakers)
    assert kept == set(llama_kept), (sorted(kept - set(llama_kept))[:5], sorted(set(llama_kept) - kept)[:5])
    np.testing.assert_allclose(probs, llama_samplers.probabilities(llama_kept, len(row)), atol=1e-5, rtol=0)
    return kept


def exact_top_p(row, p: float) -> list[int]:
    """top-p in float64 (exact for these purposes): the ranking's shortest prefix whose sum reaches p."""
    x = row.astype(np.float64)
    e = np.exp(x - x.max())
    order = np.lexsort((np.arange(len(x)), -x))
    return order[: int(np.searchsorted(np.cumsum(e[order] / e.sum()), p)) + 1].tolist()


def random_row(seed: int, size: int = 5000):  # [size] float32, spread like a model's scores
    return (np.random.default_rng(seed).standard_normal(size) * 3).astype(np.float32)


def alone(stage: str, **values) -> Settings:
    """Settings that run this stage alone (temperature 1 is the plain softmax: no change)."""
    order = ("temperature",) if stage == "temperature" else (stage, "temperature")
    return Settings(**{"temperature": 1.0, **values, "samplers": order})


CONTRACT_CASES = [
    ("temperature", {"temperature": 0.7}, lambda lib: lib.llama_sampler_init_temp(0.7)),
    ("temperature", {"temperature": 2.5}, lambda lib: lib.llama_sampler_init_temp(2.5)),
    ("temperature", {"temperature": 0.0}, lambda lib: lib.llama_sampler_init_temp(0.0)),
    ("top_k", {"top_k": 1}, lambda lib: lib.llama_sampler_init_top_k(1)),
    ("top_k", {"top_k": 37}, lambda lib: lib.llama_sampler_init_top_k(37)),
    ("top_p", {"top_p": 0.5}, lambda lib: lib.llama_sampler_init_top_p(0.5, 1)),
    ("top_p", {"top_p": 0.97}, lambda lib: lib.llama_sampler_init_top_p(0.97, 1)),
    ("min_p", {"min_p": 0.05}, lambda lib: lib.llama_sampler_init_min_p(0.05, 1)),
    ("min_p", {"min_p": 0.5}, lambda lib: lib.llama_sampler_init_min_p(0.5, 1)),
]


@pytest.mark.parametrize("stage, values, make", CONTRACT_CASES, ids=[f"{c[0]}{c[1]}" for c in CONTRACT_CASES])
def test_each_contract_stage_alone_equals_llama_cpps(stage, values, make, real):
    lib = llama()
    rows = [random_row(seed) for seed in range(3)] + [real[1][-1], real[1][10]]
    for row in rows:
        llama_kept = llama_samplers.apply(make(lib), row)
        if stage == "top_p":
            kept, _probs, _rows = ours(alone(stage, **values), row)
            exact = exact_top_p(row, values["top_p"])
            assert kept == set(exact) and set(llama_kept) == set(exact[: len(llama_kept)])  # see the docstring
            if kept != set(llama_kept):
                continue
        kept = assert_same(alone(stage, **values), row, llama_kept)
        if stage != "temperature" or values["temperature"] == 0:
            assert len(kept) < len(row)  # the stage did remove tokens


def llama_default_chain(lib, model, settings: Settings, history_length: int):
    """llama.cpp's default order with the same parameters (common/sampling.cpp builds it so)."""
    vocab = lib.llama_model_get_vocab(model.handle) if model is not None else None
    breakers = [b.encode() for b in settings.dry_sequence_breakers]
    array = (ctypes.c_char_p * len(breakers))(*breakers)
    size = model.vocab_size if model is not None else None
    return [
        lib.llama_sampler_init_penalties(size or 0, settings.repeat_last_n, settings.repeat_penalty,
                                         settings.frequency_penalty, settings.presence_penalty),
        lib.llama_sampler_init_dry(vocab, settings.dry_multiplier, settings.dry_base, settings.dry_allowed_length,
                                   history_length, array, len(breakers)),
        lib.llama_sampler_init_top_n_sigma(settings.top_n_sigma),
        lib.llama_sampler_init_top_k(settings.top_k),
        lib.llama_sampler_init_typical(settings.typical_p, 1),
        lib.llama_sampler_init_top_p(settings.top_p, 1),
        lib.llama_sampler_init_min_p(settings.min_p, 1),
        lib.llama_sampler_init_xtc(settings.xtc_probability, settings.xtc_threshold, 1, 0),
        lib.llama_sampler_init_temp(settings.temperature),
    ]  # fmt: skip


def test_llama_cpps_default_order_with_every_stage_equals_llama_cpps_chain(model, real):
    """Every stage on, in llama.cpp's order, on SmolLM2's rows at several positions of a repetitive text (so
    the penalties and DRY bite): the same kept set and probabilities as llama.cpp's sampler chain."""
    lib = llama()
    ids, rows = real
    context = model.open_context()
    breakers = context._given(ids, Settings(**EVERY_STAGE)).dry_breakers  # the engine's own, from the vocabulary
    removed_by = set()
    for position in (len(ids) - 1, len(ids) - 4, len(ids) - 20, 12):
        history, row = ids[: position + 1], rows[position]
        settings = Settings(**EVERY_STAGE)
        kept = llama_samplers.chain(llama_default_chain(lib, model, settings, len(history)), row, history)
        assert_same(settings, row, kept, history, breakers)
        _kept, _probs, stages = ours(settings, row, history, breakers)
        assert list(stages) == [name for name in LLAMA_CPP_ORDER if name != "logit_bias"]
        before = len(row)
        for name, stage_row in stages.items():
            if np.count_nonzero(np.isfinite(stage_row.logits)) < before:
                removed_by.add(name)
            before = np.count_nonzero(np.isfinite(stage_row.logits))
    assert {"top_k", "xtc"} <= removed_by  # the filters did remove tokens somewhere


def test_the_default_order_with_neutral_extras_is_the_contracts_chain(real):
    """Settings() runs exactly the contract's four stages, in its order (recorded traces replay on it), and
    greedy after them at temperature 0."""
    assert [stage.name for stage in chain(Settings(temperature=0.8, top_k=5))] == list(engine.STAGE_NAMES[:-1])
    assert [stage.name for stage in chain(Settings(top_k=5))] == [*engine.STAGE_NAMES[:-1], "greedy"]
    row = real[1][-1]
    _kept, probs, _rows = ours(Settings(temperature=0.8, top_k=5, top_p=0.9), row)
    kept = llama_samplers.chain([llama().llama_sampler_init_temp(0.8), llama().llama_sampler_init_top_k(5),
                                 llama().llama_sampler_init_top_p(0.9, 1)], row)  # fmt: skip
    np.testing.assert_allclose(probs, llama_samplers.probabilities(kept, len(row)), atol=1e-5, rtol=0)
