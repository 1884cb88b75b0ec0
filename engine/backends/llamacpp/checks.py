"""What a GGUF file must say before llama.cpp opens it: the values llama.cpp asserts on (GGML_ASSERT aborts
the process, and an uncaught C++ exception ends it too), checked from the header (read within bounds,
gguf/metadata.py) and refused with a ValueError naming the key, in the words the numpy engine's checks use.

What llama.cpp refuses cleanly (a missing key, a tensor of the wrong shape, a token list of numbers) is left
to it: its own message says why. What no check here foresees is caught by probe.py, which opens a new file in
a separate process first.
"""

import os
from pathlib import Path

from engine.backends.gguf import checks as gguf_checks
from engine.backends.gguf.metadata import read_header

# llama.cpp's limits (src/llama-hparams.h and llama-model.cpp of the build llama-cpp-python 0.3.36 ships;
# measured: 1,025 experts abort, 1,024 do not)
MAX_LAYERS = 512
MAX_EXPERTS = 1024
MAX_CONTEXT = (1 << 31) - 1  # llama.cpp keeps the trained context in an int32: 2**32 - 1 reads as -1
_NUMBERS = ("attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon", "rope.freq_base")


_PASSED: set = set()  # (path, size, mtime_ns) of files whose header passed: discovery's, then the load's
_MAX_PASSED = 512


def check_for_llamacpp(path) -> None:
    """ValueError "<path>: <what is wrong>" for a file llama.cpp would abort on, or one whose header breaks
    the reader's bounds; OSError when it cannot be read. A file that passed is not read again until it changes."""
    stat = os.stat(path)
    version = (str(path), stat.st_size, stat.st_mtime_ns)
    if version in _PASSED:
        return
    try:
        check_fields(read_header(path).fields)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    if len(_PASSED) >= _MAX_PASSED:
        _PASSED.clear()
    _PASSED.add(version)


def llamacpp_refusal(path: Path) -> str | None:
    """Why llama.cpp must not open this file (check_for_llamacpp's message without the path), None when its
    header passes; discovery's question, so it never raises."""
    try:
        check_for_llamacpp(path)
    except ValueError as error:
        return str(error).removeprefix(f"{path}: ")
    except OSError as error:
        return f"it cannot be read ({error.strerror or error})"
    return None


def check_fields(fields: dict) -> None:
    arch = fields.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ValueError(f"general.architecture is {arch!r}; it must name the model's architecture")
    if f"{arch}.block_count" in fields:  # a key missing, llama.cpp names itself
        gguf_checks.integer(fields, f"{arch}.block_count", maximum=MAX_LAYERS)
    if f"{arch}.context_length" in fields:
        gguf_checks.integer(fields, f"{arch}.context_length", maximum=MAX_CONTEXT,
                            what="a positive integer (llama.cpp keeps it in 32 signed bits)")  # fmt: skip
    _check_experts(fields, arch)
    for name in _NUMBERS:
        if f"{arch}.{name}" in fields:
            gguf_checks.checked_number(f"{arch}.{name}", fields[f"{arch}.{name}"])
    _check_vocabulary(fields)


def _check_experts(fields: dict, arch: str) -> None:
    """A mixture of experts: 1 to MAX_EXPERTS experts, of which 1 to all are used per token; none: none used."""
    experts = fields.get(f"{arch}.expert_count", 0)
    used = fields.get(f"{arch}.expert_used_count", 0)
    if experts != 0:
        gguf_checks.checked_int(f"{arch}.expert_count", experts, maximum=MAX_EXPERTS)
        if f"{arch}.expert_used_count" not in fields:
            raise ValueError(f"{arch}.expert_used_count is missing; a model with experts ({arch}.expert_count is "
                             f"{experts}) must say how many each token uses")  # fmt: skip
        gguf_checks.checked_int(f"{arch}.expert_used_count", used, maximum=experts,
                                what=f"a positive integer (of {arch}.expert_count's {experts} experts)")  # fmt: skip
    elif used != 0:
        raise ValueError(f"{arch}.expert_used_count is {used!r}, but the model has no experts "
                         f"({arch}.expert_count is {experts!r}); it must be 0")  # fmt: skip


def _check_vocabulary(fields: dict) -> None:
    """Every token spelled once (llama.cpp asserts it); a SentencePiece vocabulary ("llama") holds a token for
    every byte, which llama.cpp spells text outside the vocabulary with (an uncaught std::out_of_range)."""
    tokens = fields.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        return  # missing, or not strings: llama.cpp refuses it with a message of its own
    first = {}
    for index, token in enumerate(tokens):
        spelled = token or f"[EMPTY_{index}]"  # as llama.cpp names an empty token (Gemma's vocabulary has two)
        if first.setdefault(spelled, index) != index:
            raise ValueError(f"tokenizer.ggml.tokens holds {spelled!r} twice (tokens {first[spelled]} and {index}); "
                             f"each token must be spelled once")  # fmt: skip
    if fields.get("tokenizer.ggml.model") == "llama":
        missing = [b for b in range(256) if f"<0x{b:02X}>" not in first and not (b < 0x80 and chr(b) in first)]
        if missing:
            raise ValueError(f"tokenizer.ggml.model is 'llama' (SentencePiece), but the vocabulary has no token for "
                             f"{len(missing)} of the 256 bytes (<0x{missing[0]:02X}> first), which it spells "
                             f"text outside its vocabulary with; a byte-level vocabulary is 'gpt2'")  # fmt: skip
