"""GGUF models in the numpy engine, on tiny files written with gguf.GGUFWriter: layout, cache, bad files."""

import os
import threading
import time

import numpy as np
import pytest
import tiny_gguf

import engine
from engine.backends.gguf import cache as gguf_cache
from engine.backends.gguf import load as gguf_load
from engine.backends.gguf import model as gguf_model


@pytest.fixture
def tiny(tmp_path, cache_dir):
    weights = tiny_gguf.random_weights(seed=1)
    path = tiny_gguf.write(tmp_path / "tiny.gguf", weights)
    return path, weights


PROMPT = "<|im_start|>user\nthe answer is 42<|im_end|>\n"


def test_forward_matches_a_direct_reference_at_every_position(tiny):
    path, weights = tiny
    model = engine.load_model(path, backend="numpy")
    ids = model.tokenizer.encode(PROMPT)
    ours = model.scores(ids)
    assert ours.dtype == np.float32 and ours.shape == (len(ids), model.vocab_size)
    reference = tiny_gguf.reference_logits(weights, ids)
    scale = np.abs(reference).max()
    assert np.abs(ours - reference).max() <= 1e-5 * scale


def test_quantized_tensors_and_qwen2_biases(tmp_path, cache_dir):
    weights = tiny_gguf.random_weights(seed=2, qkv_bias=True)
    path = tiny_gguf.write(tmp_path / "qwen.gguf", weights, arch="qwen2", quantize_ffn=True)
    model = engine.load_model(path, backend="numpy")
    assert model.config.qkv_bias and model.config.rope_neox
    ids = model.tokenizer.encode("the theme in a tin")
    reference = tiny_gguf.reference_logits(weights, ids)
    assert np.abs(model.scores(ids) - reference).max() <= 1e-5 * np.abs(reference).max()


def test_kv_cache_decode_equals_the_full_forward(tiny):
    model = engine.load_model(tiny[0], backend="numpy")
    ids = model.tokenizer.encode(PROMPT + "<|im_start|>assistant\n the")
    full = model.scores(ids)
    cache = model.new_cache()
    rows = [model.forward_cached(ids[:5], cache)] + [model.forward_cached([i], cache) for i in ids[5:]]
    np.testing.assert_allclose(np.concatenate(rows), full, atol=1e-5, rtol=0)
    assert cache.k.shape[2] == model.context_length == tiny_gguf.CONTEXT


def test_tokenizer_keeps_control_tokens_whole_and_round_trips(tiny):
    model = engine.load_model(tiny[0], backend="numpy")
    tokenizer = model.tokenizer
    ids = tokenizer.encode(PROMPT)
    assert ids[0] == 1 and ids.count(2) == 1  # <|im_start|> and <|im_end|> are single tokens
    assert tokenizer.decode(ids) == PROMPT
    text = "the théorie, 12 €!"
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.encode(" the") == [tokenizer.hf.token_to_id("Ġthe")]


def test_bos_is_added_when_the_file_asks(tmp_path, cache_dir):
    path = tiny_gguf.write(tmp_path / "bos.gguf", tiny_gguf.random_weights(), add_bos=True)
    assert engine.load_model(path, backend="numpy").tokenizer.encode("the")[0] == 1


def test_chat_template_renders_the_prompt(tiny):
    model = engine.load_model(tiny[0], backend="numpy")
    assert model.chat_prompt("hello") == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"


def test_generation_stops_at_end_of_text(tiny):
    model = engine.load_model(tiny[0], backend="numpy")
    session = engine.Session(model, "the", max_new_tokens=5)
    session.force_token(2)  # <|im_end|>
    session.step()
    assert session.stopped == "end of text" and session.step() is None
    result = engine.generate(model, "the", max_new_tokens=7, temperature=1.0, seed=3)
    assert len(result.steps) <= 7 and result.stopped in ("end of text", "max_new_tokens")


def test_second_load_reads_the_cache_and_a_changed_file_rebuilds_it(tiny, cache_dir, monkeypatch):
    path, _ = tiny
    first = engine.load_model(path, backend="numpy")
    calls = []
    original = gguf_load.read_gguf
    monkeypatch.setattr(gguf_load, "read_gguf", lambda *a, **k: calls.append(1) or original(*a, **k))
    second = engine.load_model(path, backend="numpy")
    assert calls == []  # the GGUF file was not parsed again
    ids = first.tokenizer.encode(PROMPT)
    assert np.array_equal(first.scores(ids), second.scores(ids))
    assert second.weights_sha256 == first.weights_sha256
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # the file changed (newer mtime)
    engine.load_model(path, backend="numpy")
    assert calls == [1]
    entries = [p.name for p in cache_dir.glob("gguf/*")]
    assert len(entries) == 1 and not any(".tmp" in e for e in entries)  # the stale cache is gone


def test_progress_is_reported_while_dequantizing(tiny):
    seen = []
    engine.load_model(tiny[0], progress=lambda done, total: seen.append((done, total)), backend="numpy")
    assert seen and seen[-1][0] == seen[-1][1]


def test_not_a_gguf_file(tmp_path, cache_dir):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04 not a model at all")
    with pytest.raises(ValueError, match=r"is not a GGUF file \(it starts with b'PK\\x03\\x04'"):
        engine.load_model(path, backend="numpy")
    with pytest.raises(ValueError, match="no GGUF file at"):
        engine.load_model(tmp_path / "missing.gguf", backend="numpy")


