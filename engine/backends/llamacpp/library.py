"""llama_cpp, imported once: the backend initialised and llama.cpp's own log written to a file, never to the
user's terminal (the last error lines are kept to explain a failed load)."""

import collections
import ctypes
import importlib.util
import os
import threading
from pathlib import Path

INSTALL = 'pip install ".[llama]"'

_lock = threading.Lock()
_state: dict = {}
recent_errors: collections.deque = collections.deque(maxlen=8)  # llama.cpp's last warning and error lines


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


def _log(level: int, text: bytes, user_data) -> None:
    """llama.cpp's log callback (levels: 1 info, 2 warn, 3 error, 4 debug, 5 continues the last line):
    append to the log file, debug lines left out; never raise into C."""
    try:
        if level == 5:
            level = _state.get("level", 1)
        _state["level"] = level
        if level == 4:
            return
        message = text.decode("utf-8", errors="replace")
        if level in (2, 3) and message.strip():
            recent_errors.append(message.strip())
        path = log_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:  # opened per line: lines come at loads, not per token
            handle.write(message)
    except Exception:  # noqa: BLE001 - a log line is never worth a crash in C
        pass
