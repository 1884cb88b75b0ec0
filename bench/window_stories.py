"""The story model in the window, story after story, against a bare Session and against the window's worker alone
(bench/window_speed.py runs it; its docstring says what is measured)."""

import gc
import os
import statistics
import threading
import time
from collections import Counter

from PySide6.QtCore import QEventLoop, QObject, QTimer, Signal, Slot
from PySide6.QtWidgets import QApplication
from window_common import DRAIN_MS, StallWatch, load_text, new_window, span, wait_ms

import engine
from engine.story import corpus as stories

STORY_GOAL = 0.8  # the window's tokens/s over the bare Session's on the story model, at least


def prompts():
    _train, dev, _test = stories.split()
    return [stories.first_sentence(s) for s in dev]


def thread_id(worker: QObject) -> int:
    """The native id of the thread `worker` lives in (a call queued to it, waited for)."""
    found = []
    QTimer.singleShot(0, worker, lambda: found.append(threading.get_native_id()))
    while not found:
        QApplication.processEvents()
        time.sleep(0.001)
    return found[0]


def waits(thread: int) -> int:
    """How often a thread of this process has waited so far (its voluntary context switches: for the GIL, or for
    its next event); 0 where /proc does not say (not Linux)."""
    try:
        with open(f"/proc/self/task/{thread}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("voluntary_ctxt_switches"))
    except (OSError, StopIteration):
        return 0


class EventCount(QObject):
    """Counts the events the GUI thread's objects get, by kind and receiver (an application event filter: each call
    is Python, so it is counted in a pass of its own, never in a timed one)."""

    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def eventFilter(self, receiver, event) -> bool:
        self.counts[f"{event.type().name} {type(receiver).__name__}"] += 1
        return False


def gui_events(window, seconds: float) -> tuple[float, list]:
    """-> (the GUI thread's events per story, the four most frequent kinds per story), story after story."""
    app, counter = QApplication.instance(), EventCount()
    app.installEventFilter(counter)
    _rate, _stall, count, _cpu, _waits = window_stories(window, seconds, 0)
    app.removeEventFilter(counter)
    return counter.counts.total() / count, [(n / count, kind) for kind, n in counter.counts.most_common(4)]


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


class WorkerAlone(QObject):
    """The window's worker (every feature's commands, its own QThread) with nothing shown: this object, on the GUI
    thread, only counts the steps it sends and sends the next story as the last one finishes."""

    start = Signal(object)  # a request for GenerationWorker.start_session, queued to the worker's thread

    def __init__(self, model, request: dict):
        from playground.features import WORKER_COMMANDS
        from playground.worker_thread import WorkerThread

        super().__init__()
        self.threads, self.request, self.texts = WorkerThread(model, WORKER_COMMANDS), request, prompts()
        worker = self.threads.worker
        self.thread = thread_id(worker)
        self.start.connect(worker.start_session)
        worker.stepsTaken.connect(self.count)
        worker.finished.connect(self.next_story)
        self.loop, self.index, self.tokens, self.until = QEventLoop(), 0, 0, 0.0

    def stories(self, seconds: float, first: int) -> tuple[float, float]:
        """Story after story from prompt `first` on (seed = its index), for `seconds` -> (tokens/s, the worker's
        waits per story)."""
        self.index, self.tokens = first, 0
        gc.collect()
        waited, started = waits(self.thread), time.perf_counter()
        self.until = started + seconds
        QTimer.singleShot(0, self.next_story)
        self.loop.exec()
        rate = self.tokens / (time.perf_counter() - started)
        return rate, (waits(self.thread) - waited) / max(self.index - first, 1)

    @Slot(object)
    def count(self, steps) -> None:
        self.tokens += len(steps)

    @Slot()
    @Slot(str, float)
    def next_story(self, *_finished) -> None:
        if time.perf_counter() >= self.until:
            self.loop.quit()
            return
        settings = {**self.request["settings"], "seed": self.index}
        self.start.emit({**self.request, "prompt": self.texts[self.index % len(self.texts)], "settings": settings})
        self.index += 1

    def close(self) -> None:
        self.threads.shutdown()  # (the model works again once it has ended: it was given, it may work elsewhere)


def window_stories(window, seconds: float, first: int) -> tuple[float, int, int, float, float]:
    """The same in the window, each next story sent as the last one ends (runFinished) -> (tokens/s counted as
    the view takes them, the longest event-loop stall in ms, stories, GUI thread CPU ms per token, the worker's
    waits per story). A local event loop waits (the application's quit() would end the worker thread's loop too)."""
    controller, controls, view, texts = window.controller, window.controls, window.token_view, prompts()
    worker = thread_id(controller.worker)
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
    waited, cpu, started = waits(worker), time.thread_time(), time.perf_counter()
    watch.start()
    QTimer.singleShot(0, next_story)
    loop.exec()
    elapsed, cpu, waited = time.perf_counter() - started, time.thread_time() - cpu, waits(worker) - waited
    stall = watch.stop()
    controller.runFinished.disconnect(next_story)
    del view.append_steps
    wait_ms(DRAIN_MS)
    tokens, count = max(state["tokens"], 1), state["index"] - first
    return tokens / elapsed, stall, count, 1000 * cpu / tokens, waited / max(count, 1)


def story_case(app, rounds: int, seconds: float, append: bool) -> None:
    model = engine.load_model()
    window = new_window(model)
    window.controls.temperature.setValue(1.0)
    QApplication.processEvents()
    settings = window.controls.settings()
    request = {"settings": settings, "rules": window.rules_panel.rules(model.tokenizer), "then": "generate"}
    alone = WorkerAlone(model, request)
    bare_stories(model, settings, 0.5, 0), window_stories(window, 0.5, 0), alone.stories(0.5, 0)  # warm-up
    print(f"story model, story after story at T 1.0 (the window's settings, a seed per story), {rounds} rounds of "
          f"{seconds:g} s a side; the machine is shared ({os.cpu_count()} cores), its load beside each round:")  # fmt: skip
    print("  round  bare Session  window        window/bare  stories  stall  GUI CPU/token  worker waits/story  "
          "worker alone/bare  its waits/story  load")  # fmt: skip
    ratios, stalls, cpus, ceilings = [], [], [], []
    for round_index in range(rounds):
        load = load_text()
        first = 1000 * round_index  # both sides of a round: the same stories
        bare = bare_stories(model, settings, seconds, first)
        rate, stall, count, cpu, waited = window_stories(window, seconds, first)
        alone_rate, alone_waited = alone.stories(seconds, first)
        ratios.append(rate / bare), stalls.append(stall), cpus.append(cpu), ceilings.append(alone_rate / bare)
        print(f"  {round_index + 1:5d}  {bare:7.0f} tok/s  {rate:7.0f} tok/s  {rate / bare:10.2f}x  {count:7d}  "
              f"{stall:3.0f} ms  {cpu:8.2f} ms  {waited:18.1f}  {alone_rate / bare:16.2f}x  {alone_waited:15.1f}     "
              f"{load}")  # fmt: skip
    print(f"  window / bare Session: {span(ratios, '{:.2f}')}x (median {statistics.median(ratios):.2f}; goal >= "
          f"{STORY_GOAL}x); longest stall {span(stalls, '{:.0f}')} ms (goal <= 50 ms); GUI thread CPU "
          f"{span(cpus, '{:.2f}')} ms per token; the worker alone (nothing shown): {span(ceilings, '{:.2f}')}x "
          f"(median {statistics.median(ceilings):.2f})")  # fmt: skip
    per_story, kinds = gui_events(window, seconds)
    print(f"  the GUI thread's events per story (a pass of its own, counted): {per_story:.0f}; the most: "
          + ", ".join(f"{n:.1f} {kind}" for n, kind in kinds))  # fmt: skip
    alone.close()
    window.close()
    if append:
        for kind in ("story lines", "one paragraph"):
            early, late, count = append_cost(app, model, kind == "story lines")
            print(f"appending 10 tokens to the view ({kind}): {early:.2f} ms at token 10, {late:.2f} ms at token "
                  f"{count:,}")  # fmt: skip


def alone_case(rounds: int, seconds: float) -> None:
    """The bare Session against the window's worker alone with no window made at all (the settings a fresh
    window starts with, at T 1.0; no rules): what a worker thread in the GUI's process reaches with no GUI work, in
    short alternating rounds (the machine's noise is slower than a round)."""
    model = engine.load_model()
    settings = engine.Settings(temperature=1.0).to_dict()
    alone = WorkerAlone(model, {"settings": settings, "rules": [], "then": "generate"})
    bare_stories(model, settings, 0.5, 0), alone.stories(0.5, 0)  # warm-up
    ratios, waited = [], []
    for round_index in range(rounds):
        bare = bare_stories(model, settings, seconds, 100 * round_index)
        rate, waits_per_story = alone.stories(seconds, 100 * round_index)
        ratios.append(rate / bare), waited.append(waits_per_story)
    alone.close()
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    print(f"story model, the window's worker alone (no window made) / a bare Session, {rounds} alternating rounds of "
          f"{seconds:g} s: median {statistics.median(ratios):.2f}x (quartiles {quartiles[0]:.2f}-{quartiles[2]:.2f}, "
          f"rounds {span(ratios, '{:.2f}')}); the worker's waits per story: median {statistics.median(waited):.1f}; "
          f"{load_text()}")  # fmt: skip


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
