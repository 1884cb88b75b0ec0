"""The real window, offscreen, generating story after story: tokens per second and the longest stall of
the GUI event loop, against the bare engine in the same run; what appending a token to the view costs at
token 10 and at token 10,000; and, with SmolLM2 installed, 48 greedy tokens after a chat prompt in the
window against a bare engine.Session in the same process, on the same model (the numpy engine, or llama.cpp
in process with --backend llama.cpp and its --threads), with the longest event-loop stall meanwhile.

    python bench/window_speed.py [--seconds 10] [--rounds 4] [--no-smollm2]
    python bench/window_speed.py --backend llama.cpp [--threads 1] [--only-smollm2] [--rounds 6] [--tokens 48]

Goals: no stall over 50 ms; the window at least half the bare engine's tokens per second on the story
model, at least 0.7x the bare Session's on SmolLM2 with numpy, 0.6x with llama.cpp.
"""

import argparse
import gc
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QElapsedTimer, QEventLoop, QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

import engine  # noqa: E402
from engine.story import corpus as stories  # noqa: E402


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


class StallWatch:
    """The GUI event loop's longest stall: the longest gap (ms) between two beats of a 10 ms timer, from
    its first beat after start() to stop(); any event loop running on this thread keeps it beating."""

    def __init__(self, interval_ms: int = 10):
        self.clock = QElapsedTimer()
        self.timer = QTimer()
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self._beat)
        self.longest, self.beats = 0, 0

    def start(self) -> None:
        self.longest, self.beats = 0, 0
        self.clock.start()
        self.timer.start()

    def stop(self) -> int:
        self.timer.stop()
        return self.longest

    def _beat(self) -> None:
        elapsed = self.clock.restart()
        if self.beats > 0:
            self.longest = max(self.longest, elapsed)
        self.beats += 1


def window_run(app, model, seconds):
    from playground import MainWindow

    prefs = QSettings(str(Path(tempfile.mkdtemp()) / "bench.ini"), QSettings.Format.IniFormat)
    window = MainWindow(model=model, settings=prefs)
    window.show()
    window.controls.temperature.setValue(1.0)
    first = prompts()
    state = {"index": 0, "stall": 0.0}
    watch = StallWatch()

    def next_story(_reason=None):
        if time.perf_counter() - started >= seconds:
            app.quit()
            return
        window.controls.prompt.setPlainText(first[state["index"] % 60])
        window.controls.seed.setValue(state["index"])
        state["index"] += 1
        window.controller.generate()

    window.controller.runFinished.connect(next_story)
    started = time.perf_counter()
    watch.start()
    QTimer.singleShot(0, next_story)
    app.exec()
    elapsed = time.perf_counter() - started
    state["stall"] = watch.stop()
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


SMOLLM2_PROMPT = "The history of computing is a story of"  # with Chat format on
SMOLLM2_TOKENS = 48  # --tokens
GOALS = {"numpy": 0.7, "llama.cpp": 0.6}  # the window's tokens/s over the bare Session's, at least
PRESS_MS = 25  # Generate is pressed this long after the stall watch starts: its own GUI work is watched too


def smollm2_bare(model, tokens) -> tuple[float, float, float]:
    """(tokens/s from the start of the session to its last token, seconds to the first token, tokens/s
    after the first token)."""
    gc.collect()  # both sides start from the same heap
    started = time.perf_counter()
    session = engine.Session(model, model.chat_prompt(SMOLLM2_PROMPT), max_new_tokens=tokens)
    session.step()
    first = time.perf_counter() - started
    taken = 1 + len(session.run())
    whole = time.perf_counter() - started
    return taken / whole, first, (taken - 1) / (whole - first)


def smollm2_window(window) -> tuple[float, float, float, int]:
    """The same in the window: from pressing Generate to the finished signal, the view's tokens counted;
    and the longest event-loop stall (ms) from just before the press to the end. A local event loop waits for
    it (the application's quit() would end the worker thread's loop too)."""
    gc.collect()
    controller, view = window.controller, window.token_view
    times, loop, watch = {}, QEventLoop(), StallWatch()

    def on_step(_step):
        times.setdefault("first", time.perf_counter())

    def on_finished(_reason):
        times["end"] = time.perf_counter()
        loop.quit()

    controller.reset()  # a new session each time (Generate would carry on the stopped one)
    QApplication.processEvents()

    def press():
        times["start"] = time.perf_counter()
        controller.generate()

    controller.worker.stepped.connect(on_step)
    controller.runFinished.connect(on_finished)
    watch.start()
    QTimer.singleShot(PRESS_MS, press)
    loop.exec()
    stall = watch.stop()
    controller.worker.stepped.disconnect(on_step)
    controller.runFinished.disconnect(on_finished)
    count, whole, first = view.step_count(), times["end"] - times["start"], times["first"] - times["start"]
    return count / whole, first, (count - 1) / (whole - first), stall


def load_smollm2(backend: str, threads: int):
    if backend == "llama.cpp":
        return engine.load_model("smollm2", backend="llama.cpp", threads=threads)
    return engine.load_model("smollm2", backend="numpy")


