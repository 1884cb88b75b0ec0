"""GGUF models in the numpy engine, on tiny files written with gguf.GGUFWriter: layout, cache, bad files."""

import os
import time

import numpy as np
import pytest

import engine
from engine import gguf_model

import tiny_gguf


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("TOKEN_PLAYGROUND_CACHE", str(directory))
    return directory


@pytest.fixture
def tiny(tmp_path, cache_dir):
    weights = tiny_gguf.random_weights(seed=1)
    path = tiny_gguf.write(tmp_path / "tiny.gguf", weights)
    return path, weights


PROMPT = "<|im_start|>user\nthe answer is 42<|im_end|>\n"


def test_forward_matches_a_direct_reference_at_every_position(tiny):
    path, weights = tiny
    model = engine.load_model(path)
    ids = model.tokenizer.encode(PROMPT)
    ours = model.logits(ids)
    assert ours.dtype == np.float32 and ours.shape == (len(ids), model.vocab_size)
    reference = tiny_gguf.reference_logits(weights, ids)
    scale = np.abs(reference).max()
    assert np.abs(ours - reference).max() <= 1e-5 * scale


def test_quantized_tensors_and_qwen2_biases(tmp_path, cache_dir):
    weights = tiny_gguf.random_weights(seed=2, qkv_bias=True)
    path = tiny_gguf.write(tmp_path / "qwen.gguf", weights, arch="qwen2", quantize_ffn=True)
    model = engine.load_model(path)
    assert model.config.qkv_bias and model.config.rope_neox
    ids = model.tokenizer.encode("the theme in a tin")
    reference = tiny_gguf.reference_logits(weights, ids)
    assert np.abs(model.logits(ids) - reference).max() <= 1e-5 * np.abs(reference).max()


def test_kv_cache_decode_equals_the_full_forward(tiny):
    model = engine.load_model(tiny[0])
    ids = model.tokenizer.encode(PROMPT + "<|im_start|>assistant\n the")
    full = model.logits(ids)
    cache = model.new_cache()
    rows = [model.decode(ids[:5], cache)] + [model.decode([i], cache) for i in ids[5:]]
    np.testing.assert_allclose(np.concatenate(rows), full, atol=1e-5, rtol=0)
    assert cache.k.shape[2] == model.context_length == tiny_gguf.CONTEXT


def test_tokenizer_keeps_control_tokens_whole_and_round_trips(tiny):
    model = engine.load_model(tiny[0])
    tokenizer = model.tokenizer
    ids = tokenizer.encode(PROMPT)
    assert ids[0] == 1 and ids.count(2) == 1  # <|im_start|> and <|im_end|> are single tokens
    assert tokenizer.decode(ids) == PROMPT
    text = "the théorie, 12 €!"
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.encode(" the") == [tokenizer.hf.token_to_id("Ġthe")]


def test_bos_is_added_when_the_file_asks(tmp_path, cache_dir):
    path = tiny_gguf.write(tmp_path / "bos.gguf", tiny_gguf.random_weights(), add_bos=True)
    assert engine.load_model(path).tokenizer.encode("the")[0] == 1


def test_chat_template_renders_the_prompt(tiny):
    model = engine.load_model(tiny[0])
    assert model.chat_prompt("hello") == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"


def test_generation_stops_at_end_of_text(tiny):
    model = engine.load_model(tiny[0])
    session = engine.Session(model, "the", max_new_tokens=5)
    session.force_token(2)  # <|im_end|>
    session.step()
    assert session.stopped == "end of text" and session.step() is None
    result = engine.generate(model, "the", max_new_tokens=7, temperature=1.0, seed=3)
    assert len(result.steps) <= 7 and result.stopped in ("end of text", "max_new_tokens")


def test_second_load_reads_the_cache_and_a_changed_file_rebuilds_it(tiny, cache_dir, monkeypatch):
    path, _ = tiny
    first = engine.load_model(path)
    calls = []
    original = gguf_model.read_gguf
    monkeypatch.setattr(gguf_model, "read_gguf", lambda *a, **k: calls.append(1) or original(*a, **k))
    second = engine.load_model(path)
    assert calls == []  # the GGUF file was not parsed again
    ids = first.tokenizer.encode(PROMPT)
    assert np.array_equal(first.logits(ids), second.logits(ids))
    assert second.weights_sha256 == first.weights_sha256
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # the file changed (newer mtime)
    engine.load_model(path)
    assert calls == [1]
    entries = [p.name for p in cache_dir.glob("gguf/*")]
    assert len(entries) == 1 and not any(".tmp" in e for e in entries)  # the stale cache is gone


def test_progress_is_reported_while_dequantizing(tiny):
    seen = []
    engine.load_model(tiny[0], progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1]


def test_not_a_gguf_file(tmp_path, cache_dir):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04 not a model at all")
    with pytest.raises(ValueError, match=r"is not a GGUF file \(it starts with b'PK\\x03\\x04'"):
        engine.load_model(path)
    with pytest.raises(ValueError, match="no GGUF file at"):
        engine.load_model(tmp_path / "missing.gguf")


def test_truncated_file(tiny, tmp_path):
    data = tiny[0].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(ValueError, match="cut.gguf"):
        engine.load_model(cut)


def test_unsupported_architecture(tmp_path, cache_dir):
    path = tiny_gguf.write(tmp_path / "gpt2.gguf", tiny_gguf.random_weights(), arch="gpt2")
    with pytest.raises(ValueError, match="architecture 'gpt2' is not supported"):
        engine.load_model(path)


def test_float32_end_to_end(tiny):
    model = engine.load_model(tiny[0])
    assert all(np.asarray(w).dtype == np.float32 for name, w in gguf_model._flatten(model.weights))
    assert model.logits([5, 6, 7]).dtype == np.float32
