"""The real window, offscreen, against a bare engine.Session in the same process, side by side in one run:
rounds that alternate the two sides (the machine is shared: each round's 1-minute load average is printed beside
it, and only ratios from the same round are compared).

- The story model, story after story at T 1.0 (the window's own settings on both sides, one seed per story):
  tokens/s for --seconds per side and round, the longest stall of the GUI event loop, and the GUI thread's CPU
  time per token (the Python it runs takes the GIL from the worker); then what appending a token to the view
  costs at token 10 and at token 10,000. A third side in each round, the worker alone: the window's own worker
  (GenerationWorker with every feature's commands, in a QThread of its own) driven story after story with nothing
  shown (the window stays open and idle), what a window that shares the worker's Python process (and so its GIL)
  could reach at most. Beside each, how often the worker waited per story (its voluntary context switches: for the
  GIL the GUI thread holds, or for its next event), and after the rounds, in a pass of its own, the GUI thread's
  events per story and the most frequent kinds (bench/window_stories.py).
- SmolLM2 (installed), --tokens greedy tokens after a chat prompt, on llama.cpp in process (--threads) or the
  numpy engine (--backend numpy): tokens/s from Generate to the last token, after the first token, and the same
  stall and GUI CPU per token.

    python bench/window_speed.py [--rounds 4] [--seconds 4] [--tokens 48] [--backend llama.cpp|numpy] [--threads 1]
                                 [--no-smollm2 | --only-smollm2] [--no-append]
    python bench/window_speed.py --alone-only [--rounds 16 --seconds 0.5]   (the worker alone, no window made)

Goals (issue 30): the window >= 0.8x the bare Session's tokens/s on the story model, >= 0.95x on SmolLM2 with
llama.cpp (0.7x with numpy); no stall over 50 ms.
"""

import argparse
import gc
import os
import statistics
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QEventLoop, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402
from window_common import DRAIN_MS, StallWatch, load_text, new_window, span, wait_ms  # noqa: E402
from window_stories import alone_case, story_case  # noqa: E402

import engine  # noqa: E402

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
    parser.add_argument("--alone-only", action="store_true",
                        help="only the story model's worker alone against a bare Session, no window made at all "
                             "(try --rounds 16 --seconds 0.5)")  # fmt: skip
    args = parser.parse_args()
    if args.backend != "llama.cpp" and args.threads != 1:
        parser.error("--threads is a setting of --backend llama.cpp")
    app = QApplication.instance() or QApplication([])
    if args.alone_only:
        alone_case(args.rounds, args.seconds)
        print(f"command: python bench/window_speed.py --alone-only --rounds {args.rounds} --seconds {args.seconds:g}")
        return
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
