"""Inside a model llama.cpp runs: its residual stream and attention, read through llama.cpp's graph callback.

inspect(model, ids) reads the ids once (chunks of MAX_UBATCH) in an inspection context of their own (made for
this call and freed after: the sessions' contexts never carry the callback, so generation costs what it did),
flash attention off so that each layer's attention weights exist as a tensor (`kq_soft_max-N`; flash
attention fuses them away).
ggml hands every node of the graph to the callback, first to ask (do you want this one?) and then, for the
ones we want, with its data computed and before any consumer reads it:
- the layers' input: `inp_scaled` where the architecture scales its embedding (Gemma: times sqrt(d)), else
  `embd` / `inp_embd`: row 0 is the stream as the first layer reads it;
- `l_out-N`: the stream after layer N (every position; the last layer only the outputs', which are the
  positions asked for: llama.cpp cuts its rows to the outputs before the last feed-forward);
- `kq_soft_max-N`: [heads, tokens, cells] attention weights; the last position's row is kept, and a head's
  whole slab is scaled there for head_scales (a head's output is its weights times V: scaling the weights
  scales the output, as the numpy engine does; the CPU backend lets a node be changed before it is read).
The forward's own scores are llama.cpp's logits for the last position.

OutputHead is the lens's head: the model's final norm and output matrix read from the GGUF file (dequantized
with the `gguf` package, float32): RMS norm (or LayerNorm where the file has output_norm.bias) with the eps
from the metadata, the output matrix or the tied embedding, an output bias where there is one, and the final
logit soft-capping where the architecture has it (Gemma 2). Gemma's (1 + w) norm convention needs nothing:
llama.cpp's converter stores 1 + w in the file.
"""

import ctypes
import os
import threading
from pathlib import Path

import numpy as np

from engine.backends.llamacpp import library
from engine.core.inside import Inside

MAX_UBATCH = 512  # positions per graph: attention weights are [heads, ubatch, cells] per layer
_EMBEDDING_NAMES = ("inp_scaled", "embd", "inp_embd")  # the first one present is the layers' input
_lock = threading.Lock()
_lib: dict = {}


class _TensorHead(ctypes.Structure):  # the first fields of struct ggml_tensor (ggml.h)
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4)]  # fmt: skip


def ggml(llama_cpp):
    """libggml-base.so, shipped inside llama-cpp-python, with the functions read here typed."""
    with _lock:
        if "lib" not in _lib:
            directory = Path(llama_cpp.__file__).parent / "lib"
            names = [n for n in os.listdir(directory) if n.startswith(("libggml-base", "ggml-base"))]
            lib = ctypes.CDLL(str(directory / sorted(names, key=len)[0]))
            lib.ggml_get_name.restype = ctypes.c_char_p
            lib.ggml_get_name.argtypes = [ctypes.c_void_p]
            lib.ggml_is_contiguous.restype = ctypes.c_bool
            lib.ggml_is_contiguous.argtypes = [ctypes.c_void_p]
            lib.ggml_nbytes.restype = ctypes.c_size_t
            lib.ggml_nbytes.argtypes = [ctypes.c_void_p]
            for name in ("ggml_backend_tensor_get", "ggml_backend_tensor_set"):
                getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
                getattr(lib, name).restype = None
            _lib["lib"] = lib
        return _lib["lib"]


def _float_tensor(lib, tensor, name: str) -> _TensorHead:
    """The tensor's type and shape, checked: contiguous float32 whose shape accounts for its bytes (else the
    struct is not laid out as _TensorHead reads it, and a read by that shape could overrun: refused)."""
    head = _TensorHead.from_address(tensor)
    if head.type != 0 or not lib.ggml_is_contiguous(tensor) or 4 * int(np.prod(head.ne[:4])) != lib.ggml_nbytes(tensor):
        raise ValueError(f"llama.cpp's {name} is not a contiguous float32 tensor as this engine reads it")
    return head


