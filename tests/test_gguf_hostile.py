"""Hostile GGUF files and damaged float32 caches (issue 11), on tiny files written with gguf.GGUFWriter.

A cache that does not verify is rebuilt from the GGUF file, with a CacheRebuiltWarning, and never used; a
GGUF file whose metadata and tensors disagree is refused when it is opened, with a ValueError naming the
file and the key or tensor at fault."""

import json
import os
import re

import numpy as np
import pytest
import tiny_gguf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_gguf import DROP, FF, N_HEADS, N_KV, D

import engine
from engine.backends.gguf import cache as gguf_cache
from engine.backends.gguf import load as gguf_load
from engine.backends.gguf.model import LlamaConfig

PROMPT = "<|im_start|>user\nthe answer is 42<|im_end|>\n"


@pytest.fixture
def tiny(tmp_path, cache_dir):
    return tiny_gguf.write(tmp_path / "tiny.gguf", tiny_gguf.random_weights(seed=1))


@pytest.fixture
def gguf_reads(monkeypatch):
    """How many times the GGUF file itself was parsed (0: the cache was used)."""
    calls = []
    original = gguf_load.read_gguf
    monkeypatch.setattr(gguf_load, "read_gguf", lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


def the_cache(cache_dir):
    (entry,) = (cache_dir / "gguf").iterdir()
    return entry


# --- damaged caches ----------------------------------------------------------------------------------


def flip_byte(directory, name="weights.npy", at=0.5):
    data = bytearray((directory / name).read_bytes())
    data[int(len(data) * at)] ^= 0x40
    (directory / name).write_bytes(bytes(data))


def zero_4k(directory):
    data = bytearray((directory / "weights.npy").read_bytes())
    data[4096:8192] = bytes(4096)
    (directory / "weights.npy").write_bytes(bytes(data))


def npy_dtype(directory, dtype):
    data = (directory / "weights.npy").read_bytes()
    (directory / "weights.npy").write_bytes(data.replace(b"'<f4'", dtype.encode(), 1))


def edit_meta(directory, edit):
    meta = json.loads((directory / "meta.json").read_text())
    edit(meta)
    (directory / "meta.json").write_text(json.dumps(meta))


def swap_index(meta):  # two entries of the same shape trade places: only a digest can tell
    index = meta["index"]
    index[3]["offset"], index[4]["offset"] = index[4]["offset"], index[3]["offset"]


def edit_tokenizer_json(directory, edit):
    tokenizer = json.loads((directory / "tokenizer.json").read_text())
    edit(tokenizer)
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer))


def cut(directory, name, keep=0.5):
    data = (directory / name).read_bytes()
    (directory / name).write_bytes(data[: int(len(data) * keep)])


def replace_with_file(directory):
    for entry in directory.iterdir():
        entry.unlink()
    directory.rmdir()
    directory.write_text("not a cache")


def replace_with_dangling_link(directory):
    replace_with_file(directory)
    directory.unlink()
    directory.symlink_to(directory.parent / "nowhere")


def set_config(field, value):
    return lambda d: edit_meta(d, lambda meta: meta["config"].__setitem__(field, value))


