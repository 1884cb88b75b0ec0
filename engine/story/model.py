"""The story model: a one-block GPT in numpy, float32 end to end.

Written as small pure functions in the style of picoGPT, each with a shape comment. `forward` is the one
forward pass: with no cache it scores every position (the full forward); with a `KVCache` it scores only
the new positions and keeps their keys and values (incremental decode). Training calls the same `forward`
with an `acts` dict to keep the activations its backward pass needs.

Parameters are a plain dict of float32 arrays named as in the checkpoint:
    wte [vocab, d]  wpe [ctx, d]  ln1.g/.b [d]  attn.w_qkv [d, 3d]  attn.b_qkv [3d]  attn.w_out [d, d]
    attn.b_out [d]  ln2.g/.b [d]  mlp.w_in [d, m]  mlp.b_in [m]  mlp.w_out [m, d]  mlp.b_out [d]
    lnf.g/.b [d]  head.w [d, vocab]  head.b [vocab]
"""

import functools
import math
from dataclasses import asdict, dataclass

import numpy as np

from engine.backends.blas_threads import blas_threads
from engine.backends.local_backend import ArrayCache, LocalBackend
from engine.core.checks import checked_ids
from engine.core.inside import Inside, kept_positions

LAYER_NORM_EPS = 1e-5
GELU_C = math.sqrt(2.0 / math.pi)  # a Python float: it keeps float32 arrays float32


@dataclass(frozen=True)
class Config:
    vocab_size: int = 96  # token scores the model produces; the tokenizer's vocabulary
    context_length: int = 64  # positions in the learned position table: the longest text the model sees
    d_model: int = 128  # width of the residual stream
    n_heads: int = 8  # attention heads; each sees d_model // n_heads dimensions
    d_mlp: int = 512  # hidden width of the MLP

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"config {name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        d, m, v = self.d_model, self.d_mlp, self.vocab_size
        return {
            "wte": (v, d), "wpe": (self.context_length, d),
            "ln1.g": (d,), "ln1.b": (d,),
            "attn.w_qkv": (d, 3 * d), "attn.b_qkv": (3 * d,), "attn.w_out": (d, d), "attn.b_out": (d,),
            "ln2.g": (d,), "ln2.b": (d,),
            "mlp.w_in": (d, m), "mlp.b_in": (m,), "mlp.w_out": (m, d), "mlp.b_out": (d,),
            "lnf.g": (d,), "lnf.b": (d,),
            "head.w": (d, v), "head.b": (v,),
        }  # fmt: skip