def smollm2_case(rounds: int, backend: str = "numpy", threads: int = 1, tokens: int = SMOLLM2_TOKENS):
    """Window and bare Session alternate on one model (same file, same threads), after one warm-up of each
    (the first pass touches every page). The window is built on the model itself, not through the picker."""
    from playground import MainWindow

    model = load_smollm2(backend, threads)
    prefs = QSettings(str(Path(tempfile.mkdtemp()) / "bench.ini"), QSettings.Format.IniFormat)
    window = MainWindow(model=model, settings=prefs)
    window.show()
    controls = window.controls
    controls.chat_format.setChecked(True)
    controls.prompt.setPlainText(SMOLLM2_PROMPT)
    controls.temperature.setValue(0.0)
    controls.max_tokens.setValue(tokens)
    QApplication.processEvents()
    smollm2_bare(model, tokens), smollm2_window(window)
    results = [(smollm2_bare(model, tokens), smollm2_window(window)) for _ in range(rounds)]
    window.close()
    model.close()
    return results


def span(values, fmt="{:.1f}"):
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}-{high}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=4, help="SmolLM2: window and bare Session runs each")
    parser.add_argument("--no-smollm2", action="store_true")
    parser.add_argument("--only-smollm2", action="store_true", help="skip the story model's measurements")
    parser.add_argument("--backend", choices=tuple(GOALS), default="numpy", help="what runs SmolLM2")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp's threads (2 spin on a 2-core machine)")
    parser.add_argument("--tokens", type=int, default=SMOLLM2_TOKENS, help="SmolLM2: greedy tokens per run")
    args = parser.parse_args()
    if args.backend != "llama.cpp" and args.threads != 1:
        parser.error("--threads is a setting of --backend llama.cpp")
    app = QApplication.instance() or QApplication([])
    if not args.only_smollm2:
        story_case(app, args.seconds)
    if not args.no_smollm2 and engine.smollm2_path() is not None:
        report_smollm2(args)
    command = "python bench/window_speed.py"
    if args.only_smollm2:
        command += " --only-smollm2"
    else:
        command += f" --seconds {args.seconds:g}"
    command += " --no-smollm2" if args.no_smollm2 else f" --rounds {args.rounds}"
    if args.backend != "numpy":
        command += f" --backend {args.backend} --threads {args.threads}"
    if args.tokens != SMOLLM2_TOKENS:
        command += f" --tokens {args.tokens}"
    print(f"command: {command}")


def story_case(app, seconds):
    model = engine.load_model()
    bare = bare_engine(model, seconds)
    rate, stall, stories_done = count_tokens(app, model, seconds)
    costs = {kind: append_cost(app, model, kind == "story lines") for kind in ("story lines", "one paragraph")}
    print(f"story after story for {seconds:g} s at T 1.0")
    print(f"  bare engine (engine.generate)  {bare:8.0f} tokens/s")
    print(
        f"  window (worker + view + chart) {rate:8.0f} tokens/s  = {rate / bare:.2f}x the bare engine "
        f"({stories_done} stories)"
    )
    print(f"  longest GUI event-loop stall   {stall:8.0f} ms  (10 ms heartbeat; goal <= 50 ms)")
    for kind, (early, late, count) in costs.items():
        print(f"appending 10 tokens to the view ({kind}): {early:.2f} ms at token 10, {late:.2f} ms at token {count:,}")


def report_smollm2(args):
    results = smollm2_case(args.rounds, args.backend, args.threads, args.tokens)
    bare_rates, bare_firsts = [b[0] for b, _ in results], [b[1] for b, _ in results]
    window_rates, window_firsts = [w[0] for _, w in results], [w[1] for _, w in results]
    ratios = [w[0] / b[0] for b, w in results]
    bare_decodes, window_decodes = [b[2] for b, _ in results], [w[2] for _, w in results]
    decode_ratios = [w[2] / b[2] for b, w in results]
    stalls = [w[3] for _, w in results]
    backend = args.backend
    if backend == "llama.cpp":
        backend += f", {args.threads} thread{'s' * (args.threads > 1)}"
    print(f"SmolLM2-135M-Instruct ({backend}), {args.tokens} greedy tokens after {SMOLLM2_PROMPT!r} "
          f"(Chat format), {args.rounds} rounds (ranges), first token included:")  # fmt: skip
    for name, rates, firsts, decodes in (("bare engine.Session", bare_rates, bare_firsts, bare_decodes),
                                         ("window (worker + view + chart)", window_rates, window_firsts,
                                          window_decodes)):  # fmt: skip
        print(f"  {name:30s} {span(rates):>9s} tokens/s  first token {span(firsts, '{:.2f}')} s  "
              f"after it {span(decodes)} tokens/s")  # fmt: skip
    print(f"  window / bare Session, each round: {span(ratios, '{:.2f}')}x (goal >= {GOALS[args.backend]}x); "
          f"after the first token {span(decode_ratios, '{:.2f}')}x")  # fmt: skip
    print(f"  longest GUI event-loop stall in the window, each round: {span(stalls, '{:.0f}')} ms "
          "(10 ms heartbeat; goal <= 50 ms)")  # fmt: skip


if __name__ == "__main__":
    main()