CORRUPTIONS = {
    "a byte flipped in weights.npy": lambda d: flip_byte(d),
    "a byte flipped in the last weight": lambda d: flip_byte(d, at=0.9999),
    "4 KB of weights.npy zeroed": zero_4k,
    "weights.npy's dtype changed to int32": lambda d: npy_dtype(d, "'<i4'"),
    "weights.npy's dtype changed to big-endian": lambda d: npy_dtype(d, "'>f4'"),
    "weights.npy cut short": lambda d: cut(d, "weights.npy", keep=0.9),
    "weights.npy with bytes appended": lambda d: (d / "weights.npy").write_bytes((d / "weights.npy").read_bytes() + bytes(64)),
    "weights.npy empty": lambda d: (d / "weights.npy").write_bytes(b""),
    "weights.npy missing": lambda d: (d / "weights.npy").unlink(),
    "meta.json: rms epsilon edited": set_config("rms_eps", 1e-3),
    "meta.json: rope base edited": set_config("rope_base", 500.0),
    "meta.json: block count edited": set_config("n_layers", 1),
    "meta.json: head count edited": set_config("n_heads", 0),
    "meta.json: tied output flipped": set_config("tied_output", False),
    "meta.json: file_sha256 edited": lambda d: edit_meta(d, lambda m: m.__setitem__("file_sha256", "0" * 64)),
    "meta.json: name edited": lambda d: edit_meta(d, lambda m: m.__setitem__("name", "another model")),
    "meta.json: bos id edited": lambda d: edit_meta(d, lambda m: m["tokenizer"].__setitem__("bos_id", 5)),
    "meta.json: a file digest edited": lambda d: edit_meta(d, lambda m: m["files"].__setitem__("weights.npy", "0" * 64)),
    "meta.json: its digest removed": lambda d: edit_meta(d, lambda m: m.pop("digest")),
    "meta.json: index entries swapped": lambda d: edit_meta(d, swap_index),
    "meta.json: schema removed": lambda d: edit_meta(d, lambda m: m.pop("schema")),
    "meta.json is []": lambda d: (d / "meta.json").write_text("[]"),
    "meta.json cut short": lambda d: cut(d, "meta.json"),
    "meta.json missing": lambda d: (d / "meta.json").unlink(),
    "tokenizer.json: a merge removed": lambda d: edit_tokenizer_json(d, lambda t: t["model"]["merges"].pop()),
    "tokenizer.json: a byte flipped": lambda d: flip_byte(d, "tokenizer.json"),
    "tokenizer.json damaged": lambda d: cut(d, "tokenizer.json"),
    "tokenizer.json empty": lambda d: (d / "tokenizer.json").write_bytes(b""),
    "the cache folder replaced by a file": replace_with_file,
    "the cache folder replaced by a dangling link": replace_with_dangling_link,
    "the cache folder empty": lambda d: [entry.unlink() for entry in d.iterdir()],
}  # fmt: skip


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_a_damaged_cache_is_rebuilt_with_a_warning_and_never_used(tiny, cache_dir, gguf_reads, corrupt):
    clean = engine.load_model(tiny, backend="numpy")
    ids = clean.tokenizer.encode(PROMPT)
    expected = clean.scores(ids)
    corrupt(the_cache(cache_dir))
    with pytest.warns(gguf_cache.CacheRebuiltWarning, match="rebuilding it from the GGUF file"):
        rebuilt = engine.load_model(tiny, backend="numpy")
    assert len(gguf_reads) == 2  # the first load and the rebuild parsed the file
    again = engine.load_model(
        tiny, backend="numpy"
    )  # the rebuilt cache verifies (no warning: warnings fail tests here)
    assert len(gguf_reads) == 2
    for model in (rebuilt, again):
        assert np.array_equal(model.scores(ids), expected)
        assert model.tokenizer.encode(PROMPT) == ids and model.tokenizer.decode(ids) == PROMPT
        assert (model.weights_sha256, model.name, model.config) == (clean.weights_sha256, clean.name, clean.config)
        assert model.tokenizer.bos_id == clean.tokenizer.bos_id


def test_a_cache_of_an_older_schema_is_rebuilt_quietly(tiny, cache_dir, gguf_reads):
    clean = engine.load_model(tiny, backend="numpy")
    edit_meta(the_cache(cache_dir), lambda meta: meta.__setitem__("schema", "token-playground/gguf-cache/2"))
    model = engine.load_model(tiny, backend="numpy")  # no warning: an update is expected to bring a new schema
    assert len(gguf_reads) == 2
    assert np.array_equal(model.scores([5, 6, 7]), clean.scores([5, 6, 7]))


