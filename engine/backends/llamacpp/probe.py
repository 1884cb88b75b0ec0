"""A GGUF file llama.cpp has not opened before is tried first in a separate process, so that what no check
foresaw (checks.py) still cannot take the app down: llama.cpp aborts the process on many a broken file.

The child (probe_child.py) makes the C calls the app makes to load the file and take a first step (a tiny
context, a text with non-ASCII characters tokenized, two tokens decoded and spelled back) and prints one
JSON line. It crashed (a signal, an exit code) or hung (past a time limit that grows with the file): the file
is refused with a ValueError saying so. It finished (or llama.cpp refused the file cleanly, which the load here will say
again): the file is opened here. The verdict is kept per file (its sha256) and llama-cpp-python version, in
llama.cpp-probes.json in the engine's cache folder (written atomically, read defensively: a damaged file
holds no verdicts), so each file is tried once. progress(0, 1000) is called while the child runs; an
exception it raises (a cancelled load) ends the child and reaches the caller, and nothing is remembered.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from functools import cache
from pathlib import Path

from engine.backends.llamacpp import library
from engine.backends.llamacpp.probe_child import STARTED
from engine.core.files import atomic_write_bytes

STORE_NAME = "llama.cpp-probes.json"
SCHEMA = "token-playground/llamacpp-probes/1"
MAX_VERDICTS = 1000  # the oldest are forgotten first
BASE_SECONDS, SECONDS_PER_GB = 60.0, 30.0  # the child's time limit: the load reads the whole file
POLL_SECONDS = 0.05
_CHILD = str(Path(__file__).with_name("probe_child.py"))  # run as a script: it imports llama_cpp alone


def store_path() -> Path:
    return library.log_path().parent / STORE_NAME


@cache
def llama_cpp_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama_cpp_python")
    except PackageNotFoundError:
        return "unknown"


def checked_by_probe(path: Path, sha256: str, progress=None) -> dict:
    """The file's verdict (tried now if it has none); ValueError when llama.cpp crashed or hung on it."""
    verdict = read_verdicts().get(sha256)
    if verdict is None or verdict.get("llama_cpp") != llama_cpp_version():
        verdict = probe(path, progress)
        remember(sha256, verdict)
    if not verdict["ok"]:
        raise ValueError(refusal(path, verdict))
    return verdict


def refusal(path, verdict: dict) -> str:
    return f"{path}: {reason(verdict)}"


def reason(verdict: dict) -> str:
    happened = "hung" if verdict.get("hung") else "crashed"
    return (f"llama.cpp {happened} on this file when it was tried in a separate process ({verdict['why']}), so "
            f"it is not opened in this one; the numpy engine may still open it if it passes its checks "
            f"(backend='numpy')")  # fmt: skip


def probe(path: Path, progress=None) -> dict:
    """Try the file in a child process -> its verdict {"ok", "why", "hung", "seconds", "path", "size",
    "mtime_ns", "llama_cpp"}; ValueError when the child could not even start."""
    stat = path.stat()
    limit = BASE_SECONDS + SECONDS_PER_GB * stat.st_size / 1e9
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        code = _run_child(path, limit, out, err, progress)
        out.seek(0), err.seek(0)
        said, stderr = out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
    verdict = {"ok": False, "why": "", "hung": code is None, "seconds": round(time.monotonic() - started, 3),
               "path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
               "llama_cpp": llama_cpp_version()}  # fmt: skip
    if code is None:
        verdict["why"] = f"it was still running after {limit:.0f} s and was stopped"
    elif STARTED not in said:
        raise ValueError(f"{path}: could not try this file in a separate process before opening it "
                         f"(exit code {code}: {_last_line(stderr)})")  # fmt: skip
    elif code == 0 and _last_json(said) is not None:
        verdict.update(ok=True, why=str(_last_json(said).get("error", "")))
    else:
        verdict["why"] = f"{_ending(code)}{': ' + _last_line(stderr) if _last_line(stderr) else ''}"
    return verdict


def _run_child(path: Path, limit: float, out, err, progress) -> int | None:
    """The child's exit code (negative: the signal that ended it), None when it ran past the limit."""
    env = {**os.environ, "GGML_NO_BACKTRACE": "1"}  # ggml would attach gdb to print a backtrace: seconds
    child = subprocess.Popen([sys.executable, _CHILD, str(path)], stdin=subprocess.DEVNULL,
                             stdout=out, stderr=err, env=env)  # fmt: skip
    deadline = time.monotonic() + limit
    try:
        while True:
            try:
                return child.wait(timeout=POLL_SECONDS)
            except subprocess.TimeoutExpired:
                pass
            if progress is not None:
                progress(0, 1000)  # an exception here cancels the load (the child is killed below)
            if time.monotonic() > deadline:
                child.kill()
                child.wait()
                return None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _last_json(said: str) -> dict | None:
    """The child's last line as the JSON object it prints at its end; None when it did not get there."""
    try:
        answer = json.loads(said.rstrip().rsplit("\n", 1)[-1])
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _ending(code: int) -> str:
    if code < 0:
        try:
            return f"it ended with {signal.Signals(-code).name}"
        except ValueError:
            return f"it ended with signal {-code}"
    return f"it exited with code {code}"


def _last_line(stderr: str) -> str:
    """What the child said last on stderr: an assertion or an uncaught exception, shortened."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for marker in ("GGML_ASSERT", "what():", "terminate called", "Error"):
        for line in reversed(lines):
            if marker in line:
                return line[line.index(marker) :][:300]
    return lines[-1][:300] if lines else ""


# --- the verdicts ------------------------------------------------------------------------------------


def read_verdicts() -> dict:
    """sha256 -> verdict; {} when the store is missing or damaged in any way (the probes then run again)."""
    try:
        data = json.loads(store_path().read_bytes())
        files = data["files"] if isinstance(data, dict) and data.get("schema") == SCHEMA else {}
        return {sha: v for sha, v in files.items()
                if isinstance(v, dict) and isinstance(v.get("ok"), bool) and isinstance(v.get("why"), str)}  # fmt: skip
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return {}


def remember(sha256: str, verdict: dict) -> None:
    """Add a verdict to the store (the oldest past MAX_VERDICTS forgotten); a store that cannot be written
    costs a probe next time, nothing else."""
    verdicts = read_verdicts()
    verdicts.pop(sha256, None)
    verdicts[sha256] = verdict
    kept = dict(list(verdicts.items())[-MAX_VERDICTS:])
    try:
        store_path().parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(store_path(), json.dumps({"schema": SCHEMA, "files": kept}, indent=1).encode())
    except OSError:
        pass


def known_crashes() -> dict:
    """(resolved path, size, mtime_ns) -> the refusal, for each file whose probe crashed or hung: discovery
    marks such files without hashing them."""
    return {
        (v.get("path"), v.get("size"), v.get("mtime_ns")): reason(v)
        for v in read_verdicts().values()
        if not v["ok"] and v.get("llama_cpp") == llama_cpp_version()
    }
