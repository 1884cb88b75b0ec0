"""The model: a Llama-family transformer (SmolLM, Llama, Mistral-style; Qwen2's q/k/v biases too) in numpy.

LlamaConfig, the forward pass as small pure functions, the KV cache (LlamaCache) and LlamaModel, the
backend. Compute is float32 end to end. Weights are kept as [in, out] so a layer is `x @ w`; q and k are
stored the way GGUF stores them (llama.cpp's converter permutes them so that rotary embeddings rotate pairs
of adjacent dimensions), and `rope` rotates exactly those pairs. Attention is grouped-query; the KV cache is
preallocated for the whole context (numpy's zero pages cost nothing until a position is used), so no token
ever copies the cache. Reading a file is reader.py's, the float32 cache cache.py's, loading load.py's.
"""

import math
import mmap
from dataclasses import dataclass

import numpy as np

from engine.backends import blas_threads
from engine.backends.gguf.tokenizer import GGUFTokenizer
from engine.backends.local_backend import ArrayCache, LocalBackend
from engine.core.checks import checked_ids
from engine.core.inside import Inside, kept_positions


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


ATTENTION_BLOCK = 128  # queries at a time: a block's scores ([Hkv, group * 128, L]) stay in the CPU's cache


def gqa_attention(q, k, v, last_weights=None):  # q [T, Hq, dh], k/v [Hkv, L, dh] -> [T, Hq*dh]; q: the last T of L
    """Causal attention in blocks of queries: each block sees the keys up to its last query only, so a long
    text (a prompt, a text to score) costs half the products, and the [T, L] scores never fill memory.
    last_weights: a list that gets the last query's weights [Hq, L] (the inside view; None costs nothing)."""
    t, length = q.shape[0], k.shape[1]
    if t <= ATTENTION_BLOCK:
        return _attention_block(q, k, v, last_weights)
    out = np.empty((t, q.shape[1] * q.shape[2]), dtype=np.float32)
    for start in range(0, t, ATTENTION_BLOCK):
        stop = min(t, start + ATTENTION_BLOCK)
        visible = length - t + stop  # the block's queries are the last (stop - start) of these keys
        out[start:stop] = _attention_block(q[start:stop], k[:, :visible], v[:, :visible],
                                           last_weights if stop == t else None)  # fmt: skip
    return out


def _attention_block(q, k, v, last_weights=None):  # q [T, Hq, dh], k/v [Hkv, L, dh] -> [T, Hq*dh]; q: the last T of L
    t, n_heads, dh = q.shape
    n_kv, length = k.shape[0], k.shape[1]
    group = n_heads // n_kv
    q = q.transpose(1, 0, 2).reshape(n_kv, group * t, dh)  # heads sharing a k/v head side by side
    scores = q @ k.transpose(0, 2, 1)  # [Hkv, group*T, L], updated in place from here on
    scores *= 1.0 / math.sqrt(dh)
    if t > 1:  # + 0 where a query may look, + -inf at the keys after it
        future = np.triu(np.full((t, length), -np.inf, dtype=np.float32), k=length - t + 1)  # [T, L]
        scores.reshape(n_kv, group, t, length)[...] += future
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    if last_weights is not None:
        last_weights.append(scores.reshape(n_kv, group, t, length)[:, :, -1].reshape(n_heads, length).copy())
    out = (scores @ v).reshape(n_kv, group, t, dh)  # [Hkv, group, T, dh]
    return out.transpose(2, 0, 1, 3).reshape(t, n_heads * dh)


class LlamaCache(ArrayCache):
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


