"""Llama-family models from GGUF files (SmolLM, Llama, Mistral-style; Qwen2's q/k/v biases too), in numpy.

The file is read and dequantized with the `gguf` package; compute is float32 end to end. Weights are kept
as [in, out] so a layer is `x @ w`; q and k are stored the way GGUF stores them (llama.cpp's converter
permutes them so that rotary embeddings rotate pairs of adjacent dimensions), and `rope` rotates exactly
those pairs. Attention is grouped-query; the KV cache is preallocated for the whole context (numpy's
zero pages cost nothing until a position is used), so no token ever copies the cache.

A file's metadata and tensor shapes are checked against each other when it is opened (gguf_checks.py).
The first load dequantizes it (with progress) and writes a float32 cache in the user's cache directory,
keyed by the file's size, mtime and a hash of its header; later loads read that cache (a second or less)
and never parse the GGUF file again. The cache is verified as it is read (sha256 of both its files and of
its meta.json, which holds the GGUF file's hash that traces record); one that does not verify is rebuilt.
"""

import hashlib
import io
import json
import math
import mmap
import os
import shutil
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from engine.backends import blas_threads
from engine.backends.gguf import checks as gguf_checks
from engine.backends.gguf.checks import NEOX_ROPE, SUPPORTED_ARCHITECTURES  # noqa: F401 - engine.loading imports them from here
from engine.backends.gguf.tokenizer import GGUFTokenizer, build_tokenizer
from engine.backends.local import LocalBackend
from engine.core.checks import checked_ids

CACHE_SCHEMA = "token-playground/gguf-cache/3"  # 3: meta.json holds digests of itself and of both files
HEADER_BYTES = 4 << 20  # the metadata (tokenizer included) sits in the first few MB


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


class LlamaModel(LocalBackend):
    """A GGUF model in numpy behind the backend contract."""

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

    def forward_cached(self, ids, cache: LlamaCache, last_only: bool = False) -> np.ndarray:
        """The forward pass over ids that continue the cached text -> float32 scores [len(ids), vocab]
        (or [1, vocab] with last_only)."""
        ids = self._checked_ids(ids, cache.length)
        with blas_threads.for_tokens(len(ids)):  # the thread counts are chosen, and why, in blas_threads.py
            return forward(self.weights, self.config, ids, cache, self._tables, last_only)

    def scores(self, ids) -> np.ndarray:
        """The full forward: token ids [T] -> float32 scores [T, vocab] for every position."""
        return self.forward_cached(ids, self.new_cache())

    def has_chat_template(self) -> bool:
        return bool(self.tokenizer.chat_template)

    def chat_prompt(self, user_text: str) -> str:
        return self.tokenizer.chat_prompt(user_text)

    def _checked_ids(self, ids, already: int) -> np.ndarray:
        return checked_ids(ids, already, self.vocab_size, self._context_length)


# --- reading a GGUF file -----------------------------------------------------------------------------


class _Metadata:
    """A GGUF file's metadata values, decoded when asked: a value the gguf package cannot decode is refused
    by its key (only the keys the engine reads are decoded at all)."""

    def __init__(self, reader):
        self._fields = reader.fields

    def get(self, key, default=None):
        field = self._fields.get(key)
        if field is None:
            return default
        try:
            return field.contents()
        except Exception as error:  # noqa: BLE001 - whatever the decoder trips on, the file is at fault
            raise ValueError(f"{key} cannot be read: {type(error).__name__}: {error}") from None