def test_truncated_file(tiny, tmp_path):
    data = tiny[0].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(ValueError, match="cut.gguf"):
        engine.load_model(cut, backend="numpy")


def test_unsupported_architecture(tmp_path, cache_dir):
    path = tiny_gguf.write(tmp_path / "gpt2.gguf", tiny_gguf.random_weights(), arch="gpt2")
    with pytest.raises(ValueError, match="architecture 'gpt2' is not supported"):
        engine.load_model(path, backend="numpy")


def test_float32_end_to_end(tiny):
    model = engine.load_model(tiny[0], backend="numpy")
    assert all(np.asarray(w).dtype == np.float32 for name, w in gguf_cache._flatten(model.weights))
    assert model.scores([5, 6, 7]).dtype == np.float32


def _blas_threads_now() -> list[int]:
    from threadpoolctl import threadpool_info

    return [lib["num_threads"] for lib in threadpool_info() if lib["internal_api"] == "openblas"]


def test_decode_and_prompt_run_under_the_chosen_blas_threads_in_any_thread(tiny, monkeypatch):
    """Checked from inside the forward pass, in the calling thread and in another thread (the window's
    worker), while a third party has OpenBLAS at 2 threads; the count is put back after each pass."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if not _blas_threads_now():
        pytest.skip("numpy's BLAS here is not OpenBLAS")
    from engine.backends import blas_threads

    model = engine.load_model(tiny[0], backend="numpy")
    ids = model.tokenizer.encode(PROMPT)
    seen = []
    real_forward = gguf_model.forward

    def spying_forward(weights, config, ids, *rest, **options):
        seen.append((len(ids), _blas_threads_now()))
        return real_forward(weights, config, ids, *rest, **options)

    monkeypatch.setattr(gguf_model, "forward", spying_forward)

    def prompt_then_token():
        cache = model.new_cache()
        model.forward_cached(ids, cache, last_only=True)
        model.forward_cached(ids[:1], cache)

    # threadpoolctl lets only the thread that set a limit first change it again: this one, here
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        prompt_then_token()
        worker = threading.Thread(target=prompt_then_token)
        worker.start()
        worker.join()
        after = _blas_threads_now()
    prompt, token = [min(blas_threads.PREFILL_THREADS, 2)], [min(blas_threads.DECODE_THREADS, 2)]  # never raised
    assert seen == [(len(ids), prompt), (1, token)] * 2
    assert after == [2] * len(after)  # the caller's own setting is back


def test_kv_cache_takes_small_pages_not_huge_ones(tiny):
    """np.zeros asks for transparent huge pages on large arrays: a real model's first token then cost a
    2 MB page per (layer, head) of the cache (0.6-0.9 s of kernel time for SmolLM2's, measured)."""
    from dataclasses import replace

    smaps = "/proc/self/smaps"
    if not os.path.exists(smaps) or "[never]" in _read("/sys/kernel/mm/transparent_hugepage/enabled"):
        pytest.skip("no transparent huge pages here")
    config = replace(
        engine.load_model(tiny[0], backend="numpy").config, n_layers=30, n_kv_heads=3, head_dim=64
    )  # SmolLM2's
    cache = gguf_model.LlamaCache(config, 8192)
    cache.k[:, :, 0] = 1.0  # the first position of every (layer, head), as the first token writes it
    mappings = _mappings_over(cache.k.ctypes.data, cache.k.nbytes, smaps)  # madvise may split a mapping
    if not mappings or any("THPeligible" not in m for m in mappings):
        pytest.skip("this kernel does not report THPeligible")
    assert [m["THPeligible"] for m in mappings] == ["0"] * len(mappings)
    assert sum(int(m["Rss"].split()[0]) for m in mappings) < 4096  # kB: 90 small pages, not 90 huge ones
    assert cache.k.dtype == np.float32 and not cache.v.any()


def _read(path) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _mappings_over(address: int, size: int, smaps: str) -> list[dict]:
    """The fields of every mapping in /proc/self/smaps that overlaps [address, address + size)."""
    mappings, inside = [], False
    for line in _read(smaps).splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(part, 16) for part in head.split("-"))
            inside = start < address + size and address < end
            if inside:
                mappings.append({})
        elif inside:
            key, _, value = line.partition(":")
            mappings[-1][key] = value.strip()
    return mappings


def test_a_cache_being_written_by_another_process_is_left_alone_and_a_dead_writers_is_swept(tiny, cache_dir):
    """Two test workers loaded SmolLM2 at once from a cold cache: the first to finish swept the other's temporary
    directory while it was being written (FileNotFoundError at meta.json). A fresh temporary directory is another
    writer's now; one untouched for an hour was left by a writer that died."""
    from engine.backends.gguf.cache import STALE_SECONDS

    path, _ = tiny
    engine.load_model(path, backend="numpy")
    (entry,) = (cache_dir / "gguf").iterdir()
    writing, dead = (cache_dir / "gguf" / f"{entry.name}.tmp{n}" for n in ("writing", "dead"))
    for folder in (writing, dead):
        folder.mkdir()
        (folder / "weights.npy").write_bytes(b"half")
    long_ago = time.time() - STALE_SECONDS - 60
    os.utime(dead, (long_ago, long_ago))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # the file changed: its cache is written again
    engine.load_model(path, backend="numpy")
    assert writing.is_dir() and (writing / "weights.npy").read_bytes() == b"half" and not dead.exists()
