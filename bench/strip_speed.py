"""The uncertainty strip with 10,000 points (issue 15's goal: it updates without an event-loop stall over
50 ms). The real window shows 10,000 steps; then batches of 5 more reach the token view (and through it the
strip) every 40 ms, as a generation's frames do, while a 10 ms heartbeat measures the event loop's longest
stall; each round also times one batch's update and paint directly.

    python bench/strip_speed.py [--rounds 3] [--batches 50]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from PySide6.QtCore import QEventLoop, QSettings, QTimer  # noqa: E402  (window_common set the platform)
from PySide6.QtWidgets import QApplication  # noqa: E402
from window_common import StallWatch  # the heartbeat the window bench uses

import engine  # noqa: E402

POINTS = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=50)
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    from playground import MainWindow

    model = engine.load_model()
    template = engine.generate(model, "mia has a red ball.", temperature=1.0, seed=1, max_new_tokens=60).steps
    steps = [template[i % len(template)] for i in range(POINTS + 5 * args.batches)]
    prefs = QSettings(str(Path(tempfile.mkdtemp()) / "bench.ini"), QSettings.Format.IniFormat)
    window = MainWindow(model=model, settings=prefs)
    window.show()
    view, strip = window.token_view, window.uncertainty_strip
    stalls, updates = [], []
    for _ in range(args.rounds):
        view.show_session("mia has a red ball.", steps[:POINTS])
        strip.flush()
        app.processEvents()
        watch = StallWatch()
        watch.start()
        for batch in range(args.batches):
            start = POINTS + 5 * batch
            began = time.perf_counter()
            view.append_steps(steps[start : start + 5])
            strip.flush()
            strip.repaint()
            updates.append((time.perf_counter() - began) * 1000)
            loop = QEventLoop()
            QTimer.singleShot(40, loop.quit)
            loop.exec()
        stalls.append(watch.stop())
    window.close()
    print(f"strip with {POINTS:,}+ points: one 5-step batch's update and paint {statistics.median(updates):.1f} ms "
          f"median, {max(updates):.1f} ms worst; longest event-loop stall {min(stalls)}-{max(stalls)} ms "
          "(goal 50 ms)")  # fmt: skip
    print(f"command: python bench/strip_speed.py --rounds {args.rounds} --batches {args.batches}")


if __name__ == "__main__":
    main()
