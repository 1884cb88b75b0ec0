"""GBNF grammars through llama.cpp's own grammar sampler (llama_sampler_init_grammar): which tokens the grammar
allows next, and its state advanced by the tokens the text takes.

llama.cpp aborts the process when its grammar accepts a token it does not allow (an exception through C, or
GGML_ABORT for an end token), so every token is checked (`allows`) before `accept`: a token the grammar
refuses (a person forced it) ends the grammar's say over the text instead. A grammar that does not parse is
reported with llama.cpp's message, which its parser writes to stderr: that is read from a temporary file,
never shown on the user's terminal (other refusals, such as no root rule, come through llama.cpp's log).

A grammar text is compiled in this process only once a child process compiled it without harm and found its
first step quick enough (grammar_probe.py). The tokens it allows are found in CHUNKS parts of the vocabulary
with the model's stop flag checked between them, so that Stop and closing end a grammar's step early. The
vocabulary is taken in the order of the tokens' text: llama.cpp shares the work for tokens that start alike
within one call ("a"? x100: 3.2 s in one call, 120 s in 1,404 smaller calls of unsorted tokens, 3.5 s in 32 sorted
chunks), so the chunks cost what one call costs.
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
CHUNKS = 32  # parts of the vocabulary a step applies the grammar to, one after another


class Stopped(Exception):
    """apply_in_chunks was told to stop."""


class Grammar:
    def __init__(self, model, text: str):
        """model: a LlamaCppModel; text: GBNF with a `root` rule (Settings checks its shape). ValueError with
        llama.cpp's message when it does not parse, or grammar_probe's reason when the child refused it."""
        from engine.backends.llamacpp.grammar_probe import check_grammar

        self.sampler = None
        self.model, self.llama, self.text, self.vocab_size = model, model.llama, text, model.vocab_size
        check_grammar(model, text)  # in a child process, once per grammar: a crash there is a ValueError here
        self.sampler = compile_grammar(self.llama, self.llama.llama_model_get_vocab(model.handle), text)
        self._all = token_data(self.vocab_size)  # every token, for `allowed`
        self._one = np.zeros(1, dtype=TOKEN_DATA)

    def allowed(self) -> np.ndarray:
        """-> [m] the token ids the grammar allows next, ascending; ValueError once the model is told to stop
        its work (stop_work), between two chunks of the vocabulary."""
        try:
            stopped = lambda: self.model.work_stopped  # noqa: E731
            return apply_in_chunks(self.llama, self.sampler, self._all, self.model.grammar_order(), stopped)
        except Stopped:
            raise ValueError(f"{self.model.name} was told to stop its work (stop_work): the grammar's step "
                             "stopped") from None  # fmt: skip

    def allows(self, token_id: int) -> bool:
        self._one["id"], self._one["logit"] = token_id, 0
        _apply(self.llama, self.sampler, self._one)
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


def compile_grammar(llama, vocab, text: str):
    """llama.cpp's grammar sampler for text over a vocabulary; ValueError with llama.cpp's message."""
    library.errors.clear()
    sampler, message = _quietly(lambda: llama.llama_sampler_init_grammar(vocab, text.encode(), b"root"))
    if not sampler:  # the parser's complaint is on stderr; a grammar that parses but is wrong, in the log
        raise ValueError(f"the grammar does not parse: {_parse_error(message, text, library.errors)}")
    return sampler


def token_data(vocab_size: int) -> np.ndarray:
    return np.zeros(vocab_size, dtype=TOKEN_DATA)


def apply_in_chunks(llama, sampler, data: np.ndarray, order: np.ndarray, stopped) -> np.ndarray:
    """The ids the grammar allows among all len(data) tokens, ascending, applied to CHUNKS parts of `order`
    (every id, sorted by the token's text) one after another -> Stopped as soon as stopped() says so."""
    data["id"] = order
    data["logit"] = 0
    size = -(-len(data) // CHUNKS)
    for start in range(0, len(data), size):
        if stopped():
            raise Stopped
        _apply(llama, sampler, data[start : start + size])
    return np.sort(order[np.isfinite(data["logit"])])


def text_order(tokenizer, vocab_size: int) -> np.ndarray:
    """Every token id, sorted by the token's bytes (tokens that start alike together)."""
    pieces = [tokenizer.token_bytes(token_id) for token_id in range(vocab_size)]
    return np.array(sorted(range(vocab_size), key=pieces.__getitem__), dtype=np.int32)


def _apply(llama, sampler, data: np.ndarray) -> None:
    pointer = data.ctypes.data_as(ctypes.POINTER(llama.llama_token_data))
    array = llama.llama_token_data_array(data=pointer, size=len(data), selected=-1, sorted=False)
    llama.llama_sampler_apply(sampler, ctypes.byref(array))


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
