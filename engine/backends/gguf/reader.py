"""Reading a GGUF file: read_gguf (checked, then dequantized with the `gguf` package) into our layout.

A file's metadata and tensor shapes are checked against each other (checks.py) and its tokenizer is built
before the bulk is dequantized; the weights are then rearranged into the layout the forward pass uses
(model.py). Also here: the file's sha256 (what a trace records) and its end tokens.
"""

import hashlib
from pathlib import Path

import numpy as np

from engine.backends.gguf import checks as gguf_checks
from engine.backends.gguf.header import readable
from engine.backends.gguf.metadata import read_header
from engine.backends.gguf.model import LlamaConfig
from engine.backends.gguf.tokenizer import build_tokenizer


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
        read_header(path)  # within bounds first: the gguf package walks whatever counts a header claims
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
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
        readable(path.stem),
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


def file_sha256(path: Path, each_block=None) -> str:
    """each_block(): called before each 4 MiB read (an exception it raises stops the hashing)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
            if each_block is not None:
                each_block()
    return digest.hexdigest()


def end_tokens(spec: dict) -> set[int]:
    """End-of-text and end-of-turn tokens: the file's eos/eot ids and the usual control tokens by name."""
    ids = {spec.get("eos_id"), spec.get("eot_id")}
    names = {"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "</s>"}
    ids |= {i for i, token in enumerate(spec["tokens"]) if token in names and spec["token_types"][i] == 3}
    return {int(i) for i in ids if i is not None}
