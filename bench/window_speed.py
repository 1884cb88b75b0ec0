"""The real window, offscreen, generating story after story: tokens per second and the longest stall of
the GUI event loop, against the bare engine in the same run; and what appending a token to the view
costs at token 10 and at token 10,000.

    python bench/window_speed.py [--seconds 10]

Goal: no stall over 50 ms, and the window at least half the bare engine's tokens per second.
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QElapsedTimer, QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

import engine  # noqa: E402
from engine import stories  # noqa: E402


def prompts():
    _train, dev, _test = stories.split()
    return [stories.first_sentence(s) for s in dev]


def bare_engine(model, seconds):
    tokens, started, index = 0, time.perf_counter(), 0
    first = prompts()
    while time.perf_counter() - started < seconds:
        tokens += len(engine.generate(model, first[index % 60], temperature=1.0, seed=index).steps)
        index += 1
    return tokens / (time.perf_counter() - started)


def window_run(app, model, seconds):
    from playground import MainWindow

    prefs = QSettings(str(Path(tempfile.mkdtemp()) / "bench.ini"), QSettings.Format.IniFormat)
    window = MainWindow(model=model, settings=prefs)
    window.show()
    window.controls.temperature.setValue(1.0)
    first = prompts()
    state = {"index": 0, "stall": 0.0, "ticks": 0}
    beat = QElapsedTimer()
    heartbeat = QTimer()
    heartbeat.setInterval(10)

    def on_beat():
        elapsed = beat.restart()
        if state["ticks"] > 0:
            state["stall"] = max(state["stall"], elapsed)
        state["ticks"] += 1

    def next_story(_reason=None):
        if time.perf_counter() - started >= seconds:
            app.quit()
            return
        window.controls.prompt.setPlainText(first[state["index"] % 60])
        window.controls.seed.setValue(state["index"])
        state["index"] += 1
        window.controller.generate()

    heartbeat.timeout.connect(on_beat)
    window.controller.runFinished.connect(next_story)
    started = time.perf_counter()
    beat.start()
    heartbeat.start()
    QTimer.singleShot(0, next_story)
    app.exec()
    elapsed = time.perf_counter() - started
    window.close()
    return state, elapsed


def count_tokens(app, model, seconds):
    """Run the window and count every step the view received."""
    from playground.widgets import token_view

    received = {"n": 0}
    original = token_view.TokenView.append_steps

    def counting(self, steps):
        received["n"] += len(steps)
        return original(self, steps)

    token_view.TokenView.append_steps = counting
    try:
        state, elapsed = window_run(app, model, seconds)
    finally:
        token_view.TokenView.append_steps = original
    return received["n"] / elapsed, state["stall"], state["index"]


def append_cost(app, model, paragraphs: bool):
    """Milliseconds to append (and paint) a batch of 10 steps at token 10 and at token 10,000; story
    lines, or one long paragraph (every newline left out), as a real model may write."""
    from playground.widgets.token_view import TokenView

    steps = engine.Session(model, "mia has a red ball.", temperature=1.0).run()
    if not paragraphs:
        steps = [s for s in steps if s.token != "\n"]
    view = TokenView()
    view.resize(600, 600)
    view.show()
    view.show_session("mia has a red ball.", [])
    batches = []
    while view.step_count() < 10_000:
        batch = [steps[(view.step_count() + i) % len(steps)] for i in range(10)]
        started = time.perf_counter()
        view.append_steps(batch)
        app.processEvents()
        batches.append((time.perf_counter() - started) * 1000)
    view.close()
    return statistics.median(batches[:20]), statistics.median(batches[-20:]), view.step_count()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    model = engine.load_model()
    bare = bare_engine(model, args.seconds)
    rate, stall, stories_done = count_tokens(app, model, args.seconds)
    costs = {kind: append_cost(app, model, kind == "story lines") for kind in ("story lines", "one paragraph")}
    print(f"story after story for {args.seconds:g} s at T 1.0")
    print(f"  bare engine (engine.generate)  {bare:8.0f} tokens/s")
    print(f"  window (worker + view + chart) {rate:8.0f} tokens/s  = {rate / bare:.2f}x the bare engine "
          f"({stories_done} stories)")
    print(f"  longest GUI event-loop stall   {stall:8.0f} ms  (10 ms heartbeat; goal <= 50 ms)")
    for kind, (early, late, count) in costs.items():
        print(f"appending 10 tokens to the view ({kind}): {early:.2f} ms at token 10, {late:.2f} ms at token {count:,}")
    print("command: python bench/window_speed.py")


if __name__ == "__main__":
    main()
