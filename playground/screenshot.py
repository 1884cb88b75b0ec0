"""Render the window offscreen after a real generation and save a PNG:

    python -m playground.screenshot docs/screenshot.png [smollm2] [1360x820]

The story model generates greedily (the defaults a newcomer sees) with a rule in place, then the step where
the model's own distribution is widest is selected: under greedy the chart shows the raw softmax with the
token taken in orange. Token boundaries show as alternating shades."""

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402


def render(path: Path, model_name: str | None = None, timeout_ms: int = 120000, size=(1360, 820)) -> Path:
    app = QApplication.instance() or QApplication([])
    import engine

    from .main_window import MainWindow

    prefs = QSettings(str(Path(tempfile.mkdtemp()) / "screenshot.ini"), QSettings.Format.IniFormat)
    window = MainWindow(model=engine.load_model(model_name) if model_name else None, settings=prefs)
    window.resize(*size)
    window.docks.reset_layout()  # the default layout, laid out for this size
    if model_name is None:
        window.controls.prompt.setPlainText("ben has a blue fan.")
        window.controls.set_settings({"temperature": 0.0, "seed": 0, "max_new_tokens": 60})
        window.rules_panel.add_rule(r"now \w+ has the", "choose", " blue| gold", regex=True)
        window.rules_panel.add_rule("Result:", "command", "python -m pytest -q tests/test_sum.py")
    else:
        window.controls.prompt.setPlainText("Write one sentence about the sea.")
        window.controls.set_settings({"temperature": 0.8, "top_k": 40, "top_p": 0.95, "seed": 3, "max_new_tokens": 40})
        window.rules_panel.add_rule(" sea", "insert", " (the Baltic)")
    window.show()
    done = {}

    def finished(_reason):
        view = window.token_view
        steps = view.steps()
        # the step with the widest choice: the most candidates above 5% in the model's own softmax
        widest = max(range(len(steps)), key=lambda i: sum(p > 0.05 for p in steps[i].candidates.raw))
        view.select(widest)
        window.controller.token_selected(widest)
        window.chart.flush()
        QTimer.singleShot(300, save)

    def save():
        window.chart.flush()
        path.parent.mkdir(parents=True, exist_ok=True)
        window.grab().save(str(path))
        done["ok"] = True
        window.close()

    window.controller.runFinished.connect(finished)
    QTimer.singleShot(300, window.controller.generate)
    QTimer.singleShot(timeout_ms, window.close)
    app.exec()
    if not done:
        raise RuntimeError("the window did not finish generating in time")
    return path


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshot.png")
    name = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "story" else None
    width, height = (int(n) for n in (sys.argv[3] if len(sys.argv) > 3 else "1360x820").split("x"))
    print(render(target, name, size=(width, height)))