class _Taps:
    """The callback's state: what it asks for, and what it got."""

    def __init__(self, lib, shape: tuple[int, int], length: int, head_scales, kept: int, on_layer=None):
        layers, self.heads = shape
        self.lib, self.length, self.head_scales, self.kept, self.on_layer = lib, length, head_scales, kept, on_layer
        self.last_chunk = False  # set before the last chunk's decode: a layer's rows are then complete
        self.embedding: dict[str, list] = {}
        self.residuals: list[list] = [[] for _ in range(layers)]
        self.attention: list = [None] * layers
        self.error: BaseException | None = None

    def __call__(self, tensor, ask: bool, _user_data) -> bool:
        try:
            name = self.lib.ggml_get_name(tensor).decode("utf-8", "replace")
            kind, _, layer = name.partition("-")
            if ask:
                return name in _EMBEDDING_NAMES or (kind in ("l_out", "kq_soft_max") and layer.isdigit())
            head = _float_tensor(self.lib, tensor, name)
            if name in _EMBEDDING_NAMES:
                self.embedding.setdefault(name, []).append(self._read(tensor, head, 2))
            elif kind == "l_out":
                self.residuals[int(layer)].append(self._read(tensor, head, 2))
                if self.last_chunk and self.on_layer is not None:  # handed over while the next layers run
                    rows = kept_rows(self.residuals[int(layer)], self.length, self.kept)
                    if rows is not None:
                        self.on_layer(int(layer) + 1, rows)
            else:
                self._attention(tensor, head, int(layer))
            return True
        except BaseException as error:  # noqa: BLE001 - nothing may raise into C: kept, decode stopped
            self.error = error
            return False

    def _read(self, tensor, head, dims: int) -> np.ndarray:  # the tensor as a numpy array, ggml's axes reversed
        shape = tuple(int(n) for n in reversed(head.ne[:dims]))
        out = np.empty(shape, dtype=np.float32)
        self.lib.ggml_backend_tensor_get(tensor, out.ctypes.data, 0, out.nbytes)
        return out

    def _attention(self, tensor, head, layer: int) -> None:
        """[1, heads, tokens, cells]: the last token's row of each head kept (the last ubatch's is the text's
        last position; cells are positions, in order, in a fresh context), then each head scaled."""
        cells, tokens, heads = (int(n) for n in head.ne[:3])
        if heads != self.heads:  # heads_shape is (layers, layer 0's count): a table of other rows cannot hold it
            raise ValueError(f"layer {layer + 1} has {heads} attention heads, not {self.heads} as the first: "
                             "the Inside views show models with the same count in every layer")  # fmt: skip
        if self.head_scales is not None and (self.head_scales[layer] != 1).any():
            weights = self._read(tensor, head, 3)  # [heads, tokens, cells]
            self.attention[layer] = weights[:, -1, : self.length].copy()
            weights *= self.head_scales[layer][:, None, None]
            self.lib.ggml_backend_tensor_set(tensor, weights.ctypes.data, 0, weights.nbytes)
            return
        rows = np.empty((heads, cells), dtype=np.float32)  # the last token's row of each head: not [heads, T, T]
        for h in range(heads):
            offset = h * head.nb[2] + (tokens - 1) * head.nb[1]
            self.lib.ggml_backend_tensor_get(tensor, rows[h].ctypes.data, offset, rows[h].nbytes)
        self.attention[layer] = rows[:, : self.length]


def set_control_vector(model, ctx, additions) -> None:
    """additions [layers, d] (row L added to layer L's output; row 0 must be zero) as the context's control
    vector, or None for none."""
    llama = model.llama
    apply = getattr(llama, "llama_set_adapter_cvec", None) or llama.llama_apply_adapter_cvec  # renamed in 0.3.3x
    library.errors.clear()
    if additions is None:
        status = apply(ctx, None, 0, model.residual_shape[1], -1, -1)
    else:
        rows = np.ascontiguousarray(additions[1:], dtype=np.float32)  # layers 1.. (layer 0: never steered)
        pointer = rows.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        status = apply(ctx, pointer, rows.size, rows.shape[1], 1, len(additions) - 1)
    if status != 0:
        raise ValueError(f"llama.cpp could not set the steering vector (status {status}){library.error_suffix()}")


