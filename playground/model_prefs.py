"""What the window remembers about model files, in its QSettings: each file's load settings (engine, context
size, CPU threads, GPU layers) and the files opened recently. The prefs are a file a person can edit: what is
read back is checked, and a value that is not one the engine takes is dropped (the engine's default then)."""

import json

from PySide6.QtCore import QSettings

BACKENDS = ("llama.cpp", "numpy")
MAX_RECENT = 10
_SETTINGS_KEY, _RECENT_KEY = "model_settings", "recent_models"


def checked_options(options: dict) -> dict:
    """The load options engine.load_model takes from a remembered entry: backend, context_length, threads,
    gpu_layers; anything else, or of the wrong kind, is left out (so the engine's default applies)."""
    checks = {
        "backend": lambda v: v in BACKENDS,
        "context_length": lambda v: _whole(v) and v >= 1,
        "threads": lambda v: _whole(v) and v >= 1,
        "gpu_layers": lambda v: _whole(v) and v >= -1,
    }
    return {key: value for key, value in options.items() if key in checks and checks[key](value)}


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class ModelPrefs:
    def __init__(self, prefs: QSettings):
        self.prefs = prefs

    def options(self, path: str) -> dict:
        """The load options remembered for this file ({} when none)."""
        entry = self._read(_SETTINGS_KEY, dict).get(path, {})
        return checked_options(entry) if isinstance(entry, dict) else {}

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
        try:
            value = json.loads(str(self.prefs.value(key, "")))
        except ValueError:
            return kind()
        return value if isinstance(value, kind) else kind()