def test_the_cache_records_and_checks_digests(tiny, cache_dir):
    engine.load_model(tiny, backend="numpy")
    directory = the_cache(cache_dir)
    meta = json.loads((directory / "meta.json").read_text())
    assert meta["schema"] == gguf_cache.CACHE_SCHEMA and set(meta["files"]) == {"weights.npy", "tokenizer.json"}
    assert meta["digest"] == gguf_cache._meta_digest(meta)
    assert meta["index"] == gguf_cache._cache_index(LlamaConfig(**meta["config"]))


# --- hostile GGUF files ------------------------------------------------------------------------------

HEAD_DIM = D // N_HEADS
ARCH = "llama"
TOKENS, TYPES = tiny_gguf.vocabulary()


def zeros(*shape):
    return np.zeros(shape, np.float32)


HOSTILE = {  # name -> (write() options, what the message must name)
    "block_count missing": ({"metadata": {"llama.block_count": DROP}}, r"llama\.block_count is missing"),
    "embedding_length missing": ({"metadata": {"llama.embedding_length": DROP}}, r"llama\.embedding_length is missing"),
    "head_count missing": ({"metadata": {"llama.attention.head_count": DROP}}, r"llama\.attention\.head_count is missing"),
    "feed_forward_length missing": ({"metadata": {"llama.feed_forward_length": DROP}}, r"llama\.feed_forward_length is missing"),
    "tokenizer model missing": ({"metadata": {"tokenizer.ggml.model": DROP}}, r"tokenizer\.ggml\.model is None"),
    "token list missing": ({"metadata": {"tokenizer.ggml.tokens": DROP}}, r"tokenizer\.ggml\.tokens is missing"),
    "head_count 0": ({"metadata": {"llama.attention.head_count": 0}},
                     r"llama\.attention\.head_count is 0; it must be a positive integer that divides llama\.embedding_length \(32\)"),
    "head_count does not divide": ({"metadata": {"llama.attention.head_count": 3}}, r"llama\.attention\.head_count is 3"),
    "head_count_kv 0": ({"metadata": {"llama.attention.head_count_kv": 0}}, r"llama\.attention\.head_count_kv is 0"),
    "head_count_kv does not divide": ({"metadata": {"llama.attention.head_count_kv": 3}},
                                      r"head_count_kv is 3; .* divides llama\.attention\.head_count \(4\)"),
    "head_count huge": ({"metadata": {"llama.attention.head_count": 2**40}}, r"llama\.attention\.head_count is 1099511627776"),
    "head_count negative": ({"metadata": {"llama.attention.head_count": -4}}, r"llama\.attention\.head_count is -4"),
    "key_length odd": ({"metadata": {"llama.attention.key_length": 7}}, r"llama\.attention\.key_length is 7; it must be even"),
    "key_length disagrees with the tensors": ({"metadata": {"llama.attention.key_length": 4}}, r"blk\.0\.attn_q\.weight has shape"),
    "value_length differs": ({"metadata": {"llama.attention.value_length": 4}}, r"llama\.attention\.value_length is 4"),
    "block_count 0": ({"metadata": {"llama.block_count": 0}}, r"llama\.block_count is 0"),
    "block_count smaller than the tensors": ({"metadata": {"llama.block_count": 1}},
                                             r"blk\.1\.attn_norm\.weight is in block 1, but llama\.block_count is 1"),
    "block_count larger than the tensors": ({"metadata": {"llama.block_count": 3}}, r"tensor blk\.2\.attn_norm\.weight is missing"),
    "block_count huge": ({"metadata": {"llama.block_count": 2**31 - 1}},
                         r"llama\.block_count is 2147483647, but the file has no tensors for block 2"),
    "block_count a string": ({"metadata": {"llama.block_count": "2"}}, r"llama\.block_count is '2' \(str\)"),
    "embedding_length a float": ({"metadata": {"llama.embedding_length": 32.0}}, r"llama\.embedding_length is 32\.0 \(float\)"),
    "feed_forward_length a bool": ({"metadata": {"llama.feed_forward_length": True}}, r"llama\.feed_forward_length is True \(bool\)"),
    "embedding_length disagrees with the tensors": ({"metadata": {"llama.embedding_length": 64}}, r"token_embd\.weight has shape"),
    "feed_forward_length disagrees": ({"metadata": {"llama.feed_forward_length": 40}}, r"blk\.0\.ffn_gate\.weight has shape"),
    "context_length 0": ({"metadata": {"llama.context_length": 0}}, r"llama\.context_length is 0"),
    "context_length negative": ({"metadata": {"llama.context_length": -1}}, r"llama\.context_length is -1"),
    "rope base 0": ({"metadata": {"llama.rope.freq_base": 0.0}}, r"llama\.rope\.freq_base is 0\.0"),
    "rope base nan": ({"metadata": {"llama.rope.freq_base": float("nan")}}, r"llama\.rope\.freq_base is nan"),
    "rope base infinite": ({"metadata": {"llama.rope.freq_base": float("inf")}}, r"llama\.rope\.freq_base is inf"),
    "rms epsilon negative": ({"metadata": {"llama.attention.layer_norm_rms_epsilon": -0.5}}, r"layer_norm_rms_epsilon is -0\.5"),
    "rms epsilon a string": ({"metadata": {"llama.attention.layer_norm_rms_epsilon": "1e-5"}}, r"layer_norm_rms_epsilon is '1e-5'"),
    "token list shorter than the embeddings": ({"metadata": {"tokenizer.ggml.tokens": TOKENS[:-3]}},
                                               r"tokenizer\.ggml\.tokens has 261 tokens, but token_embd\.weight has 264 rows"),
    "token list longer than the embeddings": ({"metadata": {"tokenizer.ggml.tokens": TOKENS + ["xyz"]}}, r"tokenizer\.ggml\.tokens has 265"),
    "token list of numbers": ({"metadata": {"tokenizer.ggml.tokens": list(range(len(TOKENS)))}}, r"tokenizer\.ggml\.tokens\[0\] is 0 \(int\)"),
    "token types too short": ({"metadata": {"tokenizer.ggml.token_type": TYPES[:10]}}, r"tokenizer\.ggml\.token_type has 10 entries"),
    "token types of strings": ({"metadata": {"tokenizer.ggml.token_type": ["1"] * len(TYPES)}}, r"tokenizer\.ggml\.token_type\[0\]"),
    "a merge without a space": ({"metadata": {"tokenizer.ggml.merges": ["he"]}}, r"tokenizer\.ggml\.merges\[0\] is 'he'"),
    "a merge of tokens not in the vocabulary": ({"metadata": {"tokenizer.ggml.merges": ["q z"]}},
                                                r"the tokenizer cannot be built.*qz"),
    "a merge list that is a string": ({"metadata": {"tokenizer.ggml.merges": "h e"}}, r"tokenizer\.ggml\.merges is a str"),
    "tokenizer model not BPE": ({"metadata": {"tokenizer.ggml.model": "llama"}}, r"tokenizer\.ggml\.model is 'llama'"),
    "bos id out of range": ({"metadata": {"tokenizer.ggml.bos_token_id": 264}}, r"tokenizer\.ggml\.bos_token_id is 264; .* 0 to 263"),
    "eos id negative": ({"metadata": {"tokenizer.ggml.eos_token_id": -1}}, r"tokenizer\.ggml\.eos_token_id is -1"),
    "eot id a string": ({"metadata": {"tokenizer.ggml.eot_token_id": "2"}}, r"tokenizer\.ggml\.eot_token_id is '2'"),
    "add_bos an int": ({"metadata": {"tokenizer.ggml.add_bos_token": 1}}, r"tokenizer\.ggml\.add_bos_token is 1 \(int\)"),
    "architecture a number": ({"metadata": {"general.architecture": 7}}, r"architecture 7 is not supported"),
    "token embeddings missing": ({"tensors": {"token_embd.weight": DROP}}, r"tensor token_embd\.weight is missing"),
    "output norm missing": ({"tensors": {"output_norm.weight": DROP}}, r"tensor output_norm\.weight is missing"),
    "a block tensor missing": ({"tensors": {"blk.1.ffn_down.weight": DROP}}, r"tensor blk\.1\.ffn_down\.weight is missing"),
    "token embeddings one-dimensional": ({"tensors": {"token_embd.weight": zeros(264 * D)}}, r"tensor token_embd\.weight has shape"),
    "token embeddings of the wrong width": ({"tensors": {"token_embd.weight": zeros(264, D + 1)}}, r"token_embd\.weight has shape \[264, 33\]"),
    "output of the wrong vocabulary": ({"tensors": {"output.weight": zeros(200, D)}}, r"tensor output\.weight has shape \[200, 32\]"),
    "output norm of the wrong length": ({"tensors": {"output_norm.weight": zeros(D + 2)}}, r"output_norm\.weight has shape \[34\]"),
    "attn_q of the wrong shape": ({"tensors": {"blk.0.attn_q.weight": zeros(N_HEADS * HEAD_DIM, D + 8)}}, r"blk\.0\.attn_q\.weight has shape"),
    "attn_k with too many heads": ({"tensors": {"blk.1.attn_k.weight": zeros(N_HEADS * HEAD_DIM, D)}}, r"blk\.1\.attn_k\.weight has shape"),
    "attn_v transposed": ({"tensors": {"blk.0.attn_v.weight": zeros(D, N_KV * HEAD_DIM)}}, r"blk\.0\.attn_v\.weight has shape"),
    "attn_output transposed": ({"tensors": {"blk.0.attn_output.weight": zeros(D, N_HEADS * HEAD_DIM + 8)}}, r"attn_output\.weight has shape"),
    "ffn_up of the wrong size": ({"tensors": {"blk.1.ffn_up.weight": zeros(FF + 4, D)}}, r"blk\.1\.ffn_up\.weight has shape"),
    "ffn_down transposed": ({"tensors": {"blk.0.ffn_down.weight": zeros(FF, D)}}, r"blk\.0\.ffn_down\.weight has shape \[48, 32\]"),
    "a norm of the wrong length": ({"tensors": {"blk.1.ffn_norm.weight": zeros(D - 1)}}, r"blk\.1\.ffn_norm\.weight has shape \[31\]"),
    "a block beyond block_count": ({"tensors": {"blk.2.attn_norm.weight": zeros(D)}}, r"blk\.2\.attn_norm\.weight is in block 2"),
    "a tensor this engine does not run": ({"tensors": {"blk.0.ffn_gate_exps.weight": zeros(4, D)}},
                                          r"blk\.0\.ffn_gate_exps\.weight is not part of the llama block"),
    "a bias on one block only": ({"tensors": {"blk.1.attn_q.bias": zeros(N_HEADS * HEAD_DIM)}}, r"blk\.1\.attn_q\.bias is not part"),
}  # fmt: skip