class HeadScaler:
    """A session context's callback while Session.steer_heads is in force: asks only for the attention weights
    of the layers with a scaled head, and scales them before kqv reads them (every other node runs unasked)."""

    def __init__(self, lib, table: np.ndarray):
        self.lib, self.table = lib, np.asarray(table, dtype=np.float32)
        self.layers = {f"kq_soft_max-{n}": n for n in range(len(table)) if (self.table[n] != 1).any()}
        self.error: BaseException | None = None

    def __call__(self, tensor, ask: bool, _user_data) -> bool:
        try:
            layer = self.layers.get(self.lib.ggml_get_name(tensor).decode("utf-8", "replace"))
            if ask or layer is None:
                return layer is not None
            head = _float_tensor(self.lib, tensor, "the attention weights")
            shape = tuple(int(n) for n in reversed(head.ne[:3]))
            weights = np.empty(shape, dtype=np.float32)
            self.lib.ggml_backend_tensor_get(tensor, weights.ctypes.data, 0, weights.nbytes)
            weights *= self.table[layer][:, None, None]
            self.lib.ggml_backend_tensor_set(tensor, weights.ctypes.data, 0, weights.nbytes)
            return True
        except BaseException as error:  # noqa: BLE001 - nothing may raise into C: kept, decode stopped
            self.error = error
            return False


def inspect(
    model, ids: np.ndarray, head_scales=None, kept: int | None = None, on_layer=None, residual_add=None
) -> Inside:
    """The ids (checked) decoded in a context of their own with the callback on -> Inside at the last `kept`
    positions (None: all). Only those positions are outputs: llama.cpp runs the last layer's feed-forward and
    the output head for them alone (Gemma 3's head over 200 positions took 1.4 s of a 2.5 s decode). Chunks
    of MAX_UBATCH positions (llama.cpp's logits buffer holds one chunk's outputs: 8,192 positions of Gemma 3
    at once would be 8.6 GB). on_layer(row, stream [kept, d]) gets each layer's rows as the last chunk computes
    them (the embedding's row comes with the result: Gemma names two, the second one the layers read)."""
    llama, lib = model.llama, ggml(model.llama)
    length = len(ids)
    kept = length if kept is None else kept
    chunk = min(length, MAX_UBATCH)
    taps = _Taps(lib, model.heads_shape, length, head_scales, kept, on_layer)
    callback = llama.ggml_backend_sched_eval_callback(taps)  # referenced until the context is freed
    params = llama.llama_context_default_params()
    params.n_ctx = length
    params.n_batch = params.n_ubatch = chunk
    params.n_seq_max = 1
    params.n_threads = params.n_threads_batch = model.threads
    params.flash_attn_type = llama.LLAMA_FLASH_ATTN_TYPE_DISABLED  # the attention weights as a tensor
    params.swa_full = True  # sliding-window layers keep every position in order too (cells = positions)
    params.no_perf = True
    params.cb_eval = callback
    ctx = llama.llama_init_from_model(model.handle, params)
    if not ctx:
        raise ValueError(f"llama.cpp could not create an inspection context of {length} positions")
    batch = llama.llama_batch_init(chunk, 0, 1)
    try:
        model.abort_on_stop(ctx)
        if residual_add is not None:  # a steering direction in force: l_out-N is the stream with it added
            set_control_vector(model, ctx, residual_add)
        for start in range(0, length, chunk):
            taps.last_chunk = start + chunk >= length
            _decode(model, ctx, batch, ids[start : start + chunk], start, length - kept, taps)
        scores = np.ctypeslib.as_array(llama.llama_get_logits_ith(ctx, -1), shape=(model.vocab_size,)).copy()
    finally:
        llama.llama_batch_free(batch)
        llama.llama_free(ctx)
    return _assembled(taps, model.name, scores, kept)


def _decode(model, ctx, batch, ids, start: int, first_output: int, taps: _Taps) -> None:
    llama = model.llama
    for i, token in enumerate(ids):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = int(token), start + i, 1
        batch.logits[i] = start + i >= first_output
        batch.seq_id[i][0] = 0
    batch.n_tokens = len(ids)
    status = llama.llama_decode(ctx, batch)
    if taps.error is not None:
        raise taps.error
    if status != 0:
        if model.work_stopped:
            raise ValueError(f"{model.name} was told to stop its work (stop_work): decoding stopped")
        raise ValueError(f"llama.cpp could not decode {len(ids)} tokens at {start} for inspection (status {status})")


