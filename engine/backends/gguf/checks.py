"""What a GGUF file (or the float32 cache made from one) must say before the engine trusts it.

A file is checked when it is opened, before its tensors are dequantized: every metadata key the engine
reads is present (or has a default) with the right type and a sane range, the numbers agree with each
other (head counts divide, the token list is as long as the embeddings have rows), and every tensor the
forward pass uses is there with exactly the shape the metadata implies. A file that fails is refused with a
ValueError naming the key or the tensor; nothing here raises anything else, so a hostile file cannot reach
the forward pass and fail there with a reshape error, or run a truncated model in silence.

The functions raise messages without the file's name; the caller prefixes it (a GGUF path or a cache
directory). check_config is shared with the cache, whose config is re-checked after its digest verifies.
"""

import math
import numbers
import re

SUPPORTED_ARCHITECTURES = ("llama", "qwen2")
NEOX_ROPE = ("qwen2",)
# The most positions a model is given, whatever its file declares: the rotary tables are computed and the
# KV cache reserved for every position up front (a file declaring 2**32 - 1 asked for 32 GiB of tables).
# A numpy forward over tens of thousands of positions is far past interactive use anyway.
MAX_POSITIONS = 1 << 15
MAX_COUNT = (1 << 31) - 1  # sizes and counts beyond this are no model a numpy engine could hold
DEFAULT_CONTEXT = 2048
BYTE_LEVEL_BPE = "gpt2"

_MISSING = object()
_BLOCK_TENSOR = re.compile(r"blk\.(\d+)\.")
# LlamaConfig's integer fields -> the metadata key (after "<arch>.") each comes from, for messages
_CONFIG_KEYS = {
    "n_layers": "block_count", "d_model": "embedding_length", "n_heads": "attention.head_count",
    "n_kv_heads": "attention.head_count_kv", "head_dim": "attention.key_length",
    "d_ff": "feed_forward_length", "context_length": "context_length",
}  # fmt: skip


def _is_int(value) -> bool:
    return type(value) is int  # not bool, not float: a count written as 2.0 or True is a broken writer


def _kind(value) -> str:
    return type(value).__name__


def integer(fields: dict, key: str, default=_MISSING, what="a positive integer", maximum=MAX_COUNT) -> int:
    """fields[key] as a positive int no larger than maximum (None: unbounded); the default when absent."""
    value = fields.get(key, _MISSING)
    if value is _MISSING:
        if default is _MISSING:
            raise ValueError(f"{key} is missing; it must be {what}")
        return default
    return checked_int(key, value, what, maximum)


def checked_int(key: str, value, what="a positive integer", maximum=MAX_COUNT) -> int:
    if not _is_int(value):
        raise ValueError(f"{key} is {value!r} ({_kind(value)}); it must be {what}")
    if value < 1:
        raise ValueError(f"{key} is {value}; it must be {what}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{key} is {value}; it must be {what} no larger than {maximum}")
    return value


def positive_number(fields: dict, key: str, default: float) -> float:
    return checked_number(key, fields.get(key, default))


def checked_number(key: str, value) -> float:
    finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    if isinstance(value, bool) or not finite or value <= 0:
        raise ValueError(f"{key} is {value!r}; it must be a finite positive number")
    return float(value)


def optional(fields: dict, key: str, kind: type, default):
    value = fields.get(key, default)
    if value is not default and type(value) is not kind:
        raise ValueError(f"{key} is {value!r} ({_kind(value)}); it must be a {kind.__name__}")
    return value


def listed(fields: dict, key: str, kind: type, default=_MISSING) -> list:
    """fields[key] as a list whose every item is of `kind`."""
    value = fields.get(key, _MISSING)
    if value is _MISSING:
        if default is _MISSING:
            raise ValueError(f"{key} is missing")
        return default
    if not isinstance(value, list):
        raise ValueError(f"{key} is a {_kind(value)}; it must be a list of {kind.__name__}")
    for index, item in enumerate(value):
        if type(item) is not kind:
            raise ValueError(f"{key}[{index}] is {item!r} ({_kind(item)}); it must be a {kind.__name__}")
    return value


# --- the model's shape -------------------------------------------------------------------------------


