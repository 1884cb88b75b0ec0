"""What the autosave costs per run on a 1,000-step story-model session (issue 24 goal: invisible, under 20 ms, off
the GUI thread). The session: 1,000 steps taken at temperature 2.5 on branches from random points (the story
model has 64 positions, so they make a tree of ~1,000 nodes). Then, --rounds times, a run of 10 new steps on a
new branch followed by one autosave, measured in its parts:

    worker      the trace built in the worker's thread (Session.trace with a placeholder per step): what the
                worker is held for before its next command
    encode      the writer's thread: the new steps' JSON, the outline, the placeholders filled in
    write       the writer's thread: rotation and the atomic write (fsync) of the file
    saved       from the worker handing it over to the file on disk (the writer's thread, end to end)
    stall       the longest a 1 ms ticker thread (standing for the GUI thread) waited for its turn while the
                writer worked: how much the writer's holding Python's lock can be felt elsewhere (and the same
                ticker over 50 ms with nothing else running: what the machine itself adds)

and, for comparison, what encoding the whole session each time costs (Session.trace + json.dumps), and the
first autosave of the session (every step encoded once).

    python bench/autosave_speed.py [--rounds 20] [--steps 1000]
"""

import argparse
import json
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import engine
from playground.documents.saver import AutosaveWriter


def long_session(model, steps: int) -> engine.Session:
    session = engine.Session(model, "mia has a red ball.", temperature=2.5, seed=1, max_new_tokens=10_000)
    pick, taken = random.Random(0), 0
    while taken < steps:
        if session.step() is None or session.stopped:
            session.rewind(pick.randint(1, len(session.steps)))
            session.update_settings(seed=taken)
            continue
        taken += 1
    return session


def new_branch(session, round_: int) -> None:
    """A run of 10 steps on a new branch (what happens between two autosaves)."""
    session.rewind(min(10, len(session.steps)))
    session.update_settings(seed=100_000 + round_)
    for _ in range(10):
        if session.step() is None or session.stopped:
            break


class Ticker:
    """A thread that wakes every millisecond and records the longest it had to wait beyond that."""

    def __init__(self):
        self.worst, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            self.worst = max(self.worst, now - last - 0.001)
            last = now

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def one_save(session, writer) -> dict:
    started = time.perf_counter()
    job = writer.job()
    trace = session.trace("all", record=job.record)
    trace["autosave"] = {"window": {}, "load": {"source": None}}
    built = time.perf_counter()
    with Ticker() as ticker:
        writer.submit(job, trace)
        writer.wait()
        saved = time.perf_counter()
    encode, write = writer.last_seconds
    return {"worker": built - started, "encode": encode, "write": write, "saved": saved - built, "stall": ticker.worst}


def span(values) -> str:
    ms = [1000 * v for v in values]
    return f"{min(ms):6.1f} - {max(ms):6.1f} ms (median {statistics.median(ms):6.1f})"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    session = long_session(engine.load_model(), args.steps)
    with tempfile.TemporaryDirectory() as folder:
        writer = AutosaveWriter(Path(folder))
        first = one_save(session, writer)
        rounds = []
        for round_ in range(args.rounds):
            new_branch(session, round_)
            rounds.append(one_save(session, writer))
        size = (Path(folder) / "autosave.json").stat().st_size
        writer.close()
    idle = []
    for _ in range(args.rounds):
        with Ticker() as ticker:
            time.sleep(0.05)
        idle.append(ticker.worst)
    whole = []
    for _ in range(min(args.rounds, 5)):
        started = time.perf_counter()
        json.dumps(session.trace(), ensure_ascii=False)
        whole.append(time.perf_counter() - started)
    nodes = len(session.tree.nodes) - 1
    print(f"autosave of a story-model session: {args.steps} steps taken, {nodes} tree nodes, {len(session.steps)} "
          f"on the active branch, {len(session.actions)} actions; file {size / 1e6:.1f} MB")  # fmt: skip
    print(f"per run ({args.rounds} runs of 10 steps on a new branch, each followed by one autosave):")
    for part in ("worker", "encode", "write", "saved", "stall"):
        print(f"  {part:8s} {span([r[part] for r in rounds])}")
    print(f"  {'(idle)':8s} {span(idle)}: the ticker alone")
    print(f"  the first autosave of the session (every step encoded): worker {1000 * first['worker']:.1f} ms, "
          f"encode {1000 * first['encode']:.1f} ms, write {1000 * first['write']:.1f} ms")  # fmt: skip
    print(f"  for comparison, the whole trace encoded each time (Session.trace + json.dumps): {span(whole)}")
    print("  goal: under 20 ms, off the GUI thread")
    print(f"command: python bench/autosave_speed.py --rounds {args.rounds} --steps {args.steps}")


if __name__ == "__main__":
    main()
