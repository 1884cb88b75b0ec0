"""Any GGUF model llama.cpp runs, in process, through llama-cpp-python's low-level C API (not its `Llama`).

llama.cpp does the forward pass on the quantized weights; the engine takes the whole row of scores at every
position and runs its own sampler chain on it (LocalContext), so every feature works unchanged.

    library.py    importing llama_cpp once: the backend initialised, llama.cpp's log sent to a file
    tokenizer.py  the model's own vocabulary: llama_tokenize, llama_token_to_piece, its chat template
    model.py      LlamaCppModel (the backend)
    cache.py      LlamaCppCache (one llama_context per session, grown as its text grows)
    checks.py     what a file must say before llama.cpp opens it (the values llama.cpp aborts on)
    probe.py      a file llama.cpp has not opened before, tried first in a separate process (verdicts kept)
    threads.py    the default thread count (every core but one: ggml's threads spin while they wait)
"""

from pathlib import Path

from engine.backends.llamacpp.library import INSTALL, available
from engine.backends.llamacpp.threads import check_threads, default_threads

__all__ = ["INSTALL", "available", "default_threads", "load_llamacpp"]


def load_llamacpp(path, *, context_length=None, threads=None, gpu_layers=0, progress=None):
    """A GGUF file in llama.cpp (ValueError for a file it cannot load, would crash on, or bad settings): its
    header checked (checks.py), then hashed (progress hears (0, 1000) per 4 MiB: an exception it raises
    cancels), tried in a child process if llama.cpp has not opened it before (probe.py), then loaded here."""
    from engine.backends.gguf.header import check_gguf_file
    from engine.backends.gguf.reader import file_sha256
    from engine.backends.llamacpp.checks import check_for_llamacpp
    from engine.backends.llamacpp.model import LlamaCppModel
    from engine.backends.llamacpp.probe import checked_by_probe

    path = Path(path)
    if threads is not None:  # the settings first: refused before the file is read, hashed or probed
        check_threads(threads)
    check_gguf_file(path)
    check_for_llamacpp(path)
    sha256 = file_sha256(path, each_block=progress and (lambda: progress(0, 1000)))
    checked_by_probe(path, sha256, progress)
    return LlamaCppModel(path, context_length=context_length, threads=threads, gpu_layers=gpu_layers,
                         progress=progress, weights_sha256=sha256)  # fmt: skip
