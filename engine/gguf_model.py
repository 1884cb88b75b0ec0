"""Llama-family models from GGUF files (SmolLM, Llama, Mistral-style; Qwen2's q/k/v biases too), in numpy.

The file is read and dequantized with the `gguf` package; compute is float32 end to end. Weights are kept
as [in, out] so a layer is `x @ w`; q and k are stored the way GGUF stores them (llama.cpp's converter
permutes them so that rotary embeddings rotate pairs of adjacent dimensions), and `rope` rotates exactly
those pairs. Attention is grouped-query; the KV cache is preallocated for the whole context (numpy's
zero pages cost nothing until a position is used), so no token ever copies the cache.

The first load of a file dequantizes it (with progress) and writes a float32 cache in the user's cache
directory, keyed by the file's size, mtime and a hash of its header; later loads map that cache (a
second or less) and never parse the GGUF file again.
"""

import hashlib
import json
import math
import mmap
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import blas_threads
from .gguf_tokenizer import GGUFTokenizer, build_tokenizer
from .model import checked_ids

CACHE_SCHEMA = "token-playground/gguf-cache/2"
HEADER_BYTES = 4 << 20  # the metadata (tokenizer included) sits in the first few MB
SUPPORTED_ARCHITECTURES = ("llama", "qwen2")
NEOX_ROPE = ("qwen2",)


@dataclass(frozen=True)
class LlamaConfig:
    architecture: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab_size: int
    context_length: int  # the positions the model was trained for
    rope_base: float
    rms_eps: float
    tied_output: bool  # no output.weight: the token embeddings project to the scores
    qkv_bias: bool  # qwen2
    rope_neox: bool  # rotate (i, i + dh/2) instead of adjacent pairs (qwen2; llama.cpp's NEOX rope type)


# --- the forward pass: small pure functions ---------------------------------------------------------


def rms_norm(x, w, eps):  # [..., d] -> [..., d]
    mean_square = (x * x).sum(axis=-1, keepdims=True) * (1.0 / x.shape[-1])  # .mean() costs more per call
    return x * (1.0 / np.sqrt(mean_square + eps)) * w


def silu(x):  # [...] -> [...]
    return x / (1.0 + np.exp(-x))


def rope_tables(config: LlamaConfig, positions: int):  # -> cos, sin [positions, head_dim/2]
    inv_freq = config.rope_base ** (-np.arange(0, config.head_dim, 2, dtype=np.float64) / config.head_dim)
    angles = np.outer(np.arange(positions, dtype=np.float64), inv_freq)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rope(x, cos, sin, neox=False):  # x [T, H, dh], cos/sin [T, dh/2] -> [T, H, dh]
    """Rotary embeddings. llama.cpp's 'normal' layout rotates pairs (2i, 2i+1), which is why its converter
    permutes llama's q/k rows; 'neox' (qwen2) rotates (i, i + dh/2) on weights stored as trained."""
    half = x.shape[-1] // 2
    first, second = (x[..., 0::2], x[..., 1::2]) if not neox else (x[..., :half], x[..., half:])
    cos, sin = cos[:, None, :], sin[:, None, :]
    out = np.empty_like(x)
    if neox:
        out[..., :half], out[..., half:] = first * cos - second * sin, first * sin + second * cos
    else:
        out[..., 0::2], out[..., 1::2] = first * cos - second * sin, first * sin + second * cos
    return out