def read_gguf(path: Path, progress=None):
    """-> (config, weights {name: float32 array in our layout}, tokenizer spec, Hugging Face tokenizer, name).
    ValueError naming the file (and the key or tensor) on files that are not GGUF, are cut short, hold an
    architecture or quantization this engine cannot run, or whose metadata and tensor shapes disagree: all
    of it checked (engine/backends/gguf/checks.py) and the tokenizer built before the bulk is dequantized."""
    import gguf
    from gguf.quants import dequantize

    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as error:  # noqa: BLE001 - the gguf package raises many kinds on a damaged file
        raise ValueError(f"{path} is not a readable GGUF file: {type(error).__name__}: {error}") from None
    tensors = {t.name: t for t in reader.tensors}
    try:
        fields = _Metadata(reader)
        shapes = {name: tuple(int(n) for n in reversed(t.shape)) for name, t in tensors.items()}
        config = LlamaConfig(**gguf_checks.config_values(fields, fields.get("general.architecture"), shapes))
        gguf_checks.check_config(config)
        gguf_checks.check_tensors(config, shapes)
        spec = gguf_checks.tokenizer_spec(fields, config.vocab_size)
        tokenizer = build_tokenizer(spec)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    needed = gguf_checks.expected_tensors(config)  # anything else in the file is not read
    weights = {}
    for index, name in enumerate(needed):
        tensor = tensors[name]
        try:
            array = dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
        except (NotImplementedError, ValueError) as error:
            raise ValueError(
                f"{path}: tensor {name} uses {tensor.tensor_type.name}, which cannot be dequantized: {error}"
            ) from None
        if array.shape != shapes[name]:
            raise ValueError(
                f"{path}: tensor {name} has {array.size} values, not the {shapes[name]} it declares: truncated?"
            )
        weights[name] = array
        if progress:
            progress(index + 1, len(needed))
    return (
        config,
        _our_layout(weights, config),
        spec,
        tokenizer,
        path.stem,
    )  # the file's name says which model and quantization


def _our_layout(raw: dict, config: LlamaConfig) -> dict:
    """GGUF arrays [out, in] -> our weights: matrices as [in, out] so a layer is x @ w; q, k, v side by side,
    and gate and up, so each is one matrix product."""
    weights = {"token_embd": raw["token_embd.weight"], "output_norm": raw["output_norm.weight"]}
    weights["output"] = (
        raw["token_embd.weight"].T if config.tied_output else np.ascontiguousarray(raw["output.weight"].T)
    )
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


def _cache_index(config: LlamaConfig) -> list[dict]:
    """Where each array of our layout lies in the cache's weights.npy: a function of the config alone, so a
    cache's index is checked, not trusted. A tied output is the embeddings again and is not stored."""
    d, vocab, ff = config.d_model, config.vocab_size, config.d_ff
    qkv = (config.n_heads + 2 * config.n_kv_heads) * config.head_dim
    shapes = [("token_embd", [vocab, d]), ("output_norm", [d])] + (
        [] if config.tied_output else [("output", [d, vocab])]
    )
    for layer in range(config.n_layers):
        p = f"blk.{layer}/"
        shapes += [(p + "attn_norm", [d]), (p + "ffn_norm", [d]), (p + "attn_qkv", [d, qkv]),
                   (p + "attn_output", [config.n_heads * config.head_dim, d]), (p + "ffn_gate_up", [d, 2 * ff]),
                   (p + "ffn_down", [ff, d])] + ([(p + "attn_qkv.bias", [qkv])] if config.qkv_bias else [])  # fmt: skip
    index, offset = [], 0
    for name, shape in shapes:
        index.append({"name": name, "offset": offset, "shape": shape})
        offset += math.prod(shape)
    return index


def _meta_digest(meta: dict) -> str:
    """The digest of everything in meta.json but the digest itself, in a canonical form (the file digests,
    the config, the index and the GGUF file's hash that traces record are all covered)."""
    canonical = json.dumps({k: v for k, v in meta.items() if k != "digest"}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _npy_header(total: int) -> bytes:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (total,)})
    return header.getvalue()


def _write_weights(path: Path, weights: dict, index: list[dict]) -> str:
    """Our layout as one flat float32 .npy file, in the index's order -> the sha256 of the file's bytes."""
    arrays = dict(_flatten(weights))
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        header = _npy_header(index[-1]["offset"] + math.prod(index[-1]["shape"]))
        f.write(header)
        digest.update(header)
        for entry in index:
            array = np.ascontiguousarray(arrays[entry["name"]], dtype="<f4")
            if list(array.shape) != entry["shape"]:
                raise AssertionError(
                    f"{entry['name']} is {array.shape}, not {entry['shape']}"
                )  # a bug here, not a bad file
            f.write(array.data)
            digest.update(array.data)
    return digest.hexdigest()


