"""Write tiny random-weight Llama GGUF files with gguf.GGUFWriter, the way llama.cpp's converter does (q and
k rows permuted for adjacent-pair rotary embeddings), and compute their forward directly in float64 with the
Hugging Face conventions (unpermuted q/k, rotate_half). The engine's loader must agree with it."""

from pathlib import Path

import gguf
import numpy as np

N_LAYERS, D, N_HEADS, N_KV, FF, CONTEXT = 2, 32, 4, 2, 48, 128
CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def byte_tokens() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes (what byte-level BPE vocabularies hold)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    mapping = dict(zip(printable, chars))
    return [chr(mapping[b]) for b in range(256)]


MERGES = ["Ġ t", "h e", "Ġt he", "Ġ a", "i n"]


def vocabulary() -> tuple[list[str], list[int]]:
    tokens = CONTROL + byte_tokens() + [a + b for a, b in (m.split(" ") for m in MERGES)]
    types = [3] * len(CONTROL) + [1] * (len(tokens) - len(CONTROL))
    return tokens, types


def permute(w, n_head):  # llama.cpp's convert_hf_to_gguf: HF rows -> rows whose adjacent pairs rotate together
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def random_weights(seed=0, qkv_bias=False) -> dict:
    """HF-layout weights ([out, in]), float32."""
    rng = np.random.default_rng(seed)
    vocab = len(vocabulary()[0])
    dh = D // N_HEADS

    def m(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = {"embed": m(vocab, D, scale=0.5), "norm": (1 + m(D, scale=0.1)), "layers": []}
    for _ in range(N_LAYERS):
        layer = {
            "attn_norm": 1 + m(D, scale=0.1), "ffn_norm": 1 + m(D, scale=0.1),
            "q": m(N_HEADS * dh, D), "k": m(N_KV * dh, D), "v": m(N_KV * dh, D), "o": m(D, N_HEADS * dh),
            "gate": m(FF, D), "up": m(FF, D), "down": m(D, FF),
        }  # fmt: skip
        if qkv_bias:
            layer.update(q_bias=m(N_HEADS * dh), k_bias=m(N_KV * dh), v_bias=m(N_KV * dh))
        w["layers"].append(layer)
    return w


DROP = object()  # in write()'s metadata or tensors: leave that key or tensor out of the file


def typed(value):
    """A Python value -> (value, GGUF type, item type) as a writer stores it: ints as uint32 when they fit,
    else int32 / uint64 / int64; floats as float32; lists by their first item."""
    kinds = gguf.GGUFValueType
    if isinstance(value, bool):
        return value, kinds.BOOL, None
    if isinstance(value, int):
        if 0 <= value < 2**32:
            return value, kinds.UINT32, None
        return value, (kinds.INT32 if -(2**31) <= value < 0 else kinds.UINT64 if value > 0 else kinds.INT64), None
    if isinstance(value, float):
        return value, kinds.FLOAT32, None
    if isinstance(value, str):
        return value, kinds.STRING, None
    if isinstance(value, list):
        item = typed(value[0])[1] if value else kinds.UINT32
        return value, kinds.ARRAY, item
    raise TypeError(f"no GGUF type for {value!r}")


def default_metadata(arch="llama", add_bos=False) -> dict:
    """Every key write() stores (but general.architecture, which the writer adds) -> its (value, type, item type)."""
    kinds = gguf.GGUFValueType
    tokens, types = vocabulary()
    metadata = {
        "general.name": ("tiny test model", kinds.STRING, None),
        f"{arch}.block_count": (N_LAYERS, kinds.UINT32, None),
        f"{arch}.context_length": (CONTEXT, kinds.UINT32, None),
        f"{arch}.embedding_length": (D, kinds.UINT32, None),
        f"{arch}.feed_forward_length": (FF, kinds.UINT32, None),
        f"{arch}.attention.head_count": (N_HEADS, kinds.UINT32, None),
        f"{arch}.attention.head_count_kv": (N_KV, kinds.UINT32, None),
        f"{arch}.rope.freq_base": (10000.0, kinds.FLOAT32, None),
        f"{arch}.attention.layer_norm_rms_epsilon": (1e-5, kinds.FLOAT32, None),
        "tokenizer.ggml.model": ("gpt2", kinds.STRING, None),
        "tokenizer.ggml.pre": ("default", kinds.STRING, None),
        "tokenizer.ggml.tokens": (tokens, kinds.ARRAY, kinds.STRING),
        "tokenizer.ggml.token_type": (types, kinds.ARRAY, kinds.INT32),
        "tokenizer.ggml.merges": (MERGES, kinds.ARRAY, kinds.STRING),
        "tokenizer.ggml.bos_token_id": (1, kinds.UINT32, None),
        "tokenizer.ggml.eos_token_id": (2, kinds.UINT32, None),
        "tokenizer.ggml.add_bos_token": (add_bos, kinds.BOOL, None),
        "tokenizer.chat_template": (CHAT_TEMPLATE, kinds.STRING, None),
    }  # fmt: skip
    return metadata


def gguf_tensors(weights: dict, arch="llama", quantize_ffn=False) -> dict:
    """GGUF tensor name -> (array, raw dtype or None) in the order llama.cpp's converter writes them."""
    tensors = {"token_embd.weight": (weights["embed"], None), "output_norm.weight": (weights["norm"], None)}
    for i, layer in enumerate(weights["layers"]):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = (layer["attn_norm"], None)
        tensors[p + "ffn_norm.weight"] = (layer["ffn_norm"], None)
        # llama.cpp permutes q/k for "llama" (adjacent-pair rotation); qwen2 keeps HF's rotate_half layout
        order_q = (lambda w: permute(w, N_HEADS)) if arch == "llama" else (lambda w: w)
        order_k = (lambda w: permute(w, N_KV)) if arch == "llama" else (lambda w: w)
        tensors[p + "attn_q.weight"] = (order_q(layer["q"]), None)
        tensors[p + "attn_k.weight"] = (order_k(layer["k"]), None)
        tensors[p + "attn_v.weight"] = (layer["v"], None)
        tensors[p + "attn_output.weight"] = (layer["o"], None)
        if "q_bias" in layer:
            tensors[p + "attn_q.bias"] = (order_q(layer["q_bias"]), None)
            tensors[p + "attn_k.bias"] = (order_k(layer["k_bias"]), None)
            tensors[p + "attn_v.bias"] = (layer["v_bias"], None)
        for name in ("gate", "up", "down"):
            tensor = layer[name]
            if quantize_ffn and tensor.shape[-1] % 32 == 0:  # Q8_0 packs rows in blocks of 32 values
                packed = gguf.quants.quantize(tensor, gguf.GGMLQuantizationType.Q8_0)
                layer[name] = gguf.quants.dequantize(packed, gguf.GGMLQuantizationType.Q8_0)  # the reference too
                tensors[p + f"ffn_{name}.weight"] = (packed, gguf.GGMLQuantizationType.Q8_0)
            else:
                tensors[p + f"ffn_{name}.weight"] = (tensor, None)
    return tensors


def write(
    path: Path, weights: dict, arch="llama", quantize_ffn=False, add_bos=False, metadata=None, tensors=None
) -> Path:
    """metadata: key -> a value (stored as typed() says), a (value, type, item type) triple, or DROP;
    tensors: name -> a float32 array, or DROP. Both replace or add to what a well-formed file holds."""
    writer = gguf.GGUFWriter(str(path), arch=arch)
    entries = default_metadata(arch, add_bos)
    for key, value in (metadata or {}).items():
        entries[key] = value if value is DROP or isinstance(value, tuple) else typed(value)
    for key, entry in entries.items():
        if entry is not DROP:
            writer.add_key_value(key, *entry)
    arrays = gguf_tensors(weights, arch, quantize_ffn)
    arrays.update(
        {
            name: value if value is DROP else (np.asarray(value, np.float32), None)
            for name, value in (tensors or {}).items()
        }
    )
    for name, entry in arrays.items():
        if entry is not DROP:
            array, raw_dtype = entry
            writer.add_tensor(name, array, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def reference_logits(weights: dict, ids: list[int]) -> np.ndarray:
    """The forward in float64, Hugging Face style: rotate_half rotary embeddings on unpermuted q/k."""
    f = {k: v for k, v in weights.items()}
    x = f["embed"].astype(np.float64)[ids]
    t, dh = len(ids), D // N_HEADS
    inv = 10000.0 ** (-np.arange(0, dh, 2) / dh)
    angles = np.outer(np.arange(t), inv)
    cos, sin = np.cos(np.concatenate([angles, angles], -1)), np.sin(np.concatenate([angles, angles], -1))

    def norm(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-5) * w

    def rotate_half(v):
        half = v.shape[-1] // 2
        return np.concatenate([-v[..., half:], v[..., :half]], -1)

    for layer in f["layers"]:
        h = norm(x, layer["attn_norm"])
        q = (h @ layer["q"].T + layer.get("q_bias", 0)).reshape(t, N_HEADS, dh)
        k = (h @ layer["k"].T + layer.get("k_bias", 0)).reshape(t, N_KV, dh)
        v = (h @ layer["v"].T + layer.get("v_bias", 0)).reshape(t, N_KV, dh)
        q = q * cos[:, None] + rotate_half(q) * sin[:, None]
        k = k * cos[:, None] + rotate_half(k) * sin[:, None]
        k, v = np.repeat(k, N_HEADS // N_KV, axis=1), np.repeat(v, N_HEADS // N_KV, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(dh)
        scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", p, v).reshape(t, D)
        x = x + attn @ layer["o"].T
        h = norm(x, layer["ffn_norm"])
        gate = h @ layer["gate"].T
        x = x + ((gate / (1 + np.exp(-gate))) * (h @ layer["up"].T)) @ layer["down"].T
    return norm(x, f["norm"]) @ f["embed"].T