@pytest.mark.parametrize("options, message", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_file_is_refused_naming_the_field(tmp_path, cache_dir, options, message):
    path = tiny_gguf.write(tmp_path / "hostile.gguf", tiny_gguf.random_weights(seed=1), **options)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ": .*" + message):
        engine.load_model(path, backend="numpy")
    assert not (cache_dir / "gguf").exists() or not any((cache_dir / "gguf").iterdir())  # nothing cached


QWEN_Q = N_HEADS * HEAD_DIM
QWEN_HOSTILE = {
    "qwen2: a k bias missing": ({"blk.0.attn_k.bias": DROP}, r"tensor blk\.0\.attn_k\.bias is missing"),
    "qwen2: a v bias of the wrong length": ({"blk.1.attn_v.bias": zeros(QWEN_Q)}, r"blk\.1\.attn_v\.bias has shape \[32\]"),
}  # fmt: skip


@pytest.mark.parametrize("tensors, message", QWEN_HOSTILE.values(), ids=QWEN_HOSTILE.keys())
def test_a_hostile_qwen2_file_is_refused(tmp_path, cache_dir, tensors, message):
    weights = tiny_gguf.random_weights(seed=2, qkv_bias=True)
    path = tiny_gguf.write(tmp_path / "qwen.gguf", weights, arch="qwen2", quantize_ffn=True, tensors=tensors)
    with pytest.raises(ValueError, match="qwen.gguf: .*" + message):
        engine.load_model(path, backend="numpy")


