"""The probe's child process (probe.py runs this file as a script): open a GGUF file with llama.cpp the way
LlamaCppModel does, with a tiny context, and say how it went in one JSON line on stdout.

It imports llama_cpp alone (not the engine: half a second less per probe) and makes the C calls the app makes
when it loads a file and takes a first step: load the model, read its vocabulary (every token's end-of-
generation flag, BOS, EOS and their pieces), its chat template and architecture; make a context; tokenize a
text with non-ASCII characters and a control token's text; decode two tokens and read their scores; spell
the tokens back. llama.cpp's log goes to stderr, which probe.py reads when this process dies.

    python probe_child.py FILE     prints {"ok": true} or {"ok": true, "error": why llama.cpp refused it}
"""

import ctypes
import json
import os
import sys

STARTED = "probe started"
TEXT = "Hello, wörld: 字 🙂\n<|im_end|>".encode()
POSITIONS = 32


def main(path: str) -> None:
    import llama_cpp as llama

    llama.llama_backend_init()
    print(STARTED, flush=True)
    error = exercise(llama, os.fsencode(path))  # a name need not be UTF-8
    print(json.dumps({"ok": True, "error": error} if error else {"ok": True}), flush=True)


def exercise(llama, path: bytes) -> str:
    """ "" when every call went through; why llama.cpp refused the file (cleanly) otherwise."""
    params = llama.llama_model_default_params()
    params.n_gpu_layers = 0
    model = llama.llama_model_load_from_file(path, params)
    if not model:
        return "llama.cpp cannot load this file"
    try:
        vocab = llama.llama_model_get_vocab(model)
        size = llama.llama_vocab_n_tokens(vocab)
        if llama.llama_model_n_ctx_train(model) < 1 or size < 1:
            return "llama.cpp reads no context or no vocabulary in it"
        sum(llama.llama_vocab_is_eog(vocab, i) for i in range(size))
        for token in (llama.llama_vocab_bos(vocab), llama.llama_vocab_eos(vocab)):
            if 0 <= token < size:
                piece(llama, vocab, token)
        llama.llama_model_chat_template(model, None)
        llama.llama_model_meta_val_str(model, b"general.architecture", ctypes.create_string_buffer(256), 256)
        return first_step(llama, model, vocab, size)
    finally:
        llama.llama_model_free(model)


def first_step(llama, model, vocab, size: int) -> str:
    params = llama.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = POSITIONS
    params.n_seq_max, params.n_threads, params.n_threads_batch = 1, 1, 1
    ctx = llama.llama_init_from_model(model, params)
    if not ctx:
        return f"llama.cpp could not create a context of {POSITIONS} positions"
    batch = llama.llama_batch_init(POSITIONS, 0, 1)
    try:
        buffer = (llama.llama_token * 256)()
        count = llama.llama_tokenize(vocab, TEXT, len(TEXT), buffer, 256, False, True)
        ids = list(buffer[: max(count, 0)])[:2] or [0]
        for i, token in enumerate(ids):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0], batch.logits[i] = token, i, 1, 0, 1
        batch.n_tokens = len(ids)
        if llama.llama_decode(ctx, batch) != 0:
            return "llama.cpp could not decode its first tokens"
        scores = llama.llama_get_logits(ctx)
        scores[0] + scores[size * len(ids) - 1]  # the rows' ends: the buffer is as large as the app reads
        for token in ids:
            piece(llama, vocab, token)
        return ""
    finally:
        llama.llama_batch_free(batch)
        llama.llama_free(ctx)


def piece(llama, vocab, token: int) -> bytes:
    buffer = ctypes.create_string_buffer(256)
    n = llama.llama_token_to_piece(vocab, token, buffer, 256, 0, True)
    return buffer.raw[: max(n, 0)]


if __name__ == "__main__":
    main(sys.argv[1])
