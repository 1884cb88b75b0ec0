"""llama_cpp, imported once: the backend initialised and llama.cpp's own log written to a file, never to the
user's terminal (its error lines are kept to explain a failure)."""

import atexit
import collections
import ctypes
import importlib.util
import os
import threading
from pathlib import Path

INSTALL = 'pip install ".[llama]"'
MAX_LOG_BYTES = 4 << 20  # a log over this is started afresh by the next process that writes to it

_lock = threading.Lock()
_state: dict = {}
errors: collections.deque = collections.deque(maxlen=8)  # llama.cpp's error lines since the caller cleared it
# ggml_log_level (ggml.h; llama-cpp-python's own comment on it is out of date)
DEBUG, ERROR, CONTINUED = 1, 4, 5


def available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def log_path() -> Path:
    import platformdirs

    root = os.environ.get("TOKEN_PLAYGROUND_CACHE") or platformdirs.user_cache_dir("token-playground")
    return Path(root) / "llama.cpp.log"


def llama():
    """The llama_cpp module, initialised on first use; ValueError (saying how to install it) when missing."""
    with _lock:
        if "module" in _state:
            return _state["module"]
        if not available():
            raise ValueError(f"the llama.cpp backend is not installed: {INSTALL}")
        import llama_cpp

        _state["callback"] = callback = llama_cpp.llama_log_callback(_log)  # kept: C holds only a pointer
        llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _state["module"] = llama_cpp
        return llama_cpp


def abort_check(llama_cpp):
    """A C function for llama_set_abort_callback that runs without Python: libc's strlen, over a flag of two
    bytes whose second is always 0 (first byte 0: length 0, decode on; 1: length 1, abort). ggml asks after
    every node of the graph, from the decoding thread; a Python callback there would take the GIL hundreds of
    times a token (and wait for the window's thread to let go of it). None where libc cannot be found: a
    decode then runs to its end."""
    with _lock:
        if "abort_check" not in _state:
            try:
                libc = ctypes.CDLL(None) if os.name != "nt" else ctypes.cdll.msvcrt
                _state["abort_check"] = ctypes.cast(libc.strlen, llama_cpp.ggml_abort_callback)
            except (OSError, AttributeError):
                _state["abort_check"] = None
        return _state["abort_check"]


def error_suffix() -> str:
    """llama.cpp's first error line since `errors` was cleared, as " (llama.cpp: ...)": the cause (later lines
    follow from it); "" where there is none."""
    return f" (llama.cpp: {errors[0]})" if errors else ""


def _log(level: int, text: bytes, user_data) -> None:
    """llama.cpp's log callback: append to the log file, debug lines left out, error lines also kept in
    `errors` (to explain a failure); never raise into C."""
    try:
        if level == CONTINUED:
            level = _state.get("level", 0)
        _state["level"] = level
        if level == DEBUG:
            return
        message = text.decode("utf-8", errors="replace")
        if level == ERROR and message.strip():
            errors.append(message.strip())
        handle = _state.get("file")
        if handle is None:  # opened once, at the first line: a context's creation logs hundreds of lines
            path = log_path()
            path.parent.mkdir(parents=True, exist_ok=True)
            # one process's log at a time once it grows large: it is for reading after a failure, not keeping
            mode = "w" if path.exists() and path.stat().st_size > MAX_LOG_BYTES else "a"
            handle = _state["file"] = open(path, mode, encoding="utf-8", buffering=1)  # noqa: SIM115
            atexit.register(handle.close)
        handle.write(message)  # line-buffered: each whole line reaches the file as it ends
    except Exception:  # noqa: BLE001 - a log line is never worth a crash in C
        pass
