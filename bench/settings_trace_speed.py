"""How long the whole settings trace takes (issue goal: at most 3 s on a 2-core machine; issue 30: the
workers it chooses from the machine's load are never slower than one process).

    python bench/settings_trace_speed.py [--rounds 3]

Prints the best and median wall time of `python -m engine trace`'s work, in one process and with the workers
it chooses (trace_workers: no more than the idle cores), side by side with the machine's busy cores and load
average at each round, the two interleaved round by round (and 2 workers, the fixed choice before); and the
number of steps generated.
"""

import argparse
import os
import statistics
import time

import engine
from engine.core.cpu_load import busy_cores, usable_cores
from engine.story.settings_trace import settings_trace, trace_workers


def timed(model, workers) -> tuple[float, dict]:
    started = time.perf_counter()
    trace = settings_trace(model, workers)
    return time.perf_counter() - started, trace


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = engine.load_model()
    one, chosen, ratios, two = [], [], [], []
    for _ in range(args.rounds):
        load, busy = os.getloadavg()[0], busy_cores()
        workers = trace_workers(usable_cores(), busy)
        seconds_chosen, trace = timed(model, workers)
        seconds_one, single = timed(model, 1)
        assert trace == single, "the trace differs between one worker and several"
        seconds_two, _ = timed(model, 2)  # the fixed choice before issue 30
        one.append(seconds_one), chosen.append(seconds_chosen), ratios.append(seconds_chosen / seconds_one)
        two.append(seconds_two)
        print(f"  busy {busy:.1f} cores (load average {load:.2f}): chose {workers} worker(s) {seconds_chosen:.2f} s, "
              f"1 process {seconds_one:.2f} s ({seconds_chosen / seconds_one:.2f}x); 2 workers {seconds_two:.2f} s")  # fmt: skip
    stories = sum(row["stories"] for row in trace["settings"])
    print(f"settings trace: {len(trace['settings'])} settings x 60 dev stories = {stories} generations + examples")
    print(f"  chosen workers      best {min(chosen):.2f} s  median {statistics.median(chosen):.2f} s")
    print(f"  1 process           best {min(one):.2f} s  median {statistics.median(one):.2f} s")
    print(f"  2 workers (before)  best {min(two):.2f} s  median {statistics.median(two):.2f} s")
    print(f"  chosen / 1 process  {min(ratios):.2f}-{max(ratios):.2f}x (goal: never above 1, within noise)")
    print("  goal                <= 3 s (reference lab, pure Python without a cache: 32.7 s for 5 settings)")
    print("command: python bench/settings_trace_speed.py")


if __name__ == "__main__":
    main()
