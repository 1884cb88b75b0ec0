"""How long the window takes to start with a long remembered prompt: MainWindow on the story model, from its
construction until it is shown and its first events are handled, with the prompt remembered as (1) nothing, the
story model's example, (2) the largest that is remembered (MAX_REMEMBERED_PROMPT characters) as lines of text,
(3) the same as one line without a break (the prompt box lays a long line out in one piece: the worst case).
--beyond also starts with what the cap now cuts, as if it were not cut (the prompt set after the start: what a
start cost before the cap): one line of 50,000 and 100,000 characters.

    python bench/prefs_start.py [--rounds 5] [--beyond]

Goal: a start within ~0.3 s of an empty prompt's, under ~1 s on this project's 2-core machine.
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TOKEN_PLAYGROUND_DATA", tempfile.mkdtemp())  # no autosave of the user's is touched

from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

import engine  # noqa: E402
from playground import MainWindow  # noqa: E402
from playground.remembered import MAX_REMEMBERED_PROMPT  # noqa: E402


def start_seconds(app, model, prompt: str | None, after: str | None = None) -> float:
    """Seconds from MainWindow() to the window shown with its events handled; after: a prompt set once started
    (timed with the start: the cost a remembered prompt of that size had before the cap)."""
    prefs = QSettings(str(Path(tempfile.mkdtemp()) / "prefs.ini"), QSettings.Format.IniFormat)
    if prompt is not None:
        prefs.setValue(f"prompt/{model.name}", prompt)
    started = time.perf_counter()
    window = MainWindow(model=model, settings=prefs)
    if after is not None:
        window.controls.prompt.setPlainText(after)
    window.show()
    app.processEvents()
    seconds = time.perf_counter() - started
    window.close()
    window.deleteLater()
    app.processEvents()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--beyond", action="store_true", help="also time prompts the cap now cuts (slow)")
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    model = engine.load_model()
    lines = "Once upon a time there was a cat who liked to sit in the sun.\n" * (MAX_REMEMBERED_PROMPT // 60 + 1)
    cases = {
        "no prompt remembered (the example)": (None, None),
        f"{MAX_REMEMBERED_PROMPT:,} characters in lines": (lines[:MAX_REMEMBERED_PROMPT], None),
        f"{MAX_REMEMBERED_PROMPT:,} characters, one line": ("a" * MAX_REMEMBERED_PROMPT, None),
        "2 MB remembered, one line (cut to the cap)": ("a" * 2_000_000, None),
    }
    if args.beyond:
        cases.update({f"{n:,} characters, one line, not cut": (None, "a" * n) for n in (50_000, 100_000)})
    start_seconds(app, model, None)  # the first window pays for imports and caches
    print(f"window start (s), {args.rounds} rounds: median (min-max)")
    for label, (prompt, after) in cases.items():
        times = [start_seconds(app, model, prompt, after) for _ in range(args.rounds)]
        print(f"  {label:48s} {statistics.median(times):.2f} ({min(times):.2f}-{max(times):.2f})", flush=True)


if __name__ == "__main__":
    main()