def config_values(fields: dict, arch: str, shapes: dict) -> dict:
    """The file's metadata and tensor shapes -> LlamaConfig's fields (then check with check_config)."""
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(f"architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED_ARCHITECTURES)})")

    def key(name):
        return f"{arch}.{name}"

    d_model = integer(fields, key("embedding_length"))
    head_dim = integer(fields, key("attention.key_length"), default=None, what="a positive even integer")
    divides = "" if head_dim else f" that divides {key('embedding_length')} ({d_model})"
    n_heads = integer(fields, key("attention.head_count"), what="a positive integer" + divides)
    if head_dim is None:
        if d_model % n_heads:
            raise ValueError(f"{key('attention.head_count')} is {n_heads}; it must be a positive integer{divides}")
        head_dim = d_model // n_heads
    value_length = integer(fields, key("attention.value_length"), default=head_dim)
    if value_length != head_dim:
        raise ValueError(f"{key('attention.value_length')} is {value_length}; this engine needs it equal to "
                         f"the key length ({head_dim})")  # fmt: skip
    embeddings = shapes.get("token_embd.weight")
    if embeddings is None or len(embeddings) != 2:
        raise ValueError("tensor token_embd.weight is missing" if embeddings is None
                         else f"tensor token_embd.weight has shape {list(embeddings)}; it must be [vocabulary, {d_model}]")  # fmt: skip
    return {
        "architecture": arch,
        "n_layers": integer(fields, key("block_count")),
        "d_model": d_model,
        "n_heads": n_heads,
        "n_kv_heads": integer(fields, key("attention.head_count_kv"), default=n_heads,
                              what=f"a positive integer that divides {key('attention.head_count')} ({n_heads})"),
        "head_dim": head_dim,
        "d_ff": integer(fields, key("feed_forward_length")),
        "vocab_size": embeddings[0],
        "context_length": integer(fields, key("context_length"), default=DEFAULT_CONTEXT, maximum=None),
        "rope_base": positive_number(fields, key("rope.freq_base"), 10000.0),
        "rms_eps": positive_number(fields, key("attention.layer_norm_rms_epsilon"), 1e-5),
        "tied_output": "output.weight" not in shapes,
        "qkv_bias": "blk.0.attn_q.bias" in shapes,
        "rope_neox": arch in NEOX_ROPE,
    }  # fmt: skip