def gqa_attention(q, k, v):  # q [T, Hq, dh], k/v [Hkv, L, dh] -> [T, Hq*dh]; q are the last T of L
    t, n_heads, dh = q.shape
    n_kv, length = k.shape[0], k.shape[1]
    group = n_heads // n_kv
    q = q.transpose(1, 0, 2).reshape(n_kv, group * t, dh)  # heads sharing a k/v head side by side
    scores = (q @ k.transpose(0, 2, 1)) * (1.0 / math.sqrt(dh))  # [Hkv, group*T, L]
    if t > 1:
        future = np.triu(np.ones((t, length), dtype=bool), k=length - t + 1)
        scores = scores.reshape(n_kv, group, t, length)
        scores[..., future] = -np.inf
        scores = scores.reshape(n_kv, group * t, length)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    scores /= scores.sum(axis=-1, keepdims=True)
    out = (scores @ v).reshape(n_kv, group, t, dh)  # [Hkv, group, T, dh]
    return out.transpose(2, 0, 1, 3).reshape(t, n_heads * dh)


class LlamaCache:
    """Keys and values of every layer for the whole context, preallocated; truncating is O(1)."""

    def __init__(self, config: LlamaConfig, positions: int):
        shape = (config.n_layers, config.n_kv_heads, positions, config.head_dim)
        self.k = _zeroed_small_pages(shape)
        self.v = _zeroed_small_pages(shape)
        self.length = 0

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} positions to {length}")
        self.length = length


def _zeroed_small_pages(shape) -> np.ndarray:
    """A float32 array of zeros in pages of its own that the kernel maps on first touch, 4 KB at a time.
    np.zeros asks for transparent huge pages on arrays this large: each (layer, head) row of the cache then
    costs a 2 MB page on the first token, 180 of them for SmolLM2's (360 MB to find and zero: 0.6-0.9 s of
    kernel time for a 38-token prompt, measured, against 0.01-0.07 s with small pages)."""
    size = math.prod(shape) * 4
    if not hasattr(mmap, "MAP_ANONYMOUS"):  # Windows: no transparent huge pages to avoid
        return np.zeros(shape, np.float32)
    buffer = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        buffer.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buffer, np.float32).reshape(shape)  # the array keeps the mapping alive


def forward(weights, config: LlamaConfig, ids, cache: LlamaCache, tables, last_only=False):  # [T] -> [T, vocab]
    """The ids continue the cached text; their keys and values are written into the cache. With
    last_only, only the last position's scores are computed ([1, vocab]): a prompt needs no others."""
    start, t = cache.length, len(ids)
    end = start + t
    cos, sin = tables[0][start:end], tables[1][start:end]
    x = weights["token_embd"][ids]  # [T, d], a fresh array: updated in place below
    dh, hq, hkv = config.head_dim, config.n_heads, config.n_kv_heads
    for layer in range(config.n_layers):
        w = weights[f"blk.{layer}"]
        h = rms_norm(x, w["attn_norm"], config.rms_eps)
        qkv = h @ w["attn_qkv"]  # q, k and v in one product: [T, (Hq + 2 Hkv) dh]
        if config.qkv_bias:
            qkv += w["attn_qkv.bias"]
        qk = rope(qkv[:, : (hq + hkv) * dh].reshape(t, hq + hkv, dh), cos, sin, config.rope_neox)  # q and k heads
        cache.k[layer, :, start:end] = qk[:, hq:].transpose(1, 0, 2)
        cache.v[layer, :, start:end] = qkv[:, (hq + hkv) * dh :].reshape(t, hkv, dh).transpose(1, 0, 2)
        attn = gqa_attention(qk[:, :hq], cache.k[layer, :, :end], cache.v[layer, :, :end])
        x += attn @ w["attn_output"]
        h = rms_norm(x, w["ffn_norm"], config.rms_eps)
        gate_up = h @ w["ffn_gate_up"]  # [T, 2 d_ff]: gate and up in one product
        x += (silu(gate_up[:, : config.d_ff]) * gate_up[:, config.d_ff :]) @ w["ffn_down"]
    cache.length = end
    h = rms_norm(x[-1:] if last_only else x, weights["output_norm"], config.rms_eps)
    return h @ weights["output"]  # [T, vocab]


