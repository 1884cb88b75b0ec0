"""File > Recent sessions: the last RECENT session files saved or opened, the latest first, kept in the window's
preferences (a list a person may have edited: read defensively, anything but a path left out)."""

import json
from pathlib import Path

RECENT = 10
KEY = "recentSessions"


class RecentSessions:
    def __init__(self, prefs):
        self.prefs = prefs

    def paths(self) -> list[Path]:
        """The remembered session files that are still there, the latest first."""
        return [path for path in self._read() if path.is_file()]

    def add(self, path: Path) -> None:
        path = Path(path).resolve()
        kept = [path] + [p for p in self._read() if p != path]
        self.prefs.setValue(KEY, json.dumps([str(p) for p in kept[:RECENT]]))

    def _read(self) -> list[Path]:
        text = self.prefs.value(KEY, "[]")
        try:
            items = json.loads(text) if isinstance(text, str) else []
        except (ValueError, RecursionError):
            items = []
        if not isinstance(items, list):
            return []
        return [Path(item) for item in items if isinstance(item, str) and item][:RECENT]