def forward(weights, config: LlamaConfig, ids, cache: LlamaCache, tables, last_only=False, taps=None,
            head_scales=None, residual_add=None):  # [T] -> [T, vocab]  # fmt: skip
    """The ids continue the cached text; their keys and values are written into the cache. With
    last_only, only the last position's scores are computed ([1, vocab]): a prompt needs no others.
    taps: a dict that gets the residual stream before every layer and after the last ("residuals": [T, d]
    each) and the last position's attention weights in every layer ("attention": [Hq, L] each).
    head_scales: [layers, Hq] float32, each head's output scaled (0: ablated) before the output projection.
    residual_add: [layers, d] float32, row L added to the residual stream after layer L (Session.steer_vector)."""
    start, t = cache.length, len(ids)
    end = start + t
    cos, sin = tables[0][start:end], tables[1][start:end]
    x = weights["token_embd"][ids]  # [T, d], a fresh array: updated in place below
    dh, hq, hkv = config.head_dim, config.n_heads, config.n_kv_heads
    for layer in range(config.n_layers):
        if taps is not None:
            taps.setdefault("residuals", []).append(x.copy())
        w = weights[f"blk.{layer}"]
        h = rms_norm(x, w["attn_norm"], config.rms_eps)
        qkv = h @ w["attn_qkv"]  # q, k and v in one product: [T, (Hq + 2 Hkv) dh]
        if config.qkv_bias:
            qkv += w["attn_qkv.bias"]
        qk = rope(qkv[:, : (hq + hkv) * dh].reshape(t, hq + hkv, dh), cos, sin, config.rope_neox)  # q and k heads
        cache.k[layer, :, start:end] = qk[:, hq:].transpose(1, 0, 2)
        cache.v[layer, :, start:end] = qkv[:, (hq + hkv) * dh :].reshape(t, hkv, dh).transpose(1, 0, 2)
        attn = gqa_attention(qk[:, :hq], cache.k[layer, :, :end], cache.v[layer, :, :end],
                             None if taps is None else taps.setdefault("attention", []))  # fmt: skip
        if head_scales is not None:
            attn = (attn.reshape(t, hq, dh) * head_scales[layer][None, :, None]).reshape(t, hq * dh)
        x += attn @ w["attn_output"]
        h = rms_norm(x, w["ffn_norm"], config.rms_eps)
        gate_up = h @ w["ffn_gate_up"]  # [T, 2 d_ff]: gate and up in one product
        x += (silu(gate_up[:, : config.d_ff]) * gate_up[:, config.d_ff :]) @ w["ffn_down"]
        if residual_add is not None:
            x += residual_add[layer]
    cache.length = end
    if taps is not None:
        taps["residuals"].append(x.copy())
    return unembed(weights, config, x[-1:] if last_only else x)


def unembed(weights, config: LlamaConfig, x):  # [..., d] residual stream -> [..., vocab] scores
    """The final norm and the output projection: the scores, or a logit lens's at an earlier layer."""
    return rms_norm(x, weights["output_norm"], config.rms_eps) @ weights["output"]


class LlamaModel(LocalBackend):
    """A GGUF model in numpy behind the backend contract."""

    has_inside = True  # per-layer states: the logit lens and attention (engine/core/inside.py)
    residual_steering = True

    @property
    def heads_shape(self) -> tuple[int, int]:  # (layers, heads): what head_scales index
        return self.config.n_layers, self.config.n_heads

    @property
    def residual_shape(self) -> tuple[int, int]:  # (layers, d): what residual_add indexes
        return self.config.n_layers, self.config.d_model

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

    def forward_cached(self, ids, cache: LlamaCache, last_only: bool = False, head_scales=None,
                       residual_add=None) -> np.ndarray:  # fmt: skip
        """The forward pass over ids that continue the cached text -> float32 scores [len(ids), vocab]
        (or [1, vocab] with last_only). head_scales: [layers, heads], each head's output scaled; residual_add:
        [layers, d], added to the stream after each layer."""
        ids = self._checked_ids(ids, cache.length)
        with blas_threads.for_tokens(len(ids)):  # the thread counts are chosen, and why, in blas_threads.py
            return forward(self.weights, self.config, ids, cache, self._tables, last_only, None, head_scales,
                           residual_add)  # fmt: skip

    def scores(self, ids) -> np.ndarray:
        """The full forward: token ids [T] -> float32 scores [T, vocab] for every position."""
        return self.forward_cached(ids, self.new_cache())

    def inside(self, ids, head_scales=None, last=None, on_layer=None, residual_add=None) -> Inside:
        """The full forward over ids, keeping the residual stream at every layer (at the last `last` positions)
        and the last position's attention (engine/core/inside.py reads them); head_scales and residual_add as
        forward_cached's; on_layer is not called (the grid gets every layer after the forward)."""
        ids = self._checked_ids(ids, 0)
        kept = kept_positions(len(ids), last)
        taps = {}
        with blas_threads.for_tokens(len(ids)):
            scores = forward(self.weights, self.config, ids, self.new_cache(), self._tables, True, taps, head_scales,
                             residual_add)  # fmt: skip
        return Inside(np.stack(taps["residuals"])[:, -kept:], np.stack(taps["attention"]), scores[0])

    def unembed(self, residuals) -> np.ndarray:  # [..., d] -> [..., vocab]
        with blas_threads.for_tokens(max(1, residuals.size // self.config.d_model)):
            return unembed(self.weights, self.config, residuals)

    def has_chat_template(self) -> bool:
        return bool(self.tokenizer.chat_template)

    def chat_prompt(self, user_text: str) -> str:
        return self.tokenizer.chat_prompt(user_text)

    def _checked_ids(self, ids, already: int) -> np.ndarray:
        return checked_ids(ids, already, self.vocab_size, self._context_length)
