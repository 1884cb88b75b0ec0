"""A grammar text llama.cpp has not compiled before is compiled first in a child process, where a crash, a
runaway allocation or a parse that never ends cannot reach the app: the child loads only the model's
vocabulary (vocab_only), parses the grammar on a thread with a small stack (PROBE_STACK_BYTES: the app's own
threads have more), and finds the tokens it allows at its start, under a memory cap and a time limit. The
verdict is remembered per (model file's sha256, grammar's sha256): each grammar is probed once a process.

The checks in engine/core/gbnf.py refuse what is known to be dangerous before this; the probe is for what no
check foresaw. The child's own code is grammar_child.py (it compiles with grammar.py, which calls this module).
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

PROBE_STEP_S = 2.0  # the first step's most, in CPU time: "a"? x80 took 0.6-1.7 s, x150 10.6 s, x300 over 90 s
STEP_WAIT = 3  # the child limits the step's CPU time; the parent's wall clock (which runs ahead) is a backstop
PROBE_START_S = 10.0  # the child's start (Python, llama.cpp, the vocabulary: 0.3-1 s here) and the parse
PROBE_MEMORY_BYTES = 2 << 30  # the child's address space: its vocabulary takes ~100 MB
PROBE_STACK_BYTES = 1 << 20  # the parse's thread; the app's threads have 8 MiB (Linux), 18,750 groups needed more
MAX_VERDICTS = 256
_verdicts: OrderedDict = OrderedDict()  # (model sha256, grammar sha256) -> None (fine) or the refusal
_lock = threading.Lock()
COMPILED = b"compiled\n"  # the child's line once the grammar parsed
CHILD = "from engine.backends.llamacpp.grammar_child import child_main; child_main()"


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
