"""A grammar text llama.cpp has not compiled before is compiled first in a child process, where a crash, a
runaway allocation or a parse that never ends cannot reach the app: the child loads only the model's
vocabulary (vocab_only), parses the grammar on a thread with a small stack (PROBE_STACK_BYTES: the app's own
threads have more), and finds the tokens it allows at its start, under a memory cap and a time limit. The
verdict is remembered per (model file's sha256, grammar's sha256): each grammar is probed once a process.

The checks in engine/core/gbnf.py refuse what is known to be dangerous before this; the probe is for what no
check foresaw.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

PROBE_STEP_S = 2.0  # the first step's most, in CPU time: "a"? x80 took 0.6-1.7 s, x150 10.6 s, x300 over 90 s
STEP_WAIT = 3  # the child limits the step's CPU time; the parent's wall clock (which runs ahead) is a backstop
PROBE_START_S = 10.0  # the child's start (Python, llama.cpp, the vocabulary: 0.3-1 s here) and the parse
PROBE_MEMORY_BYTES = 2 << 30  # the child's address space: its vocabulary takes ~100 MB
PROBE_STACK_BYTES = 1 << 20  # the parse's thread; the app's threads have 8 MiB (Linux), 18,750 groups needed more
MAX_VERDICTS = 256
_verdicts: OrderedDict = OrderedDict()  # (model sha256, grammar sha256) -> None (fine) or the refusal
_lock = threading.Lock()
COMPILED = b"compiled\n"  # the child's line once the grammar parsed
CHILD = "from engine.backends.llamacpp.grammar_probe import child_main; child_main()"


def check_grammar(model, text: str, step_s: float = PROBE_STEP_S) -> None:
    """ValueError saying why, when the grammar does not parse, allows no token at its start, takes over step_s
    for its first step, or crashes or exhausts the child compiling it. A model told to stop its work
    (stop_work) ends the probe."""
    key = (model.weights_sha256, hashlib.sha256(text.encode()).hexdigest())
    with _lock:
        known = key in _verdicts
        verdict = _verdicts.get(key)
    if not known:
        verdict = _run_child(model, text, step_s)
        with _lock:
            _verdicts[key] = verdict
            while len(_verdicts) > MAX_VERDICTS:
                _verdicts.popitem(last=False)
    if verdict is not None:
        raise ValueError(verdict)


def _run_child(model, text: str, step_s: float) -> str | None:
    """The child's verdict. It writes COMPILED once the grammar parsed: from then it has STEP_WAIT * step_s
    (and a second) for the first step, else it is ended (it cannot be interrupted inside llama.cpp)."""
    root = str(Path(__file__).resolve().parents[3])  # the folder holding the engine package
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryDirectory(prefix="grammar-probe-") as folder:
        grammar, out, err = (Path(folder) / name for name in ("grammar.gbnf", "out", "err"))
        grammar.write_bytes(text.encode())
        with open(out, "wb") as out_file, open(err, "wb") as err_file:
            child = subprocess.Popen([sys.executable, "-c", CHILD, model.source, str(grammar), str(step_s)],
                                     stdin=subprocess.DEVNULL, stdout=out_file, stderr=err_file, env=env)  # fmt: skip
        deadline = time.monotonic() + PROBE_START_S + step_s
        while child.poll() is None:
            if COMPILED in out.read_bytes():
                deadline = min(deadline, time.monotonic() + STEP_WAIT * step_s + 1)
            if model.work_stopped or time.monotonic() > deadline:
                child.kill()
                child.wait()
                if model.work_stopped:
                    raise ValueError(f"{model.name} was told to stop its work (stop_work): the grammar's check "
                                     "stopped")  # fmt: skip
                return _took_too_long(step_s)
            time.sleep(0.02)
        return _verdict(child.returncode, out.read_bytes(), err.read_bytes())


def _verdict(status: int, out: bytes, err: bytes) -> str | None:
    try:
        answer = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        answer = None
    if status == 0 and isinstance(answer, dict):
        return answer.get("refused")
    last = (err.decode("utf-8", "replace").strip().splitlines() or [""])[-1][:200]
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        cause = f"crashed ({name})"
    else:
        cause = f"failed (exit status {status}{': ' + last if last else ''})"
    return (f"llama.cpp {cause} compiling this grammar, in a separate process (the app goes on): simplify the "
            "grammar")  # fmt: skip


def _took_too_long(step_s: float) -> str:
    return (
        f"llama.cpp took over {step_s:g} s to find the tokens this grammar allows at its start (every step "
        "would take as long): simplify it (many optional or repeated items in a row multiply its work)"
    )


# --- the child ---------------------------------------------------------------------------------------------
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
    from engine.backends.llamacpp.grammar import _apply, compile_grammar, token_data

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