def _remove(path: Path) -> None:
    """Whatever is at path: a cache directory, or a file (or link) where one should be."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _write_cache(directory: Path, config, weights, spec, tokenizer, name, file_sha256, source="") -> None:
    """Write into a temporary directory, then rename it into place: a reader sees all of it or none. meta.json
    holds the sha256 of weights.npy and tokenizer.json and a digest of itself, checked on every read."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=directory.name + ".tmp"))
    try:
        index = _cache_index(config)
        tokenizer_json = tokenizer.to_str().encode()
        (tmp / "tokenizer.json").write_bytes(tokenizer_json)
        files = {"weights.npy": _write_weights(tmp / "weights.npy", weights, index),
                 "tokenizer.json": hashlib.sha256(tokenizer_json).hexdigest()}  # fmt: skip
        spec_small = {k: v for k, v in spec.items() if k not in ("tokens", "merges", "token_types")}
        spec_small["special_tokens"] = {str(i): spec["tokens"][i] for i, t in enumerate(spec["token_types"]) if t != 1}
        spec_small["token_types"] = list(spec["token_types"])
        meta = {"schema": CACHE_SCHEMA, "config": asdict(config), "index": index, "tokenizer": spec_small,
                "name": name, "file_sha256": file_sha256, "source": source, "files": files}  # fmt: skip
        meta = json.loads(json.dumps(meta))  # the digest is of what a reader will parse back
        meta["digest"] = _meta_digest(meta)
        (tmp / "meta.json").write_text(json.dumps(meta))
        _remove(directory)
        os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class CacheRebuiltWarning(UserWarning):
    """A float32 cache failed its checks (damaged, edited, cut short) and is being rebuilt from the GGUF file."""


class _OtherSchema(Exception):
    """A cache written by another version of the engine: rebuilt without a warning (expected after an update)."""


def _cached(directory: Path, notice=None):
    """The cache's contents when it verifies; otherwise None, after notice(why) (default: a
    CacheRebuiltWarning) if one was there. Any failure at all means the cache is rebuilt: nothing from a
    cache is used before it verifies."""
    if not os.path.lexists(directory):
        return None
    try:
        return _read_cache(directory)
    except _OtherSchema:
        return None
    except Exception as error:  # noqa: BLE001 - whatever is wrong with it, the GGUF file is the truth
        reason = f"{type(error).__name__}: {error}" if not isinstance(error, ValueError) else str(error)
        message = f"the float32 cache {directory} is damaged ({reason}); rebuilding it from the GGUF file"
        if notice is None:
            warnings.warn(message, CacheRebuiltWarning, stacklevel=4)
        else:
            notice(message)
        return None


def _read_cache(directory: Path):
    """-> (config, weights, tokenizer, spec, name, file_sha256), each part checked against meta.json's
    digests before use; ValueError (or whatever reading raised) when anything does not verify."""
    from tokenizers import Tokenizer

    meta = _verified_meta(directory / "meta.json")
    config = LlamaConfig(**meta["config"])
    gguf_checks.check_config(config)  # the digest says it is what was written; this, that it was sane
    index = _cache_index(config)
    if meta["index"] != index:
        raise ValueError("meta.json's index does not match its config")
    total = index[-1]["offset"] + math.prod(index[-1]["shape"])
    flat = _read_weights(directory / "weights.npy", total, meta["files"]["weights.npy"])
    weights: dict = {}
    for entry in index:  # views of one array: one allocation, which numpy gives transparent huge pages
        array = flat[entry["offset"] : entry["offset"] + math.prod(entry["shape"])].reshape(entry["shape"])
        *parents, leaf = entry["name"].split("/")
        target = weights
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = array
    weights["output"] = weights["token_embd"].T if config.tied_output else weights["output"]
    spec = _cached_spec(meta["tokenizer"], config.vocab_size)
    tokenizer_json = _read_verified(directory / "tokenizer.json", meta["files"]["tokenizer.json"])
    tokenizer = GGUFTokenizer(Tokenizer.from_str(tokenizer_json.decode("utf-8")), spec)
    return config, weights, tokenizer, spec, meta["name"], meta["file_sha256"]


