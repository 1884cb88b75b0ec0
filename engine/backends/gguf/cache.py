"""The float32 cache of a GGUF file's weights and tokenizer, in the user's cache directory.

The first load of a file writes it (weights.npy: our layout as one flat float32 array; tokenizer.json; and
meta.json), keyed by the file's size, mtime and a hash of its header (cache_key); later loads read it (a
second or less) and never parse the GGUF file again. The cache is verified as it is read (sha256 of both its
files and of its meta.json, which holds the GGUF file's hash that traces record); one that does not verify
is rebuilt, with a CacheRebuiltWarning. A file's older caches and half-written ones are pruned.
"""

import hashlib
import io
import json
import math
import os
import shutil
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np

from engine.backends.gguf import checks as gguf_checks
from engine.backends.gguf.model import LlamaConfig
from engine.backends.gguf.tokenizer import GGUFTokenizer

CACHE_SCHEMA = "token-playground/gguf-cache/3"  # 3: meta.json holds digests of itself and of both files
HEADER_BYTES = 4 << 20  # the metadata (tokenizer included) sits in the first few MB


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


def write_cache(directory: Path, config, weights, spec, tokenizer, name, file_sha256, source="") -> None:
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
        try:
            os.replace(tmp, directory)
        except OSError:  # another process put its cache of the same file there first: that one serves (verified
            if not directory.is_dir():  # on every read); this one goes
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


STALE_SECONDS = 3600  # a temporary cache directory untouched this long was left by a writer that died


class CacheRebuiltWarning(UserWarning):
    """A float32 cache failed its checks (damaged, edited, cut short) and is being rebuilt from the GGUF file."""


class _OtherSchema(Exception):
    """A cache written by another version of the engine: rebuilt without a warning (expected after an update)."""


def cached_contents(directory: Path, notice=None):
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


def prune_other_caches(keep: Path, source: str) -> None:
    """Remove this file's older caches (it changed since) and temporary directories left half written (untouched
    for STALE_SECONDS: a fresh one is another process writing its cache now, as two test workers do)."""
    for entry in keep.parent.iterdir():
        if entry == keep:
            continue
        if ".tmp" in entry.name:
            try:
                stale = time.time() - entry.stat().st_mtime > STALE_SECONDS
            except OSError:  # gone meanwhile: its writer renamed it into place
                continue
            if stale:
                shutil.rmtree(entry, ignore_errors=True)
            continue
        try:
            if json.loads((entry / "meta.json").read_text()).get("source") == source:
                shutil.rmtree(entry, ignore_errors=True)
        except (OSError, ValueError):
            continue