def check_config(config) -> None:
    """A LlamaConfig the forward pass can run: from a file, or re-read from the cache."""
    arch = config.architecture
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(f"architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
    for field, key in _CONFIG_KEYS.items():
        checked_int(f"{arch}.{key}", getattr(config, field), maximum=None if field == "context_length" else MAX_COUNT)
    checked_int("the vocabulary size (token_embd.weight's rows)", config.vocab_size)
    if config.head_dim % 2:
        raise ValueError(
            f"{arch}.attention.key_length is {config.head_dim}; it must be even (rotary embeddings turn pairs)"
        )
    if config.n_heads % config.n_kv_heads:
        raise ValueError(f"{arch}.attention.head_count_kv is {config.n_kv_heads}; it must be a positive integer "
                         f"that divides {arch}.attention.head_count ({config.n_heads})")  # fmt: skip
    checked_number(f"{arch}.rope.freq_base", config.rope_base)
    checked_number(f"{arch}.attention.layer_norm_rms_epsilon", config.rms_eps)
    for flag in ("tied_output", "qkv_bias", "rope_neox"):
        if type(getattr(config, flag)) is not bool:
            raise ValueError(f"{flag} is {getattr(config, flag)!r}; it must be true or false")
    if config.rope_neox != (arch in NEOX_ROPE):
        raise ValueError(
            f"rope_neox is {config.rope_neox}, but {arch} models use {'neox' if arch in NEOX_ROPE else 'normal'} rope"
        )


def expected_tensors(config) -> dict:
    """Every tensor the forward pass reads -> (its shape as numpy sees it, [out, in], and why)."""
    d, vocab, ff = config.d_model, config.vocab_size, config.d_ff
    q, kv = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
    why_q, why_kv = "head_count x key_length", "head_count_kv x key_length"
    shapes = {"token_embd.weight": ((vocab, d), "vocabulary, embedding_length"),
              "output_norm.weight": ((d,), "embedding_length")}  # fmt: skip
    if not config.tied_output:
        shapes["output.weight"] = ((vocab, d), "vocabulary, embedding_length")
    for layer in range(config.n_layers):
        p = f"blk.{layer}."
        shapes.update({
            p + "attn_norm.weight": ((d,), "embedding_length"), p + "ffn_norm.weight": ((d,), "embedding_length"),
            p + "attn_q.weight": ((q, d), f"{why_q}, embedding_length"),
            p + "attn_k.weight": ((kv, d), f"{why_kv}, embedding_length"),
            p + "attn_v.weight": ((kv, d), f"{why_kv}, embedding_length"),
            p + "attn_output.weight": ((d, q), f"embedding_length, {why_q}"),
            p + "ffn_gate.weight": ((ff, d), "feed_forward_length, embedding_length"),
            p + "ffn_up.weight": ((ff, d), "feed_forward_length, embedding_length"),
            p + "ffn_down.weight": ((d, ff), "embedding_length, feed_forward_length"),
        })  # fmt: skip
        if config.qkv_bias:
            shapes.update({p + "attn_q.bias": ((q,), why_q), p + "attn_k.bias": ((kv,), why_kv),
                           p + "attn_v.bias": ((kv,), why_kv)})  # fmt: skip
    return shapes


def check_tensors(config, shapes: dict) -> None:
    """shapes: every tensor in the file -> its numpy shape. Each expected tensor is there with exactly its
    shape, and no block tensor is left over (a block_count too small would run a truncated model)."""
    if config.n_layers > len(shapes):  # said before listing the expected tensors of (say) 2**31 blocks
        blocks = {int(m.group(1)) for m in map(_BLOCK_TENSOR.match, shapes) if m}
        first = min(set(range(len(blocks) + 1)) - blocks)
        raise ValueError(f"{config.architecture}.block_count is {config.n_layers}, but the file has no tensors "
                         f"for block {first}")  # fmt: skip
    expected = expected_tensors(config)
    for name, (shape, why) in expected.items():
        if name not in shapes:
            raise ValueError(f"tensor {name} is missing")
        if tuple(shapes[name]) != shape:
            raise ValueError(
                f"tensor {name} has shape {list(shapes[name])}; the metadata makes it {list(shape)} ({why})"
            )
    for name in shapes:
        block = _BLOCK_TENSOR.match(name)
        if block and name not in expected:
            if int(block.group(1)) >= config.n_layers:
                raise ValueError(f"tensor {name} is in block {block.group(1)}, but "
                                 f"{config.architecture}.block_count is {config.n_layers}")  # fmt: skip
            raise ValueError(f"tensor {name} is not part of the {config.architecture} block this engine runs")


def checked_context_request(requested) -> None:
    """A caller's context_length: None (the model's own) or a positive int."""
    if requested is not None and (
        isinstance(requested, bool) or not isinstance(requested, numbers.Integral) or requested < 1
    ):
        raise ValueError(f"context_length is {requested!r}; it must be a positive integer")


def positions(config_context: int, requested=None) -> int:
    """The positions a model gets: the file's context, or fewer when asked, never above MAX_POSITIONS."""
    checked_context_request(requested)
    return min(config_context, MAX_POSITIONS, config_context if requested is None else int(requested))


# --- the tokenizer -----------------------------------------------------------------------------------


def tokenizer_spec(fields: dict, vocab_size: int) -> dict:
    """The tokenizer's metadata, checked against the embeddings' rows -> the spec build_tokenizer takes."""
    model = optional(fields, "tokenizer.ggml.model", str, None)
    if model != BYTE_LEVEL_BPE:
        raise ValueError(f"tokenizer.ggml.model is {model!r}; only byte-level BPE ({BYTE_LEVEL_BPE!r}) is supported")
    tokens = listed(fields, "tokenizer.ggml.tokens", str)
    if len(tokens) != vocab_size:
        raise ValueError(f"tokenizer.ggml.tokens has {len(tokens)} tokens, but token_embd.weight has {vocab_size} rows")
    types = listed(fields, "tokenizer.ggml.token_type", int, default=[1] * len(tokens))
    if len(types) != len(tokens):
        raise ValueError(f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    merges = listed(fields, "tokenizer.ggml.merges", str, default=[])
    for index, merge in enumerate(merges):
        first, _, second = merge.partition(" ")  # as build_tokenizer splits it
        if not first or not second:
            raise ValueError(f"tokenizer.ggml.merges[{index}] is {merge!r}; a merge is two tokens and a space between")
    spec = {
        "model": model,
        "pre": optional(fields, "tokenizer.ggml.pre", str, "default"),
        "tokens": tokens,
        "merges": merges,
        "token_types": types,
        "bos_id": optional(fields, "tokenizer.ggml.bos_token_id", int, None),
        "eos_id": optional(fields, "tokenizer.ggml.eos_token_id", int, None),
        "eot_id": optional(fields, "tokenizer.ggml.eot_token_id", int, None),
        "add_bos": optional(fields, "tokenizer.ggml.add_bos_token", bool, False),
        "chat_template": optional(fields, "tokenizer.chat_template", str, None),
    }
    check_special_ids(spec, vocab_size)
    spec["bos_text"] = tokens[spec["bos_id"]] if spec["bos_id"] is not None else ""
    spec["eos_text"] = tokens[spec["eos_id"]] if spec["eos_id"] is not None else ""
    return spec


def check_special_ids(spec: dict, vocab_size: int) -> None:
    """bos, eos and eot ids (each may be absent) are tokens of the vocabulary; shared with the cache."""
    for name in ("bos", "eos", "eot"):
        value = spec.get(f"{name}_id")
        if value is not None and not (_is_int(value) and 0 <= value < vocab_size):
            raise ValueError(
                f"tokenizer.ggml.{name}_token_id is {value!r}; it must be a token id, 0 to {vocab_size - 1}"
            )
