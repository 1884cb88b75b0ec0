"""Any GGUF model llama.cpp runs, in process, through llama-cpp-python's low-level C API (not its `Llama`).

llama.cpp does the forward pass on the quantized weights; the engine takes the whole row of scores at every
position and runs its own sampler chain on it (LocalContext), so every feature works unchanged.

    library.py    importing llama_cpp once: the backend initialised, llama.cpp's log sent to a file
    tokenizer.py  the model's own vocabulary: llama_tokenize, llama_token_to_piece, its chat template
    model.py      LlamaCppModel (the backend) and LlamaCppCache (one llama_context per session)
    threads.py    the default thread count (every core but one: ggml's threads spin while they wait)
"""

from engine.backends.llamacpp.library import INSTALL, available
from engine.backends.llamacpp.threads import default_threads

__all__ = ["INSTALL", "available", "default_threads", "load_llamacpp"]


def load_llamacpp(path, *, context_length=None, threads=None, gpu_layers=0, progress=None):
    """A GGUF file in llama.cpp (ValueError for a file it cannot load, or bad settings)."""
    from engine.backends.llamacpp.model import LlamaCppModel

    return LlamaCppModel(path, context_length=context_length, threads=threads, gpu_layers=gpu_layers, progress=progress)
