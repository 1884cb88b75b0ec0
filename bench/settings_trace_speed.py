"""How long the whole settings trace takes (issue goal: at most 3 s on a 2-core machine).

    python bench/settings_trace_speed.py [--rounds 3]

Prints the best and median wall time of `python -m engine trace`'s work, with the settings shared by two
worker processes (what the CLI does) and in one process, and the number of steps generated.
"""

import argparse
import statistics
import time

import engine
from engine.story.settings_trace import settings_trace


def timed(model, workers, rounds):
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        trace = settings_trace(model, workers)
        times.append(time.perf_counter() - started)
    return times, trace


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = engine.load_model()
    two, trace = timed(model, 2, args.rounds)
    one, _ = timed(model, 1, args.rounds)
    stories = sum(row["stories"] for row in trace["settings"])
    print(f"settings trace: {len(trace['settings'])} settings x 60 dev stories = {stories} generations + examples")
    print(f"  2 worker processes  best {min(two):.2f} s  median {statistics.median(two):.2f} s")
    print(f"  1 process           best {min(one):.2f} s  median {statistics.median(one):.2f} s")
    print("  goal                <= 3 s (reference lab, pure Python without a cache: 32.7 s for 5 settings)")
    print("command: python bench/settings_trace_speed.py")


if __name__ == "__main__":
    main()
