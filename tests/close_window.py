"""A child process: the app as `token-playground` runs it (playground.app.main), on SmolLM2 in llama.cpp or on the
story model, closed at one moment of its work. It prints "closing at T" (time.monotonic: one clock for every
process of the machine) just before the window's close(), so the parent measures closing up to the process's exit.

    python tests/close_window.py CASE [--model smollm2|story] [--threads N | --numpy] [--long]

CASE: idle (after a run, its prompt scored), scoring (0.1 s after the run ends: the worker is scoring the prompt),
reading (as the run begins: its first step reads the prompt), generating (after the first token), expanding, seeds, loading (SmolLM2 being loaded), comparing (a second model loading and reading the
text), compared (idle, a second model open). The app's settings, data and caches go to a new temporary folder
(or to $CLOSE_WINDOW_HOME).
"""

import argparse
import atexit
import os
import sys
import tempfile
import time

CASES = ("idle", "scoring", "reading", "generating", "expanding", "seeds", "loading", "comparing", "compared")
PROMPTS = {"smollm2": "Name a large animal.", "story": "mia has a red ball."}

parser = argparse.ArgumentParser()
parser.add_argument("case", choices=CASES)
parser.add_argument("--model", choices=tuple(PROMPTS), default="smollm2")
parser.add_argument("--threads", type=int, default=None, help="llama.cpp's threads (default: the app's own)")
parser.add_argument("--numpy", action="store_true", help="SmolLM2 on the numpy engine (one long forward: native)")
parser.add_argument("--long", action="store_true", help="a prompt of about 1,000 tokens: reading it takes seconds")
args = parser.parse_args()

home = os.environ.get("CLOSE_WINDOW_HOME") or tempfile.mkdtemp(prefix="close-window-")
for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "TOKEN_PLAYGROUND_CACHE"):
    os.environ[name] = os.path.join(home, name.lower())
os.environ["QT_QPA_PLATFORM"] = "offscreen"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from PySide6.QtCore import QObject, QTimer, Slot  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from playground.app import main  # noqa: E402
from playground.main_window import MainWindow  # noqa: E402


class Driver(QObject):
    """Drives the window, then closes it at the case's moment. A QObject of the GUI thread: the worker's signals
    reach its slots queued, so everything here runs on the GUI thread, as a person's clicks do."""

    def __init__(self):
        super().__init__()
        self.window, self.done = None, False

    def llama_options(self) -> dict:
        if args.numpy:
            return {"backend": "numpy"}
        return {"backend": "llama.cpp", **({} if args.threads is None else {"threads": args.threads})}

    @Slot()
    def start(self) -> None:
        self.window = next(w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow))
        controller = self.window.controller
        if args.model == "story":
            self.model_ready()
        elif args.case == "loading":
            controller.worker.models.loadProgress.connect(self.close_once)
            controller.models.open_model("smollm2", **self.llama_options())
        else:
            controller.modelChanged.connect(self.model_ready)
            controller.models.open_model("smollm2", **self.llama_options())

    @Slot(object)
    def model_ready(self, _model=None) -> None:
        window, case = self.window, args.case
        controller = window.controller
        long_text = " Say it again:" + " the quick brown fox jumps over the lazy dog." * 90 if args.long else ""
        window.controls.prompt.setPlainText(PROMPTS[args.model] + long_text)
        window.controls.max_tokens.setValue(40 if case == "generating" else 12)
        if case == "generating":
            controller.worker.stepped.connect(self.close_once)
        elif case == "reading":
            controller.worker.busyChanged.connect(self.close_when_busy)
        elif case == "scoring":  # the worker scores the prompt once the GUI has answered that it waits
            controller.worker.scoring.promptWaiting.connect(lambda _number: QTimer.singleShot(100, self.close_once))
        elif case == "idle":
            controller.scoring.promptScored.connect(self.close_once)
        else:
            then = {"expanding": self.expand, "seeds": self.seeds, "comparing": self.compare, "compared": self.compare}
            controller.scoring.promptScored.connect(then[case])  # once the first run is over
        controller.generate()

    @Slot(object)
    def expand(self, _result=None) -> None:
        self.window.controller.worker.busyChanged.connect(self.close_when_busy)  # as the expansion begins
        params = {**self.window.tree_panel.controls.expand_params(), "depth": 6, "budget": 2000}
        self.window.controller.branches.expand(0, params)

    @Slot(object)
    def seeds(self, _result=None) -> None:
        self.window.controls.temperature.setValue(1.0)  # seeds that differ: many branches to walk
        self.window.controller.seeding.run_seeds(64)
        QTimer.singleShot(300, self.close_once)  # 64 seeds of 12 tokens run for seconds: close while they do

    @Slot(object)
    def compare(self, _result=None) -> None:
        comparing = self.window.controller.comparing
        if args.case == "comparing":
            QTimer.singleShot(200, self.close_once)
        else:
            comparing.shown.connect(self.close_once)
        comparing.compare_with({"source": "smollm2", **self.llama_options()})

    @Slot(bool)
    def close_when_busy(self, busy: bool) -> None:
        if busy:
            self.close_once()

    @Slot()
    @Slot(int, int)
    @Slot(object)
    def close_once(self, *_args) -> None:
        if not self.done:
            self.done = True
            print(f"closing at {time.monotonic():.6f}", flush=True)
            self.window.close()


if __name__ == "__main__":
    atexit.register(print, "ended normally", flush=True)  # not printed where closing's last resort ended it (os._exit)
    QApplication(sys.argv[:1])  # main() takes this one
    driver = Driver()
    QTimer.singleShot(0, driver.start)
    sys.exit(main())
