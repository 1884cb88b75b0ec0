"""Render the window offscreen after a real generation and save a PNG:

    python -m playground.screenshot OUT.png [story|smollm2] [1360x820] [--view tree|inside|compare] [--backend numpy]

The story model writes greedily with rules in place, and the step where its distribution is widest is selected.
A view is then taken as a person would, through the window's menus, docks and buttons: tree (the text written
again up to that step, the tree expanded there under the raw model), inside (the Inside dock at the selected
token; a GGUF file: --backend numpy), compare (File > Compare with a second model: the first SmolLM2 line the
picker offers that is not the model in use)."""

import argparse
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QBuffer, QEventLoop, QSettings, Qt, QTimer  # noqa: E402
from PySide6.QtGui import QAction  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

import engine  # noqa: E402

from .documents.autosave import DATA_ENV  # noqa: E402
from .main_window import MainWindow  # noqa: E402

STORY, STORY_COLOUR = "story model", " blue"  # the picture's first colour, which the story writes again
STORY_HEAD = (0, 3)  # the head that copies it, 0-based (docs/inside.md: "layer 1 head 4")


def wait_for(ready, what: str, timeout_s: float) -> None:
    """Run the event loop until ready() (the worker's answers arrive as queued signals)."""
    end = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > end:
            raise RuntimeError(f"the window did not {what} in {timeout_s:.0f} s")
        QApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        time.sleep(0.01)  # the GIL free for the worker (QTest.qWait keeps it: a model in Python runs 6x slower)


def pause(ms: int) -> None:
    """Let the window lay out and paint, and the worker run, for ms milliseconds."""
    end = time.monotonic() + ms / 1000
    wait_for(lambda: time.monotonic() > end, "pause", ms)


def wait_signal(signal, start, what: str, timeout_s: float):
    """start(), then wait for signal."""
    got = []
    signal.connect(lambda *args: got.append(args))
    start()
    wait_for(lambda: got, what, timeout_s)


def set_up(window, model_name: str | None) -> None:
    """The prompt, settings and rules of the picture."""
    if model_name is None:
        window.controls.prompt.setPlainText("ben has a blue fan.")
        window.controls.set_settings({"temperature": 0.0, "seed": 0, "max_new_tokens": 60})
        window.rules_panel.add_rule(r"now \w+ has the", "choose", " blue| gold", regex=True)
        window.rules_panel.add_rule("Result:", "command", "python -m pytest -q tests/test_sum.py")
    else:
        window.controls.prompt.setPlainText("Write one sentence about the sea.")
        window.controls.set_settings({"temperature": 0.8, "top_k": 40, "top_p": 0.95, "seed": 3, "max_new_tokens": 40})
        window.rules_panel.add_rule(" sea", "insert", " (the Baltic)")


def widest_step(window) -> int:
    """The step with the widest choice: the most candidates above 5% in the model's own softmax."""
    steps = window.token_view.steps()
    return max(range(len(steps)), key=lambda i: sum(p > 0.05 for p in steps[i].candidates.raw))


