"""Reading what the window remembers (its QSettings) without trusting it. The prefs are a file a person can
edit, and another version of the app may have written it: a value the window cannot show starts from its
default, and a note says which preference was reset and why (the status bar shows the notes at start).

QSettings hands back whatever the file holds: a str, a list (an ini value with commas), bytes (@ByteArray),
None (@Invalid), any other variant. Only a str is read as text here."""

# The prompt remembered per model is cut to this many characters. The prompt box lays a long line out in one piece as
# the window starts, and that grows faster than the line: a start took 0.29 s with no prompt, 0.39 s with one line
# of 20,000 characters, 0.67 s with 50,000, 2.0 s with 100,000 (bench/prefs_start.py, medians), 295 s with 2 MB.
# 20,000 is more than the story model reads, and ~5,000 SmolLM2 tokens of English.
MAX_REMEMBERED_PROMPT = 20_000
SHOWN = 40  # characters of a bad value that a note quotes


class RememberedReader:
    """Reads preferences from `prefs`, each with the default it falls back to; `notes` gathers what was reset."""

    def __init__(self, prefs):
        self.prefs = prefs
        self.notes: list[str] = []

    def raw(self, key: str):
        """The stored value, or None when the key is absent (or QSettings cannot read it)."""
        try:
            return self.prefs.value(key, None)
        except (RuntimeError, TypeError, ValueError):  # a variant PySide cannot convert
            self.notes.append(f"{key}: unreadable")
            return None

    def text(self, key: str, default: str, label: str) -> str:
        """A str preference; anything else (or none) gives the default."""
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, str):
            self.reset(label, value, "not text")
            return default
        return value

    def choice(self, key: str, choices, default: str, label: str) -> str:
        """One of `choices` (str), else the default."""
        value = self.text(key, default, label)
        if value not in choices:
            self.reset(label, value, f"not one of {', '.join(map(str, choices))}")
            return default
        return value

    def index(self, key: str, count: int, label: str) -> int:
        """A whole number from 0 to count - 1 (stored as a number or as its digits), else 0."""
        value = self.raw(key)
        if value is None:
            return 0
        text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
        if text.isascii() and text.isdigit() and int(text) < count:
            return int(text)
        self.reset(label, value, f"not a number from 0 to {count - 1}")
        return 0

    def prompt(self, key: str, default: str) -> str:
        """The prompt remembered for a model, cut to MAX_REMEMBERED_PROMPT characters (with a note)."""
        text = self.text(key, default, "prompt")
        if len(text) > MAX_REMEMBERED_PROMPT:
            self.notes.append(f"the prompt was cut to its first {MAX_REMEMBERED_PROMPT:,} characters (a longer one "
                              "slows the window's start)")  # fmt: skip
            return text[:MAX_REMEMBERED_PROMPT]
        return text

    def reset(self, label: str, value, why: str) -> None:
        self.notes.append(f"{label} {quoted(value)} ({why})")


def prompt_to_remember(text: str) -> str:
    """What is stored of the prompt: one character past the cap is kept, so that the next start knows that it
    was cut and says so (RememberedReader.prompt)."""
    return text[: MAX_REMEMBERED_PROMPT + 1]


def quoted(value) -> str:
    """A value as a note quotes it: repr, cut to SHOWN characters."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a variant whose repr fails is still named
        text = f"<{type(value).__name__}>"
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def notes_text(notes: list[str]) -> str:
    """The status bar's message at start: which preferences start from their defaults, and why."""
    return "Preferences reset (the window cannot show them as remembered): " + "; ".join(notes) if notes else ""
