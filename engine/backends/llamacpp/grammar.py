"""GBNF grammars through llama.cpp's own grammar sampler (llama_sampler_init_grammar): which tokens the grammar
allows next, and its state advanced by the tokens the text takes.

llama.cpp aborts the process when its grammar accepts a token it does not allow (an exception through C, or
GGML_ABORT for an end token), so every token is checked (`allows`) before `accept`: a token the grammar
refuses (a person forced it) ends the grammar's say over the text instead. A grammar that does not parse is
reported with llama.cpp's message, which its parser writes to stderr: that is read from a temporary file,
never shown on the user's terminal (other refusals, such as no root rule, come through llama.cpp's log).
"""

import ctypes
import os
import tempfile
import threading

import numpy as np

from engine.backends.llamacpp import library

TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])  # llama_token_data, 12 bytes
_stderr_lock = threading.Lock()
MAX_MESSAGE_BYTES = 1 << 20  # the parser's message and its copy of the grammar (at most 100,000 characters)


class Grammar:
    def __init__(self, model, text: str):
        """model: a LlamaCppModel; text: GBNF with a `root` rule (Settings checks its size). ValueError with
        llama.cpp's message when it does not parse."""
        self.sampler = None
        self.llama, self.text, self.vocab_size = model.llama, text, model.vocab_size
        vocab = self.llama.llama_model_get_vocab(model.handle)
        library.errors.clear()
        sampler, message = _quietly(lambda: self.llama.llama_sampler_init_grammar(vocab, text.encode(), b"root"))
        if not sampler:  # the parser's complaint is on stderr; a grammar that parses but is wrong, in the log
            raise ValueError(f"the grammar does not parse: {_parse_error(message, text, library.errors)}")
        self.sampler = sampler
        self._all = np.zeros(self.vocab_size, dtype=TOKEN_DATA)  # every token, for `allowed`
        self._one = np.zeros(1, dtype=TOKEN_DATA)

    def allowed(self) -> np.ndarray:  # -> [m] the token ids the grammar allows next, ascending
        self._all["id"] = np.arange(self.vocab_size)
        self._all["logit"] = 0
        self._apply(self._all)
        return np.flatnonzero(np.isfinite(self._all["logit"]))

    def allows(self, token_id: int) -> bool:
        self._one["id"], self._one["logit"] = token_id, 0
        self._apply(self._one)
        return bool(np.isfinite(self._one["logit"][0]))

    def accept(self, token_id: int) -> None:
        """Advance past a token: only one `allows` said yes to (else llama.cpp aborts the process)."""
        self.llama.llama_sampler_accept(self.sampler, int(token_id))

    def reset(self) -> None:
        self.llama.llama_sampler_reset(self.sampler)

    def close(self) -> None:
        if self.sampler:
            self.llama.llama_sampler_free(self.sampler)
            self.sampler = None

    def __del__(self):
        self.close()

    def _apply(self, data: np.ndarray) -> None:
        pointer = data.ctypes.data_as(ctypes.POINTER(self.llama.llama_token_data))
        array = self.llama.llama_token_data_array(data=pointer, size=len(data), selected=-1, sorted=False)
        self.llama.llama_sampler_apply(self.sampler, ctypes.byref(array))


def _parse_error(written: str, text: str, logged) -> str:
    """llama.cpp's whole complaint. Its parser writes "parse: error parsing grammar: <why> at <the rest of the
    grammar from the error>", a blank line, then the grammar: -> "<why> at <rest>" (the rest may span lines;
    when it is empty, the grammar ended there and the message says so). Else every line it wrote or logged."""
    _, found, why = written.removesuffix(f"\n\n{text}\n").partition("error parsing grammar: ")
    if found:
        why = why.rstrip()
        return f"{why} the end of the grammar" if why.endswith(" at") else why
    lines = [line.strip() for line in written.splitlines() if line.strip()] + list(logged)
    return "\n".join(lines) or "llama.cpp refused it"


def _quietly(call):
    """Run call() with the process's stderr (fd 2) going to a temporary file -> (its result, what it wrote).
    llama.cpp's grammar parser writes its errors there with fprintf, past its own log callback."""
    library.llama()  # initialised first: its own start-up lines go to its log, not here
    with _stderr_lock, tempfile.TemporaryFile() as caught:
        saved = os.dup(2)
        try:
            os.dup2(caught.fileno(), 2)
            result = call()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        caught.seek(0)
        return result, caught.read(MAX_MESSAGE_BYTES).decode("utf-8", errors="replace")