def test_a_huge_declared_context_allocates_only_the_capped_positions(tmp_path, cache_dir):
    from engine.backends.gguf.checks import MAX_POSITIONS

    path = tiny_gguf.write(tmp_path / "long.gguf", tiny_gguf.random_weights(seed=1),
                           metadata={"llama.context_length": 2**32 - 1})  # fmt: skip
    for model in (
        engine.load_model(path, backend="numpy"),
        engine.load_model(path, backend="numpy"),
    ):  # from the file, then from the cache
        assert model.config.context_length == 2**32 - 1  # what the file says, kept
        assert model.context_length == MAX_POSITIONS and model.new_cache().k.shape[2] == MAX_POSITIONS
        assert model._tables[0].shape == (MAX_POSITIONS, HEAD_DIM // 2)
        assert model.scores([1, 5, 9]).shape == (3, model.vocab_size)


@pytest.mark.parametrize("requested", [0, -1, 1.5, True, "64", 2**0.5])
def test_a_requested_context_length_is_checked(tiny, requested):
    with pytest.raises(
        ValueError, match=f"context_length is {re.escape(repr(requested))}; it must be a positive integer"
    ):
        engine.load_model(tiny, context_length=requested, backend="numpy")


def test_a_requested_context_length_is_kept_within_the_models(tiny):
    assert engine.load_model(tiny, context_length=16, backend="numpy").context_length == 16
    assert engine.load_model(tiny, context_length=np.int64(20), backend="numpy").context_length == 20
    assert engine.load_model(tiny, context_length=10**12, backend="numpy").context_length == tiny_gguf.CONTEXT


# --- any metadata at all -----------------------------------------------------------------------------

CHECKED_KEYS = [f"{ARCH}.{key}" for key in (
    "block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.freq_base",
    "attention.layer_norm_rms_epsilon")] + [f"tokenizer.ggml.{key}" for key in (
    "model", "pre", "tokens", "token_type", "merges", "bos_token_id", "eos_token_id", "eot_token_id",
    "add_bos_token")] + ["tokenizer.chat_template", "general.architecture"]  # fmt: skip
PLAUSIBLE = [1, 2, 4, 8, 16, 32, 48, 128, 263, 10000.0, 1e-6, "gpt2", "llama-bpe", "qwen2", "smollm", True, False]
VALUES = st.one_of(
    st.sampled_from(PLAUSIBLE),  # values a real file might hold, so that some examples load and run
    st.sampled_from([0, -1, 3, 7, 264, 2**31 - 1, 2**32 - 1, 2**40, 2**63, -(2**40), DROP]),
    st.integers(-(2**31), 2**32 - 1),
    st.floats(width=32),
    st.booleans(),
    st.text(max_size=4),
    st.lists(st.integers(0, 300), min_size=1, max_size=3),  # GGUFWriter cannot write an empty array
    st.lists(st.text(max_size=3), min_size=1, max_size=3),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overrides=st.dictionaries(st.sampled_from(CHECKED_KEYS), VALUES, min_size=1, max_size=3))
def test_any_metadata_either_runs_or_is_refused_with_a_value_error(tmp_path, cache_dir, overrides):
    path = tiny_gguf.write(
        tmp_path / f"any-{os.urandom(6).hex()}.gguf", tiny_gguf.random_weights(seed=1), metadata=overrides
    )
    try:
        model = engine.load_model(path, backend="numpy")
    except ValueError as error:
        assert str(error).startswith(str(path))
        return
    finally:
        path.unlink()
    ids = model.tokenizer.encode("the théorie 12")
    assert model.tokenizer.decode(ids) is not None
    assert np.isfinite(model.scores([0, 5, model.vocab_size - 1][: model.context_length])).all()
