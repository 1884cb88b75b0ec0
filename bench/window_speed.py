"""The real window, offscreen, against a bare engine.Session in the same process, side by side in one run:
rounds that alternate the two sides (the machine is shared: each round's 1-minute load average is printed beside
it, and only ratios from the same round are compared).

- The story model, story after story at T 1.0 (the window's own settings on both sides, one seed per story):
  tokens/s for --seconds per side and round, the longest stall of the GUI event loop, and the GUI thread's CPU
  time per token (the Python it runs takes the GIL from the worker); then what appending a token to the view
  costs at token 10 and at token 10,000.
- SmolLM2 (installed), --tokens greedy tokens after a chat prompt, on llama.cpp in process (--threads) or the
  numpy engine (--backend numpy): tokens/s from Generate to the last token, after the first token, and the same
  stall and GUI CPU per token.

    python bench/window_speed.py [--rounds 4] [--seconds 4] [--tokens 48] [--backend llama.cpp|numpy] [--threads 1]
                                 [--no-smollm2 | --only-smollm2] [--no-append]

Goals (issue 30): the window >= 0.8x the bare Session's tokens/s on the story model, >= 0.95x on SmolLM2 with
llama.cpp (0.7x with numpy); no stall over 50 ms.
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

STORY_GOAL = 0.8  # the window's tokens/s over the bare Session's on the story model, at least
DRAIN_MS = 300  # after a window round: the last story's prompt scoring and autosave end before the bare side runs


def prompts():
    _train, dev, _test = stories.split()
    return [stories.first_sentence(s) for s in dev]


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


def load_text() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def new_window(model):
    from playground import MainWindow

    prefs = QSettings(str(Path(tempfile.mkdtemp()) / "bench.ini"), QSettings.Format.IniFormat)
    window = MainWindow(model=model, settings=prefs)
    window.show()
    return window


def wait_ms(ms: int) -> None:
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def bare_stories(model, settings: dict, seconds: float, first: int) -> float:
    """Tokens/s of bare Sessions, story after story from prompt `first` on (seed = its index), as the window runs
    them (streaming steps, the window's settings)."""
    texts, tokens, index = prompts(), 0, first
    gc.collect()
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        session = engine.Session(model, texts[index % len(texts)], **{**settings, "seed": index})
        tokens += len(session.run(stream=True))
        index += 1
    return tokens / (time.perf_counter() - started)


def window_stories(window, seconds: float, first: int) -> tuple[float, int, int, float]:
    """The same in the window, each next story sent as the last one ends (runFinished) -> (tokens/s counted as
    the view takes them, the longest event-loop stall in ms, stories, GUI thread CPU ms per token). A local event
    loop waits (the application's quit() would end the worker thread's loop too)."""
    controller, controls, view, texts = window.controller, window.controls, window.token_view, prompts()
    loop, watch, state = QEventLoop(), StallWatch(), {"index": first, "tokens": 0}
    take = view.append_steps

    def counting(steps):
        state["tokens"] += len(steps)
        return take(steps)

    def next_story(_reason=None):
        if time.perf_counter() - started >= seconds:
            loop.quit()
            return
        controls.prompt.setPlainText(texts[state["index"] % len(texts)])
        controls.seed.setValue(state["index"])
        state["index"] += 1
        controller.generate()

    view.append_steps = counting  # the feed calls it once a frame with the steps it brings
    controller.runFinished.connect(next_story)
    gc.collect()
    cpu, started = time.thread_time(), time.perf_counter()
    watch.start()
    QTimer.singleShot(0, next_story)
    loop.exec()
    elapsed, cpu = time.perf_counter() - started, time.thread_time() - cpu
    stall = watch.stop()
    controller.runFinished.disconnect(next_story)
    del view.append_steps
    wait_ms(DRAIN_MS)
    tokens = max(state["tokens"], 1)
    return tokens / elapsed, stall, state["index"] - first, 1000 * cpu / tokens


def story_case(app, rounds: int, seconds: float, append: bool) -> None:
    model = engine.load_model()
    window = new_window(model)
    window.controls.temperature.setValue(1.0)
    QApplication.processEvents()
    settings = window.controls.settings()
    bare_stories(model, settings, 0.5, 0), window_stories(window, 0.5, 0)  # warm-up: both sides once
    print(f"story model, story after story at T 1.0 (the window's settings, a seed per story), {rounds} rounds of "
          f"{seconds:g} s a side; the machine is shared ({os.cpu_count()} cores), its load beside each round:")  # fmt: skip
    print("  round  bare Session  window        window/bare  stories  stall  GUI CPU/token  load")
    ratios, stalls, cpus = [], [], []
    for round_index in range(rounds):
        load = load_text()
        first = 1000 * round_index  # both sides of a round: the same stories
        bare = bare_stories(model, settings, seconds, first)
        rate, stall, count, cpu = window_stories(window, seconds, first)
        ratios.append(rate / bare), stalls.append(stall), cpus.append(cpu)
        print(f"  {round_index + 1:5d}  {bare:7.0f} tok/s  {rate:7.0f} tok/s  {rate / bare:10.2f}x  {count:7d}  "
              f"{stall:3.0f} ms  {cpu:8.2f} ms     {load}")  # fmt: skip
    print(f"  window / bare Session: {span(ratios, '{:.2f}')}x (median {statistics.median(ratios):.2f}; goal >= "
          f"{STORY_GOAL}x); longest stall {span(stalls, '{:.0f}')} ms (goal <= 50 ms); GUI thread CPU "
          f"{span(cpus, '{:.2f}')} ms per token")  # fmt: skip
    window.close()
    if append:
        for kind in ("story lines", "one paragraph"):
            early, late, count = append_cost(app, model, kind == "story lines")
            print(f"appending 10 tokens to the view ({kind}): {early:.2f} ms at token 10, {late:.2f} ms at token "
                  f"{count:,}")  # fmt: skip


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
GOALS = {"numpy": 0.7, "llama.cpp": 0.95}  # the window's tokens/s over the bare Session's, at least
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


def smollm2_window(window) -> tuple[float, float, float, int, float]:
    """The same in the window: from pressing Generate to the finished signal, the view's tokens counted;
    the longest event-loop stall (ms) from just before the press to the end; the GUI thread's CPU ms per token.
    A local event loop waits for it (the application's quit() would end the worker thread's loop too)."""
    gc.collect()
    controller, view = window.controller, window.token_view
    times, loop, watch = {}, QEventLoop(), StallWatch()

    def on_step(_step):
        times.setdefault("first", time.perf_counter())

    def on_finished(_reason):
        times["end"], times["cpu"] = time.perf_counter(), time.thread_time() - times["cpu"]
        loop.quit()

    controller.reset()  # a new session each time (Generate would carry on the stopped one)
    QApplication.processEvents()

    def press():
        times["start"], times["cpu"] = time.perf_counter(), time.thread_time()
        controller.generate()

    controller.worker.stepped.connect(on_step)
    controller.runFinished.connect(on_finished)
    watch.start()
    QTimer.singleShot(PRESS_MS, press)
    loop.exec()
    stall = watch.stop()
    controller.worker.stepped.disconnect(on_step)
    controller.runFinished.disconnect(on_finished)
    wait_ms(DRAIN_MS)  # the prompt's scoring (once: then cached) and the autosave end before the bare side runs
    count, whole, first = view.step_count(), times["end"] - times["start"], times["first"] - times["start"]
    return count / whole, first, (count - 1) / (whole - first), stall, 1000 * times["cpu"] / max(count, 1)


def load_smollm2(backend: str, threads: int):
    if backend == "llama.cpp":
        return engine.load_model("smollm2", backend="llama.cpp", threads=threads)
    return engine.load_model("smollm2", backend="numpy")


def smollm2_case(rounds: int, backend: str = "llama.cpp", threads: int = 1, tokens: int = SMOLLM2_TOKENS):
    """Window and bare Session alternate on one model (same file, same threads), after one warm-up of each
    (the first pass touches every page). The window is built on the model itself, not through the picker.
    -> per round (the bare side's figures, the window's, the load average before it)."""
    model = load_smollm2(backend, threads)
    window = new_window(model)
    controls = window.controls
    controls.chat_format.setChecked(True)
    controls.prompt.setPlainText(SMOLLM2_PROMPT)
    controls.temperature.setValue(0.0)
    controls.max_tokens.setValue(tokens)
    QApplication.processEvents()
    smollm2_bare(model, tokens), smollm2_window(window)
    results = [(load_text(), smollm2_bare(model, tokens), smollm2_window(window)) for _ in range(rounds)]
    window.close()
    model.close()
    return results


def span(values, fmt="{:.1f}"):
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}-{high}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4, help="rounds of the two sides, for each model")
    parser.add_argument("--seconds", type=float, default=4.0, help="the story model: seconds a side and round")
    parser.add_argument("--no-smollm2", action="store_true")
    parser.add_argument("--only-smollm2", action="store_true", help="skip the story model's measurements")
    parser.add_argument("--no-append", action="store_true", help="skip the cost of appending to the view")
    parser.add_argument("--backend", choices=tuple(GOALS), default="llama.cpp", help="what runs SmolLM2")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp's threads (2 spin on a 2-core machine)")
    parser.add_argument("--tokens", type=int, default=SMOLLM2_TOKENS, help="SmolLM2: greedy tokens per run")
    args = parser.parse_args()
    if args.backend != "llama.cpp" and args.threads != 1:
        parser.error("--threads is a setting of --backend llama.cpp")
    app = QApplication.instance() or QApplication([])
    if not args.only_smollm2:
        story_case(app, args.rounds, args.seconds, not args.no_append)
    if not args.no_smollm2 and engine.smollm2_path() is not None:
        report_smollm2(args)
    print(f"command: {command_line(args)}")