def _verified_meta(path: Path) -> dict:
    meta = json.loads(path.read_bytes())
    if not isinstance(meta, dict):
        raise ValueError(f"meta.json holds a {type(meta).__name__}, not an object")
    schema = meta.get("schema")
    if schema != CACHE_SCHEMA:
        if isinstance(schema, str) and schema.startswith(CACHE_SCHEMA.rpartition("/")[0] + "/"):
            raise _OtherSchema(schema)
        raise ValueError(f"meta.json's schema is {schema!r}")
    if meta.get("digest") != _meta_digest(meta):
        raise ValueError("meta.json does not match its digest")
    return meta


def _read_verified(path: Path, sha256: str) -> bytes:
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"{path.name} does not match its digest")
    return data


CHUNK_BYTES = 8 << 20  # read and hash in pieces that are still in the CPU's cache when hashed


def _read_weights(path: Path, total: int, sha256: str) -> np.ndarray:
    """weights.npy -> a fresh float32 array of `total` values, its bytes hashed as they are read (once).
    Read, not mapped: numpy's own large allocation gets transparent huge pages, and a token's pass streams
    every weight, so fewer TLB misses make decoding measurably faster."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        if np.lib.format.read_magic(f) != (1, 0):
            raise ValueError("weights.npy is not the .npy version this cache writes")
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        if dtype != np.dtype("<f4") or shape != (total,) or fortran:
            raise ValueError(f"weights.npy holds {dtype} {shape}, not float32 ({total},)")
        start = f.tell()
        if os.fstat(f.fileno()).st_size != start + 4 * total:
            raise ValueError(f"weights.npy has {os.fstat(f.fileno()).st_size} bytes, not {start + 4 * total}")
        f.seek(0)
        digest.update(f.read(start))
        flat = np.empty(total, np.float32)
        view, done = memoryview(flat).cast("B"), 0
        # One thread hashes each piece (in order: a single worker) while this one reads the next; both
        # release the GIL, so on two cores the hash costs little more than the read.
        with ThreadPoolExecutor(max_workers=1) as hasher:
            while done < len(view):
                got = f.readinto(view[done : done + CHUNK_BYTES])
                if not got:
                    raise ValueError("weights.npy ended early")
                hasher.submit(digest.update, view[done : done + got])
                done += got
    if digest.hexdigest() != sha256:
        raise ValueError("weights.npy does not match its digest")
    return flat


def _cached_spec(spec: dict, vocab_size: int) -> dict:
    """meta.json's tokenizer part -> the spec GGUFTokenizer takes (tokens: only the special ones are kept)."""
    if len(spec["token_types"]) != vocab_size:
        raise ValueError(f"meta.json has {len(spec['token_types'])} token types for {vocab_size} tokens")
    gguf_checks.check_special_ids(spec, vocab_size)
    spec["tokens"] = [None] * vocab_size  # only the count and the special ones are needed now
    for index, token in spec.pop("special_tokens").items():
        spec["tokens"][int(index)] = token
    return spec


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


def load_gguf(path, context_length: int | None = None, progress=None, notice=None) -> LlamaModel:
    """Load a GGUF file; progress(done, total) is called while the first load dequantizes. The model gets
    the file's context, or context_length positions when fewer, at most gguf_checks.MAX_POSITIONS. A cache
    that does not verify is rebuilt, after notice(why) (default: a CacheRebuiltWarning)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no GGUF file at {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    gguf_checks.checked_context_request(context_length)
    directory = cache_root() / cache_key(path)
    cached = _cached(directory, notice)
    if cached is not None:
        config, weights, tokenizer, spec, name, sha = cached
    else:
        config, weights, spec, hf, name = read_gguf(path, progress)
        sha = _file_sha256(path)
        _write_cache(directory, config, weights, spec, hf, name, sha, source=str(path.resolve()))
        _prune_other_caches(directory, str(path.resolve()))
        tokenizer = GGUFTokenizer(hf, spec)
    positions = gguf_checks.positions(config.context_length, context_length)
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
