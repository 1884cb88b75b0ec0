"""What the window remembers about model files, in its QSettings: each file's load settings (engine, context
size, CPU threads, GPU layers) and the files opened recently. The prefs are a file a person can edit: what is
read back is checked, and a value that is not one the engine takes is dropped (the engine's default then)."""

import json

from PySide6.QtCore import QSettings

from engine import check_threads

from ..remembered import quoted

BACKENDS = ("llama.cpp", "numpy")
MAX_RECENT = 10
_SETTINGS_KEY, _RECENT_KEY = "model_settings", "recent_models"


def checked_options(options: dict) -> dict:
    """The load options engine.load_model takes from a remembered entry: backend, context_length, threads,
    gpu_layers; anything else, or of the wrong kind, is left out (so the engine's default applies)."""
    return {key: value for key, value in options.items() if key in _CHECKS and _problem(key, value) is None}


def refused_options(options: dict) -> list[str]:
    """What checked_options leaves out of the options it knows, and why ("CPU threads 100000 (threads must...)")."""
    return [f"{_LABELS[key]} {quoted(value)} ({_problem(key, value)})" for key, value in options.items()
            if key in _CHECKS and _problem(key, value) is not None]  # fmt: skip


def _problem(key: str, value) -> str | None:
    try:
        _CHECKS[key](value)
    except ValueError as error:
        return str(error)
    return None


def _check(test, allowed: str):
    def check(value) -> None:
        if not test(value):
            raise ValueError(f"not {allowed}")

    return check


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_CHECKS = {
    "backend": _check(lambda v: v in BACKENDS, f"one of {', '.join(BACKENDS)}"),
    "context_length": _check(lambda v: _whole(v) and v >= 1, "a whole number of at least 1"),
    "threads": check_threads,  # the engine's own limits: 1 to the CPUs (more crashed llama.cpp)
    "gpu_layers": _check(lambda v: _whole(v) and v >= -1, "a whole number of at least -1"),
}
_LABELS = {"backend": "engine", "context_length": "context size", "threads": "CPU threads", "gpu_layers": "GPU layers"}


class ModelPrefs:
    def __init__(self, prefs: QSettings):
        self.prefs = prefs

    def options(self, path: str) -> dict:
        """The load options remembered for this file ({} when none)."""
        return checked_options(self._entry(path))

    def refused(self, path: str, backend: str) -> list[str]:
        """The options remembered for this file that the engine would refuse with this backend (options() leaves
        them out; the backend asked for is used, and threads and GPU layers are llama.cpp's alone)."""
        used = ("context_length", "threads", "gpu_layers") if backend == "llama.cpp" else ("context_length",)
        entry = {key: value for key, value in self._entry(path).items() if key in used}
        return refused_options(entry)

    def _entry(self, path: str) -> dict:
        entry = self._read(_SETTINGS_KEY, dict).get(path, {})
        return entry if isinstance(entry, dict) else {}

    def remember(self, path: str, options: dict) -> None:
        """Remember these load options for this file (None values: the engine's defaults)."""
        table = self._read(_SETTINGS_KEY, dict)
        table[path] = checked_options({k: v for k, v in options.items() if v is not None})
        self.prefs.setValue(_SETTINGS_KEY, json.dumps(table))

    def recent(self) -> list[str]:
        """Files opened lately, the latest first."""
        return [path for path in self._read(_RECENT_KEY, list) if isinstance(path, str)][:MAX_RECENT]

    def opened(self, path: str) -> None:
        recent = [path, *(other for other in self.recent() if other != path)][:MAX_RECENT]
        self.prefs.setValue(_RECENT_KEY, json.dumps(recent))

    def _read(self, key: str, kind: type):
        text = self.prefs.value(key, "")
        try:
            value = json.loads(text) if isinstance(text, str) else None  # a list (an ini value with commas): none
        except (ValueError, RecursionError):
            return kind()
        return value if isinstance(value, kind) else kind()
