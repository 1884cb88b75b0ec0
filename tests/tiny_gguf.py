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
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
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


def write(path: Path, weights: dict, arch="llama", quantize_ffn=False, add_bos=False) -> Path:
    writer = gguf.GGUFWriter(str(path), arch=arch)
    writer.add_name("tiny test model")
    writer.add_block_count(N_LAYERS)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(D)
    writer.add_feed_forward_length(FF)
    writer.add_head_count(N_HEADS)
    writer.add_head_count_kv(N_KV)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    tokens, types = vocabulary()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(add_bos)
    writer.add_chat_template(CHAT_TEMPLATE)
    writer.add_tensor("token_embd.weight", weights["embed"])
    writer.add_tensor("output_norm.weight", weights["norm"])
    for i, layer in enumerate(weights["layers"]):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", layer["attn_norm"])
        writer.add_tensor(p + "ffn_norm.weight", layer["ffn_norm"])
        # llama.cpp permutes q/k for "llama" (adjacent-pair rotation); qwen2 keeps HF's rotate_half layout
        order_q = (lambda w: permute(w, N_HEADS)) if arch == "llama" else (lambda w: w)
        order_k = (lambda w: permute(w, N_KV)) if arch == "llama" else (lambda w: w)
        writer.add_tensor(p + "attn_q.weight", order_q(layer["q"]))
        writer.add_tensor(p + "attn_k.weight", order_k(layer["k"]))
        writer.add_tensor(p + "attn_v.weight", layer["v"])
        writer.add_tensor(p + "attn_output.weight", layer["o"])
        if "q_bias" in layer:
            writer.add_tensor(p + "attn_q.bias", order_q(layer["q_bias"]))
            writer.add_tensor(p + "attn_k.bias", order_k(layer["k_bias"]))
            writer.add_tensor(p + "attn_v.bias", layer["v_bias"])
        for name in ("gate", "up", "down"):
            tensor = layer[name]
            if quantize_ffn and tensor.shape[-1] % 32 == 0:  # Q8_0 packs rows in blocks of 32 values
                packed = gguf.quants.quantize(tensor, gguf.GGMLQuantizationType.Q8_0)
                layer[name] = gguf.quants.dequantize(packed, gguf.GGMLQuantizationType.Q8_0)  # the reference too
                writer.add_tensor(p + f"ffn_{name}.weight", packed, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            else:
                writer.add_tensor(p + f"ffn_{name}.weight", tensor)
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