class LlamaModel:
    """A GGUF model behind the same surface as the story model."""

    end_reason = "end of text"

    def __init__(self, config: LlamaConfig, weights: dict, tokenizer: GGUFTokenizer, name: str, file_sha256: str,
                 end_token_ids, context_length: int, source: str = ""):  # fmt: skip
        self.config = config
        self.weights = weights
        self.tokenizer = tokenizer
        self.name = name
        self.weights_sha256 = file_sha256  # the GGUF file's hash: what a trace records
        self.end_token_ids = frozenset(end_token_ids)
        self._context_length = context_length
        self._tables = rope_tables(config, context_length)
        self.source = source

    @property
    def context_length(self) -> int:
        return self._context_length

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def new_cache(self) -> LlamaCache:
        return LlamaCache(self.config, self._context_length)

    def decode(self, ids, cache: LlamaCache, last_only: bool = False) -> np.ndarray:
        """Incremental decode: the ids continue the cached text -> float32 scores [len(ids), vocab]
        (or [1, vocab] with last_only)."""
        ids = self._checked_ids(ids, cache.length)
        with blas_threads.for_tokens(len(ids)):  # the thread counts are chosen, and why, in blas_threads.py
            return forward(self.weights, self.config, ids, cache, self._tables, last_only)

    def logits(self, ids) -> np.ndarray:
        """The full forward: token ids [T] -> float32 scores [T, vocab] for every position."""
        return self.decode(ids, self.new_cache())

    def chat_prompt(self, user_text: str) -> str:
        return self.tokenizer.chat_prompt(user_text)

    def _checked_ids(self, ids, already: int) -> np.ndarray:
        return checked_ids(ids, already, self.vocab_size, self._context_length)


# --- reading a GGUF file -----------------------------------------------------------------------------


