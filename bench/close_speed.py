"""How long closing the app takes, from the window's close() to the process's exit, in each moment of its work:
the app as `token-playground` runs it, in a child process (tests/close_window.py), closed while idle after a run,
as a run ends (the worker then scores the prompt; --long: a prompt of 1,000 tokens), while a run reads a long
prompt, mid-generation, mid-expansion, mid-seeds, while a model loads, while a second model loads for a
comparison, and idle with a comparison open. SmolLM2 on llama.cpp at 2 threads and at the default, and the story
model. Ranges over rounds, and how often the last resort ended the process (a native call still held the worker).

    python bench/close_speed.py [--rounds 3] [--busy 0] [--only smollm2|story] [--threads 2 default]

Goal: under 1 s in every case, and no last resort. --busy N spins N processes beside it.
"""

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = ROOT / "tests" / "close_window.py"
SMOLLM2_CASES = ["idle", "scoring", "scoring --long", "reading --long", "generating", "expanding", "seeds",
                 "loading", "comparing", "compared"]  # fmt: skip
STORY_CASES = ["idle", "generating", "expanding", "seeds"]


def close_once(options: list[str]) -> tuple[float, bool, str]:
    """-> (seconds from close() to the exit, whether the last resort ended it, what it printed on stderr)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, str(CHILD), *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)  # fmt: skip
    out, err = child.communicate(timeout=300)
    exited = time.monotonic()
    closing = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("closing at")]
    if child.returncode != 0 or not closing:
        raise RuntimeError(f"{' '.join(options)}: exit status {child.returncode}\n{err[-2000:]}")
    said = "\n".join(line for line in err.splitlines() if "propagateSizeHints" not in line and line.strip())
    return exited - closing[0], "ended normally" not in out, said


def spin() -> None:
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="processes spinning beside the bench")
    parser.add_argument("--only", choices=("smollm2", "story"), default=None)
    parser.add_argument("--threads", nargs="+", default=["2", "default"], help="llama.cpp's threads for SmolLM2")
    args = parser.parse_args()
    runs = []
    if args.only != "story":
        for threads in args.threads:
            extra = [] if threads == "default" else ["--threads", threads]
            runs += [(f"SmolLM2, {threads} threads", case, case.split() + extra) for case in SMOLLM2_CASES]
    if args.only != "smollm2":
        runs += [("story model", case, case.split() + ["--model", "story"]) for case in STORY_CASES]
    print(f"{os.cpu_count()} CPUs, {args.busy} busy process(es) beside, load {os.getloadavg()[0]:.1f}; "
          f"{args.rounds} rounds; close() to the process's exit")  # fmt: skip
    busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for process in busy:
        process.start()
    try:
        for model, case, options in runs:
            results = [close_once(options) for _ in range(args.rounds)]
            times = [seconds for seconds, _, _ in results]
            last_resort = sum(ended for _, ended, _ in results)
            said = {text for _, _, text in results if text}
            print(f"{model:22s} {case:16s} {min(times):.2f}-{max(times):.2f} s (median {statistics.median(times):.2f})"
                  f"  last resort {last_resort}/{len(results)}" + (f"  PRINTED: {said}" if said else ""), flush=True)  # fmt: skip
    finally:
        for process in busy:
            process.terminate()


if __name__ == "__main__":
    main()