def enlarge(window, panel, beside: str = "stripDock", width_share: float = 0.5) -> None:
    """Bring the panel's dock in front and give it the room under the text that the controls leave (they keep
    their height) and width_share of the width, the dock beside it the rest, as a person drags the edges."""
    window.show_panel(panel)
    dock, other = window.docks.dock(panel), window.docks.by_name[beside]
    width, room = window.width(), window.height() - window.controls.sizeHint().height() - 3 * window.menuBar().height()
    window.resizeDocks([dock], [room], Qt.Orientation.Vertical)
    window.resizeDocks([other, dock], [width // 6, int(width * width_share)], Qt.Orientation.Horizontal)


def take_tree(window, timeout_s: float) -> None:
    """The text again up to its widest choice, the tree expanded there under the raw model, a branch walked into."""
    window.controls.max_tokens.setValue(widest_step(window))
    window.controls.reset.click()
    wait_signal(window.controller.runFinished, window.controller.generate, "write it again", timeout_s)
    panel, controls = window.tree_panel, window.tree_panel.controls
    enlarge(window, panel)
    controls.top_k.setValue(0)  # (off) as many children as cover 99% of the raw model's probability
    controls.coverage.setValue(0.99)
    controls.depth.setValue(10)
    controls.raw.setChecked(True)
    wait_signal(window.controller.branches.expanded, controls.expand_button.click, "expand", timeout_s)
    wait_for(lambda: not window.controller.running, "finish expanding", timeout_s)
    panel.tree.expandAll()
    pause(300)
    second = panel.tree.topLevelItem(0).child(0).child(1)  # (prompt) > the text so far > its second branch
    at = panel.tree.visualItemRect(second).center()
    click = lambda: QTest.mouseClick(panel.tree.viewport(), Qt.MouseButton.LeftButton, pos=at)  # noqa: E731
    wait_signal(window.controller.idle, click, "walk into a branch", timeout_s)


def take_inside(window, timeout_s: float) -> None:
    """The Inside dock at the selected token, over the chart (its whole height) where the text keeps its room, else
    under the text; on the story model, the head that copies the colour where it writes the colour again."""
    if not window.model.capabilities.inside:
        raise ValueError(f"{window.model.name} on this engine has no layers to show: use --backend numpy")
    panel, dock = window.inside_panel, window.docks.by_name["insideDock"]
    if window.model.name == STORY:
        window.token_view.click_step(max(i for i, s in enumerate(window.token_view.steps()) if s.token == STORY_COLOUR))
    beside_text = window.centralWidget().minimumSizeHint().width() + dock.minimumSizeHint().width()
    if over_chart := beside_text < window.width() * 0.95:  # as a person drags it onto the chart's tab
        window.tabifyDockWidget(window.docks.by_name["chartDock"], dock)
        window.resizeDocks([dock], [window.width() * 9 // 20], Qt.Orientation.Horizontal)
    show = (lambda: window.show_panel(panel)) if over_chart else (lambda: enlarge(window, panel))
    wait_signal(window.controller.inside.shown, show, "look inside", timeout_s)
    layer, head = STORY_HEAD if window.model.name == STORY else (panel.layer_combo.count() // 2, 0)
    panel.layer_combo.setCurrentIndex(layer)
    panel.head_combo.setCurrentIndex(head + 1)  # (0 is the mean of the heads)
    pause(300)
    attention = panel.split.widget(1).minimumSizeHint().height()  # the splitter's handle dragged up to it
    panel.split.setSizes([max(sum(panel.split.sizes()) - attention, 120), attention])


def take_compare(window, timeout_s: float) -> None:
    picker = window.controller.picker
    wait_for(lambda: second_model(picker) is not None, "find SmolLM2 among the models", timeout_s)

    def choose() -> None:  # in the dialog's own event loop, once it is open: that line, then OK
        QApplication.activeModalWidget().setTextValue(second_model(picker))
        QApplication.activeModalWidget().accept()

    QTimer.singleShot(0, choose)
    compare = window.findChild(QAction, "compareModelAction").trigger
    wait_signal(window.controller.comparing.shown, compare, "compare", timeout_s)
    window.tabifyDockWidget(window.docks.by_name["rulesDock"], window.docks.dock(window.comparison_panel))
    enlarge(window, window.comparison_panel, width_share=0.55)


def second_model(picker) -> str | None:
    """The first SmolLM2 line of the picker that is not the model in use."""
    others = [e for e in picker.entries if (e.source, e.backend) != picker.current]
    return next((e.label for e in others if "smollm2" in e.label.lower()), None)


TAKE = {"tree": take_tree, "inside": take_inside, "compare": take_compare}
VIEWS = ("default", *TAKE)


def render(path: Path, model_name: str | None = None, timeout_s: float = 120, size=(1360, 820),
           view: str = "default", backend: str | None = None) -> Path:  # fmt: skip
    if view not in VIEWS:
        raise ValueError(f"view {view!r} is not one of {', '.join(VIEWS)}")
    app = QApplication.instance() or QApplication([])
    with fresh_window_data():
        return _render(app, path, model_name, timeout_s, size, view, backend)


@contextmanager
def fresh_window_data():
    """A picture of a fresh window: its data dir (autosave, running marker) in a folder of its own, as its preferences
    are (_render), so a person's own session is neither offered in the picture nor marked as taken by it."""
    before = os.environ.get(DATA_ENV)
    os.environ[DATA_ENV] = tempfile.mkdtemp(prefix="screenshot-data-")
    try:
        yield
    finally:
        if before is None:
            del os.environ[DATA_ENV]
        else:
            os.environ[DATA_ENV] = before


def _render(app, path: Path, model_name, timeout_s: float, size, view: str, backend) -> Path:
    prefs = QSettings(str(Path(tempfile.mkdtemp()) / "screenshot.ini"), QSettings.Format.IniFormat)
    window = MainWindow(model=engine.load_model(model_name, backend=backend) if model_name else None, settings=prefs)
    try:
        window.resize(*size)
        window.docks.reset_layout()  # the default layout, laid out for this size
        set_up(window, model_name)
        window.show()
        pause(300)
        wait_signal(window.controller.runFinished, window.controller.generate, "finish generating", timeout_s)
        window.token_view.click_step(widest_step(window))
        if view != "default":
            TAKE[view](window, timeout_s)
        pause(500)
        window.chart.flush()
        png = QBuffer()
        if not window.grab().save(png, "PNG"):
            raise OSError(f"could not make the picture for {path}")
        path.parent.mkdir(parents=True, exist_ok=True)
        engine.atomic_write_bytes(path, png.data().data())
    finally:
        window.close()
        app.processEvents()
    return path


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m playground.screenshot", description=__doc__.split("\n")[0])
    parser.add_argument("path", nargs="?", default="docs/screenshot.png", type=Path)
    parser.add_argument("model", nargs="?", default="story", help="story or smollm2 (or any engine.load_model name)")
    parser.add_argument("size", nargs="?", default="1360x820", help="WIDTHxHEIGHT")
    parser.add_argument("--view", choices=VIEWS, default="default")
    parser.add_argument("--backend", choices=("numpy", "llama.cpp"), help="what runs a GGUF model (default: llama.cpp)")
    args = parser.parse_args(argv)
    width, _, height = args.size.lower().partition("x")
    if not (width.isdigit() and height.isdigit()):
        parser.error(f"size {args.size!r} is not WIDTHxHEIGHT, e.g. 1360x820")
    model = None if args.model == "story" else args.model
    return render(args.path, model, size=(int(width), int(height)), view=args.view, backend=args.backend)


if __name__ == "__main__":
    print(main())