def _field(reader, key, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def read_gguf(path: Path, progress=None):
    """-> (config, weights {name: float32 array in our layout}, tokenizer spec, name). ValueError on files
    that are not GGUF, are cut short, or hold an architecture or quantization this engine cannot run."""
    import gguf
    from gguf.quants import dequantize

    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, IndexError, KeyError, OSError, TypeError) as error:
        raise ValueError(f"{path} is not a readable GGUF file: {error}") from None
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(f"{path}: architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED_ARCHITECTURES)})")

    def meta(key, default=None):
        return _field(reader, f"{arch}.{key}", default)

    n_heads = int(meta("attention.head_count"))
    d_model = int(meta("embedding_length"))
    tensors = {t.name: t for t in reader.tensors}
    config = LlamaConfig(
        architecture=arch,
        n_layers=int(meta("block_count")),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=int(meta("attention.head_count_kv", n_heads)),
        head_dim=int(meta("attention.key_length", d_model // n_heads)),
        d_ff=int(meta("feed_forward_length")),
        vocab_size=int(tensors["token_embd.weight"].shape[-1]),
        context_length=int(meta("context_length", 2048)),
        rope_base=float(meta("rope.freq_base", 10000.0)),
        rms_eps=float(meta("attention.layer_norm_rms_epsilon", 1e-5)),
        tied_output="output.weight" not in tensors,
        qkv_bias="blk.0.attn_q.bias" in tensors,
        rope_neox=arch in NEOX_ROPE,
    )
    weights = {}
    for index, (name, tensor) in enumerate(tensors.items()):
        try:
            array = dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
        except (NotImplementedError, ValueError) as error:
            raise ValueError(f"{path}: tensor {name} uses {tensor.tensor_type.name}, which cannot be dequantized: {error}") from None
        expected = tuple(int(n) for n in reversed(tensor.shape))
        if array.shape != expected:
            raise ValueError(f"{path}: tensor {name} has {array.size} values, not the {expected} it declares: truncated?")
        weights[name] = array
        if progress:
            progress(index + 1, len(tensors))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    if tokens is None:
        raise ValueError(f"{path} has no tokenizer in its metadata")
    bos, eos = _field(reader, "tokenizer.ggml.bos_token_id"), _field(reader, "tokenizer.ggml.eos_token_id")
    spec = {
        "model": _field(reader, "tokenizer.ggml.model"),
        "pre": _field(reader, "tokenizer.ggml.pre", "default"),
        "tokens": list(tokens),
        "merges": list(_field(reader, "tokenizer.ggml.merges", [])),
        "token_types": [int(t) for t in _field(reader, "tokenizer.ggml.token_type", [1] * len(tokens))],
        "bos_id": None if bos is None else int(bos),
        "eos_id": None if eos is None else int(eos),
        "eot_id": _field(reader, "tokenizer.ggml.eot_token_id"),
        "add_bos": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        "chat_template": _field(reader, "tokenizer.chat_template"),
    }
    spec["bos_text"] = tokens[spec["bos_id"]] if spec["bos_id"] is not None and spec["bos_id"] < len(tokens) else ""
    spec["eos_text"] = tokens[spec["eos_id"]] if spec["eos_id"] is not None and spec["eos_id"] < len(tokens) else ""
    return config, _our_layout(weights, config), spec, path.stem  # the file's name says which model and quantization


def _our_layout(raw: dict, config: LlamaConfig) -> dict:
    """GGUF arrays [out, in] -> our weights: matrices as [in, out] so a layer is x @ w; q, k, v side by side,
    and gate and up, so each is one matrix product."""
    weights = {"token_embd": raw["token_embd.weight"], "output_norm": raw["output_norm.weight"]}
    weights["output"] = raw["token_embd.weight"].T if config.tied_output else np.ascontiguousarray(raw["output.weight"].T)
    for layer in range(config.n_layers):
        p = f"blk.{layer}."

        w = {part: raw[p + part + ".weight"] for part in ("attn_norm", "ffn_norm")}
        w["attn_qkv"] = _stacked(raw, p, "attn_q", "attn_k", "attn_v")
        w["attn_output"] = _stacked(raw, p, "attn_output")
        w["ffn_gate_up"] = _stacked(raw, p, "ffn_gate", "ffn_up")
        w["ffn_down"] = _stacked(raw, p, "ffn_down")
        if config.qkv_bias:
            w["attn_qkv.bias"] = np.concatenate([raw[p + part + ".bias"] for part in ("attn_q", "attn_k", "attn_v")])
        weights[f"blk.{layer}"] = w
    return weights


def _stacked(raw: dict, prefix: str, *parts):  # GGUF [out, in] matrices side by side as one [in, sum of outs]
    return np.ascontiguousarray(np.concatenate([raw[prefix + part + ".weight"] for part in parts]).T)


# --- the float32 cache -------------------------------------------------------------------------------


def cache_root() -> Path:
    import platformdirs

    return Path(os.environ.get("TOKEN_PLAYGROUND_CACHE") or platformdirs.user_cache_dir("token-playground")) / "gguf"


def cache_key(path: Path) -> str:
    stat = path.stat()
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(HEADER_BYTES))
    return f"{stat.st_size}-{stat.st_mtime_ns}-{digest.hexdigest()[:16]}"


def _flatten(weights: dict, prefix=""):
    for name, value in weights.items():
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{name}/")
        else:
            yield prefix + name, value


def _write_cache(directory: Path, config, weights, spec, tokenizer, name, file_sha256, source="") -> None:
    """Write into a temporary directory, then rename it into place: a reader sees all of it or none."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=directory.name + ".tmp"))
    try:
        index, offset = [], 0
        arrays = [(key, np.ascontiguousarray(array)) for key, array in _flatten(weights)
                  if not (key == "output" and config.tied_output)]  # a tied output is the embeddings again
        total = sum(a.size for _, a in arrays)
        flat = np.lib.format.open_memmap(tmp / "weights.npy", mode="w+", dtype=np.float32, shape=(total,))
        for key, array in arrays:
            flat[offset : offset + array.size] = array.ravel()
            index.append({"name": key, "offset": offset, "shape": list(array.shape)})
            offset += array.size
        flat.flush()
        del flat
        tokenizer.save(str(tmp / "tokenizer.json"))
        spec_small = {k: v for k, v in spec.items() if k not in ("tokens", "merges", "token_types")}
        spec_small["special_tokens"] = {str(i): spec["tokens"][i] for i, t in enumerate(spec["token_types"]) if t != 1}
        spec_small["token_types"] = list(spec["token_types"])
        meta = {"schema": CACHE_SCHEMA, "config": asdict(config), "index": index, "tokenizer": spec_small,
                "name": name, "file_sha256": file_sha256, "source": source}  # fmt: skip
        (tmp / "meta.json").write_text(json.dumps(meta))
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _read_cache(directory: Path):
    from tokenizers import Tokenizer

    meta = json.loads((directory / "meta.json").read_text())
    if meta.get("schema") != CACHE_SCHEMA:
        raise ValueError("old cache schema")
    config = LlamaConfig(**meta["config"])
    flat = np.load(directory / "weights.npy", mmap_mode="r")
    weights: dict = {}
    for entry in meta["index"]:
        array = flat[entry["offset"] : entry["offset"] + math.prod(entry["shape"])].reshape(entry["shape"])
        parts = entry["name"].split("/")
        target = weights
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = array
    # Copy out of the mapped file: numpy's own large allocations get transparent huge pages, and a
    # token's pass streams every weight, so fewer TLB misses make decoding measurably faster.
    weights = _copied(weights)
    weights["output"] = weights["token_embd"].T if config.tied_output else weights["output"]
    spec = meta["tokenizer"]
    spec["tokens"] = [None] * config.vocab_size  # only the count and the special ones are needed now
    for index, token in spec.pop("special_tokens").items():
        spec["tokens"][int(index)] = token
    tokenizer = GGUFTokenizer(Tokenizer.from_file(str(directory / "tokenizer.json")), spec)
    return config, weights, tokenizer, spec, meta["name"], meta["file_sha256"]


def _copied(weights: dict) -> dict:
    return {k: (_copied(v) if isinstance(v, dict) else np.array(v)) for k, v in weights.items()}


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def end_tokens(spec: dict) -> set[int]:
    """End-of-text and end-of-turn tokens: the file's eos/eot ids and the usual control tokens by name."""
    ids = {spec.get("eos_id"), spec.get("eot_id")}
    names = {"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "</s>"}
    ids |= {i for i, token in enumerate(spec["tokens"]) if token in names and spec["token_types"][i] == 3}
    return {int(i) for i in ids if i is not None}


def load_gguf(path, context_length: int | None = None, progress=None) -> LlamaModel:
    """Load a GGUF file; progress(done, total) is called while the first load dequantizes."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no GGUF file at {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    directory = cache_root() / cache_key(path)
    try:
        config, weights, tokenizer, spec, name, sha = _read_cache(directory)
    except (OSError, ValueError, KeyError, TypeError):
        config, weights, spec, name = read_gguf(path, progress)
        hf = build_tokenizer(spec)
        sha = _file_sha256(path)
        _write_cache(directory, config, weights, spec, hf, name, sha, source=str(path.resolve()))
        _prune_other_caches(directory, str(path.resolve()))
        tokenizer = GGUFTokenizer(hf, spec)
    positions = min(context_length or config.context_length, config.context_length)
    return LlamaModel(config, weights, tokenizer, name, sha, end_tokens(spec), positions, source=str(path))


def _prune_other_caches(keep: Path, source: str) -> None:
    """Remove this file's older caches (it changed since) and half-written temporary directories."""
    for entry in keep.parent.iterdir():
        if entry == keep:
            continue
        if ".tmp" in entry.name:
            shutil.rmtree(entry, ignore_errors=True)
            continue
        try:
            if json.loads((entry / "meta.json").read_text()).get("source") == source:
                shutil.rmtree(entry, ignore_errors=True)
        except (OSError, ValueError):
            continue