def command_line(args) -> str:
    command = f"python bench/window_speed.py --rounds {args.rounds}"
    if args.only_smollm2:
        command += " --only-smollm2"
    else:
        command += f" --seconds {args.seconds:g}" + " --no-append" * args.no_append
    if args.no_smollm2:
        return command + " --no-smollm2"
    command += f" --backend {args.backend}" + (f" --threads {args.threads}" if args.backend == "llama.cpp" else "")
    return command + (f" --tokens {args.tokens}" if args.tokens != SMOLLM2_TOKENS else "")


def report_smollm2(args):
    results = smollm2_case(args.rounds, args.backend, args.threads, args.tokens)
    backend = args.backend
    if backend == "llama.cpp":
        backend += f", {args.threads} thread{'s' * (args.threads > 1)}"
    print(f"SmolLM2-135M-Instruct ({backend}), {args.tokens} greedy tokens after {SMOLLM2_PROMPT!r} (Chat format), "
          f"{args.rounds} rounds (bare Session, then the window); the machine is shared ({os.cpu_count()} cores):")  # fmt: skip
    print("  round  bare Session  window        window/bare  after 1st token  stall  GUI CPU/token  load")
    for index, (load, bare, window) in enumerate(results, start=1):
        print(f"  {index:5d}  {bare[0]:6.1f} tok/s  {window[0]:6.1f} tok/s  {window[0] / bare[0]:10.2f}x  "
              f"{window[2] / bare[2]:14.2f}x  {window[3]:3.0f} ms  {window[4]:8.2f} ms     {load}")  # fmt: skip
    ratios = [w[0] / b[0] for _, b, w in results]
    decode_ratios = [w[2] / b[2] for _, b, w in results]
    print(f"  window / bare Session: {span(ratios, '{:.2f}')}x (median {statistics.median(ratios):.2f}; goal >= "
          f"{GOALS[args.backend]}x); after the first token {span(decode_ratios, '{:.2f}')}x; first token "
          f"{span([b[1] for _, b, _w in results], '{:.2f}')} s bare, {span([w[1] for *_, w in results], '{:.2f}')} s "
          f"in the window; longest stall {span([w[3] for *_, w in results], '{:.0f}')} ms (goal <= 50 ms)")  # fmt: skip


if __name__ == "__main__":
    main()