def init_params(config: Config, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """GPT-2 style initialisation: normal(0, 0.02) matrices, zero biases, unit LayerNorm gains."""
    params = {}
    for name, shape in config.param_shapes().items():
        if name.endswith(".g"):
            params[name] = np.ones(shape, np.float32)
        elif len(shape) == 1:
            params[name] = np.zeros(shape, np.float32)
        else:
            params[name] = (rng.standard_normal(shape) * 0.02).astype(np.float32)
    return params


# A decode step's rows are short (d 128), so numpy's cost per call is most of each operation's: the sums and
# maxima without ndarray's Python wrappers, and constants as 0-d float32 arrays (the same float32 arithmetic:
# numpy rounds a Python float to the array's float32 either way; a Python float costs ~0.4 us more a call).
_sum = np.add.reduce
_max = np.maximum.reduce


@functools.cache
def _f32(value: float) -> np.ndarray:  # a 0-d float32 array (never written to)
    return np.array(value, dtype=np.float32)


_EPS, _GELU_CUBE, _GELU_C, _ONE, _HALF = (_f32(v) for v in (LAYER_NORM_EPS, GELU_C * 0.044715, GELU_C, 1.0, 0.5))
_EPS_SCALAR = np.float32(LAYER_NORM_EPS)  # as a float32 scalar (_layer_norm_one)


@functools.cache
def _inverse(d: int) -> np.float32:  # 1 / d as a float32 scalar (the value _f32(1.0 / d) holds)
    return np.float32(1.0 / d)


def layer_norm(x, g, b):  # [..., d] -> [..., d]
    if x.ndim == 2 and len(x) == 1:
        return _layer_norm_one(x, g, b)
    inv_d = _f32(1.0 / x.shape[-1])  # sums times 1/d: ndarray.mean costs 4x more per call on one row
    centered = x - _sum(x, axis=-1, keepdims=True) * inv_d
    var = _sum(centered * centered, axis=-1, keepdims=True) * inv_d
    return centered / np.sqrt(var + _EPS) * g + b


def _layer_norm_one(x, g, b):  # [1, d] -> [1, d]: layer_norm of one position (a decode step), the same bits
    """The mean and variance as float32 scalars: numpy's arithmetic on two scalars costs a tenth of a ufunc call,
    and a row minus (or over) a scalar less than over a [1, 1] array (20 -> 15 us a call here)."""
    inv_d = _inverse(x.shape[-1])
    centered = x - _sum(x[0]) * inv_d
    var = _sum((centered * centered)[0]) * inv_d
    return centered / np.sqrt(var + _EPS_SCALAR) * g + b


def gelu(x):  # [...] -> [...], the tanh approximation GPT-2 uses: 0.5 x (1 + tanh(c (x + 0.044715 x^3)))
    y = x * x  # computed in place: this is the costliest elementwise step of training
    y *= _GELU_CUBE
    y += _GELU_C
    y *= x
    np.tanh(y, out=y)
    y += _ONE
    y *= x
    y *= _HALF
    return y


def linear(x, w, b):  # [..., i] @ [i, o] + [o] -> [..., o], as one matrix product over all rows
    if x.ndim == 2:
        return x @ w + b
    return (x.reshape(-1, x.shape[-1]) @ w).reshape(*x.shape[:-1], w.shape[-1]) + b


def softmax(x, axis=-1):  # [..., n] -> [..., n]
    e = np.exp(x - _max(x, axis=axis, keepdims=True))
    return e / _sum(e, axis=axis, keepdims=True)


def split_heads(x, n_heads):  # [..., T, d] -> [..., H, T, d/H]
    *lead, t, d = x.shape
    return x.reshape(*lead, t, n_heads, d // n_heads).swapaxes(-2, -3)


def split_qkv(qkv, n_heads):  # [..., T, 3d] -> q, k, v, each [..., H, T, d/H]: split_heads of each third, views
    if qkv.shape[:-1] == (1,):  # one position (a decode step): the thirds' heads in order already, at 1/4 the cost
        parts = qkv.reshape(3, n_heads, 1, -1)
        return parts[0], parts[1], parts[2]
    parts = qkv.reshape(qkv.shape[:-1] + (3, n_heads, -1))  # [..., T, 3, H, dh]
    return (parts[..., 0, :, :].swapaxes(-2, -3), parts[..., 1, :, :].swapaxes(-2, -3),
            parts[..., 2, :, :].swapaxes(-2, -3))  # fmt: skip


def merge_heads(x):  # [..., H, T, dh] -> [..., T, H*dh]
    if x.ndim == 3 and x.shape[1] == 1:  # one position: the heads in order already
        return x.reshape(1, -1)
    *lead, h, t, dh = x.shape
    return x.swapaxes(-2, -3).reshape(*lead, t, h * dh)


def causal_attention_weights(q, k):  # [..., H, Tq, dh], [..., H, Tk, dh] -> [..., H, Tq, Tk]
    """Softmax attention of the queries, which are the last Tq of the Tk positions, over earlier keys."""
    t_q, t_k = q.shape[-2], k.shape[-2]
    scores = (q @ k.swapaxes(-1, -2)) * _f32(1.0 / math.sqrt(q.shape[-1]))
    if t_q > 1:  # a single new query is the last position and may see every key
        future = np.triu(np.ones((t_q, t_k), dtype=bool), k=t_k - t_q + 1)  # key after the query
        scores[..., future] = -np.inf
    return softmax(scores)


class KVCache(ArrayCache):
    """Keys and values of every position seen so far, preallocated for the whole context.

    Appending writes rows in place (no per-token copies); truncating to n positions is O(1)."""

    def __init__(self, config: Config):
        shape = (config.n_heads, config.context_length, config.d_head)
        self.k = np.zeros(shape, np.float32)
        self.v = np.zeros(shape, np.float32)
        self.length = 0

    def append(self, k, v):  # [H, T, dh] each -> views [H, length, dh] of every position so far
        start, end = self.length, self.length + k.shape[-2]
        if end > self.k.shape[-2]:
            raise ValueError(f"cannot cache position {end - 1}: the model has only {self.k.shape[-2]} positions")
        self.k[:, start:end] = k
        self.v[:, start:end] = v
        self.length = end
        return self.k[:, :end], self.v[:, :end]

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} positions to {length}")
        self.length = length


def one_blas_thread() -> blas_threads:
    """The story model's products are small (d 128, at most 64 positions): a second BLAS thread only adds its
    spinning, and on a busy machine a step fell from ~1 ms to 40-60 ms with OpenBLAS's default threads (measured
    beside other work; blas_threads.py says why). Training (train.py) keeps BLAS's own choice."""
    return _ONE_BLAS_THREAD


_ONE_BLAS_THREAD = blas_threads(1)  # one for every pass: a pass's state is blas_threads' own (_Held)


def forward(params, config: Config, ids, cache: KVCache | None = None, acts: dict | None = None, head_scales=None,
            residual_add=None):  # fmt: skip
    """[..., T] token ids -> [..., T, vocab] scores.

    With a cache, `ids` continue the cached text (one sequence, no batch dimension) and their keys and
    values are appended to it. With `acts`, the activations the backward pass needs are stored there.
    head_scales: [1, H] float32, each head's output scaled (0: ablated) before the output projection.
    residual_add: [1, d] float32, added to the residual stream after the block (Session.steer_vector)."""
    start = cache.length if cache is not None else 0
    t = ids.shape[-1]
    x = params["wte"].take(ids, axis=0) + params["wpe"][start : start + t]  # [..., T, d]; take: a[ids] at 1/3 the cost
    h = layer_norm(x, params["ln1.g"], params["ln1.b"])
    qkv = linear(h, params["attn.w_qkv"], params["attn.b_qkv"])  # [..., T, 3d]
    q, k, v = split_qkv(qkv, config.n_heads)  # [..., H, T, dh]
    if cache is not None:
        k, v = cache.append(k, v)  # [H, start + T, dh]
    weights = causal_attention_weights(q, k)  # [..., H, T, start + T]
    heads = weights @ v  # [..., H, T, dh]
    if head_scales is not None:
        heads = heads * head_scales[0][:, None, None]
    attn = merge_heads(heads)  # [..., T, d]
    x2 = x + linear(attn, params["attn.w_out"], params["attn.b_out"])
    h2 = layer_norm(x2, params["ln2.g"], params["ln2.b"])
    u = linear(h2, params["mlp.w_in"], params["mlp.b_in"])  # [..., T, m]
    m = gelu(u)
    x3 = x2 + linear(m, params["mlp.w_out"], params["mlp.b_out"])
    if residual_add is not None:
        x3 = x3 + residual_add[0]
    hf = layer_norm(x3, params["lnf.g"], params["lnf.b"])
    scores = linear(hf, params["head.w"], params["head.b"])  # [..., T, vocab]
    if acts is not None:
        acts.update(x=x, h=h, q=q, k=k, v=v, weights=weights, attn=attn, x2=x2, h2=h2, u=u, m=m, x3=x3, hf=hf)
    return scores


class StoryModel(LocalBackend):
    """The shipped story model: parameters, config and tokenizer behind the backend contract."""

    has_inside = True  # per-layer states: the logit lens and attention (engine/core/inside.py)
    residual_steering = True

    @property
    def heads_shape(self) -> tuple[int, int]:  # (layers, heads): what head_scales index
        return 1, self.config.n_heads

    @property
    def residual_shape(self) -> tuple[int, int]:  # (layers, d): what residual_add indexes
        return 1, self.config.d_model

    def __init__(self, params, config: Config, tokenizer, name: str = "story model", weights_sha256: str = ""):
        self.params = params
        # the vectors (gains, biases) as [1, n] views, for a pass over one token: numpy adds and multiplies arrays
        # of one shape at half the cost of a broadcast ([1, d] by [d]), with the same float32 results
        self._row_params = {name: p[None] if p.ndim == 1 else p for name, p in params.items()}
        self.config = config
        self.tokenizer = tokenizer
        self.name = name
        self.weights_sha256 = weights_sha256
        self.end_token_ids = frozenset({tokenizer.newline_id})  # a story ends with its line
        self.end_reason = "end of story"

    @property
    def context_length(self) -> int:
        return self.config.context_length

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def scores(self, ids) -> np.ndarray:
        """The full forward: token ids [T] -> float32 scores [T, vocab] for every position."""
        with one_blas_thread():
            return forward(self.params, self.config, self._checked_ids(ids, already=0))

    def new_cache(self) -> KVCache:
        return KVCache(self.config)

    def inside(self, ids, head_scales=None, last=None, on_layer=None, residual_add=None) -> Inside:
        """The full forward over ids, keeping the residual stream (after the embedding, after the block) at the
        last `last` positions and the last position's attention (engine/core/inside.py reads them); head_scales
        and residual_add as forward_cached's; on_layer is not called."""
        ids = self._checked_ids(ids, already=0)
        kept = kept_positions(len(ids), last)
        acts = {}
        with one_blas_thread():
            scores = forward(self.params, self.config, ids, acts=acts, head_scales=head_scales,
                             residual_add=residual_add)  # fmt: skip
        return Inside(np.stack([acts["x"], acts["x3"]])[:, -kept:], acts["weights"][None, :, -1], scores[-1])

    def unembed(self, residuals) -> np.ndarray:  # [..., d] -> [..., vocab]
        p = self.params
        with one_blas_thread():
            return linear(layer_norm(residuals, p["lnf.g"], p["lnf.b"]), p["head.w"], p["head.b"])

    def forward_cached(self, ids, cache: KVCache, last_only: bool = False, head_scales=None,
                       residual_add=None) -> np.ndarray:  # fmt: skip
        """The forward pass over ids that continue the cached text -> float32 scores [len(ids), vocab]
        (last_only: the story model is small enough to score every position anyway; [1, vocab] back).
        head_scales: [layers, heads], each head's output scaled (Session.steer_heads); residual_add: [1, d]
        added to the stream after the block (Session.steer_vector)."""
        ids = self._checked_ids(ids, already=cache.length)
        params = self._row_params if len(ids) == 1 else self.params
        with one_blas_thread():
            scores = forward(params, self.config, ids, cache, head_scales=head_scales, residual_add=residual_add)
        return scores[-1:] if last_only else scores

    def _checked_ids(self, ids, already: int) -> np.ndarray:
        return checked_ids(ids, already, self.vocab_size, self.context_length)