def _assembled(taps: _Taps, name: str, scores: np.ndarray, kept: int) -> Inside:
    embedding = next((taps.embedding[n] for n in _EMBEDDING_NAMES if n in taps.embedding), None)
    unreadable = ValueError(f"llama.cpp's graph for {name} does not name its layers as the lens reads them "
                            "(inp_embd, l_out-N, kq_soft_max-N): its layers cannot be shown")  # fmt: skip
    if embedding is None or any(not rows for rows in taps.residuals) or any(a is None for a in taps.attention):
        raise unreadable
    rows = [kept_rows(r, taps.length, kept) for r in [embedding, *taps.residuals]]
    if any(r is None for r in rows):
        raise unreadable
    return Inside(np.stack(rows), np.stack(taps.attention), scores)


def kept_rows(chunks: list, length: int, kept: int) -> np.ndarray | None:
    """A layer's rows (a [n, d] array per chunk) at the last `kept` positions: the layer has a row per position,
    or (the last layer, cut to the outputs before its feed-forward) a row per output; None for any other count."""
    rows = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    return rows[len(rows) - kept :] if len(rows) in (length, kept) else None


class _TypeTraits(ctypes.Structure):  # struct ggml_type_traits (ggml.h)
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64), ("blck_size_interleave", ctypes.c_int64),
                ("type_size", ctypes.c_size_t), ("is_quantized", ctypes.c_bool),
                ("to_float", ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64))]  # fmt: skip


def read_tensor(lib, path: Path, header, name: str) -> np.ndarray:
    """A tensor of the GGUF file as float32 [rows, columns] (or [n]), dequantized by ggml's own code (the
    `gguf` package's reader and numpy dequantizer took 6 s on SmolLM2, 18 s on Gemma 3; this, under one)."""
    dims, kind, offset = header.tensors[name]
    lib.ggml_get_type_traits.restype = ctypes.POINTER(_TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    traits = lib.ggml_get_type_traits(kind).contents
    count = int(np.prod(dims))
    size = count // traits.blck_size * traits.type_size
    data = np.fromfile(path, dtype=np.uint8, count=size, offset=header.data_start + offset)
    if data.size != size:
        raise ValueError(f"{path}: tensor {name} is cut short")
    out = np.empty(tuple(reversed(dims)), dtype=np.float32)
    if kind == 0:  # F32: as it is
        out.reshape(-1)[:] = data.view(np.float32)
    elif traits.to_float:
        traits.to_float(data.ctypes.data, out.ctypes.data, count)
    else:
        raise ValueError(f"{path}: tensor {name}'s type ({traits.type_name}) cannot be dequantized")
    return out


class OutputHead:
    """The model's final norm and output projection, from its GGUF file, float32: unembed(x [..., d])."""

    def __init__(self, lib, path: Path):
        from engine.backends.gguf.metadata import read_header

        header = read_header(path)
        tensors, architecture = header.tensors, header.fields.get("general.architecture")

        def meta(key, default=None):
            value = header.fields.get(f"{architecture}.{key}", default)
            return None if value is None else float(value)

        def weight(name):
            return read_tensor(lib, path, header, name)

        self.norm = weight("output_norm.weight")
        self.norm_bias = weight("output_norm.bias") if "output_norm.bias" in tensors else None
        if self.norm_bias is None:
            self.eps = np.float32(meta("attention.layer_norm_rms_epsilon", 1e-5))
        else:
            self.eps = np.float32(meta("attention.layer_norm_epsilon", 1e-5))
        output = "output.weight" if "output.weight" in tensors else "token_embd.weight"  # tied: the embedding
        self.output = weight(output)  # [V, d]: read as .T by the product (a transposed copy took seconds)
        self.output_bias = weight("output.bias") if "output.bias" in tensors else None
        self.softcap = meta("final_logit_softcapping")

    def __call__(self, x: np.ndarray) -> np.ndarray:  # [..., d] -> [..., V] scores
        x = np.asarray(x, dtype=np.float32)
        if self.norm_bias is None:
            x = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.eps)
            x = x * self.norm
        else:
            x = x - x.mean(axis=-1, keepdims=True)
            x = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.eps) * self.norm + self.norm_bias
        scores = x @ self.output.T
        if self.output_bias is not None:
            scores += self.output_bias
        if self.softcap:
            scores = (np.tanh(scores / np.float32(self.softcap)) * np.float32(self.softcap)).astype(np.float32)
        return scores
