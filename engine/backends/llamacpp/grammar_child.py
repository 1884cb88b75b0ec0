"""The grammar probe's child process (grammar_probe.py starts it): it compiles the grammar with llama.cpp on
a thread with a small stack, applies it to the whole vocabulary once, and prints its verdict as one JSON line."""

import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from engine.backends.llamacpp.grammar import _apply, compile_grammar, token_data
from engine.backends.llamacpp.grammar_probe import COMPILED, PROBE_MEMORY_BYTES, PROBE_STACK_BYTES, _took_too_long


def child_main() -> None:
    """The child: argv = [model path, the grammar's file, the first step's limit in s] -> one JSON line,
    {"refused": None or why, "allowed": tokens allowed at the start, "seconds": the first step's}."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (PROBE_MEMORY_BYTES, PROBE_MEMORY_BYTES))
    except (ImportError, ValueError, OSError):
        pass  # no such limit here (Windows): the time limit still holds
    path, text, step_s = sys.argv[1], Path(sys.argv[2]).read_text(encoding="utf-8"), float(sys.argv[3])
    from engine.backends.llamacpp import library

    llama = library.llama()
    params = llama.llama_model_default_params()
    params.vocab_only = True
    handle = llama.llama_model_load_from_file(path.encode(), params)
    if not handle:
        print(json.dumps({"refused": f"llama.cpp could not read the vocabulary of {path}"}), flush=True)
        return
    vocab = llama.llama_model_get_vocab(handle)
    answer: dict = {}
    threading.stack_size(PROBE_STACK_BYTES)
    worker = threading.Thread(target=lambda: answer.update(probe(llama, vocab, text, step_s, _say_compiled)))
    worker.start()
    clock = _cpu_clock(worker)
    while worker.is_alive():  # llama.cpp cannot be interrupted: past step_s of CPU the child ends itself
        worker.join(0.05)
        if clock is not None and worker.is_alive() and time.clock_gettime(clock) > step_s:
            print(json.dumps({"refused": _took_too_long(step_s)}), flush=True)
            os._exit(0)
    print(json.dumps(answer), flush=True)


def _cpu_clock(thread: threading.Thread):
    """The thread's CPU-time clock, where the platform has one (else None: the parent's wall clock limits)."""
    try:
        return time.pthread_getcpuclockid(thread.ident)
    except (AttributeError, OSError):
        return None


def probe(llama, vocab, text: str, step_s: float, compiled=lambda: None) -> dict:
    """Compile the grammar and apply it to the whole vocabulary once (a first step, in one call), in this
    process: the child's work, and the property test's. compiled() hears that the grammar parsed."""
    try:
        sampler = compile_grammar(llama, vocab, text)
    except ValueError as error:
        return {"refused": str(error)}
    compiled()
    try:
        data = token_data(llama.llama_vocab_n_tokens(vocab))
        data["id"] = np.arange(len(data))
        started = time.thread_time()  # CPU time: a busy machine does not make a grammar slow
        _apply(llama, sampler, data)
        seconds = time.thread_time() - started
        allowed = int(np.isfinite(data["logit"]).sum())
        if seconds > step_s:
            return {"refused": _took_too_long(step_s), "seconds": seconds}
        if allowed == 0:
            return {"refused": "the grammar allows no token of this model's vocabulary at its start: nothing "
                    "could be generated (a character no token spells?)"}  # fmt: skip
        return {"refused": None, "allowed": allowed, "seconds": seconds}
    finally:
        llama.llama_sampler_free(sampler)


def _say_compiled() -> None:
    sys.stdout.buffer.write(COMPILED)
    sys.stdout.flush()
