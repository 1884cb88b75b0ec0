"""What ranking a row and a sampled step's records cost without the forward pass, on real rows of SmolLM2
(49,152 tokens) and Gemma 3 (262,144) where installed (else random rows of their size), and the story
model's 96 tokens.

    python bench/ranking_speed.py [--rounds 200]

top_ids (engine/core/ranking.py: the best of each group of scores, then only the scores that can be among
the n best) against one np.partition over the whole row (what it did before), both giving the same ids;
then a step's records (StepMaker.distributions + make) at T 0.8, top-k 40, top-p 0.95 and at greedy, in
process CPU time (the machine is shared: wall time would count the neighbours' turns).
"""

import argparse
import statistics
import time

import numpy as np
from chain_speed import Texts, random_rows, real_rows
from llamacpp_speed import SAMPLED, gemma3_path
from threadpoolctl import threadpool_limits

import engine
from engine.core.ranking import top_ids
from engine.core.sampling import ChainInput
from engine.core.settings import Settings
from engine.core.step_maker import StepMaker


def one_pass_top_ids(scores, n):  # the previous top_ids: one partition of the whole row
    size = len(scores)
    threshold = np.partition(scores, size - n)[size - n]
    above = np.flatnonzero(scores > threshold)
    tied = np.flatnonzero(scores == threshold)[: n - len(above)]
    ids = np.concatenate([above, tied])
    return ids[np.lexsort((ids, -scores[ids]))]


def per_call_us(function, rows, n, rounds):
    times = []
    for r in range(rounds):
        scores = rows[r % len(rows)]
        started = time.process_time()
        function(scores, n)
        times.append(time.process_time() - started)
    return statistics.median(times) * 1e6


def step_ms(settings, rows, rounds):
    """Median CPU ms of one step's records, each on a fresh copy of its row, kept (as a forward pass gives one
    and the session keeps it: freeing them instead lets malloc hand every step's arrays back to the system,
    and page faults, costly on this VM, would dominate)."""
    maker, given, times, kept = StepMaker(Texts(), settings), ChainInput(np.arange(20, dtype=np.int64)), [], []
    for r in range(rounds):
        scores = rows[r % len(rows)].copy()
        kept.append(scores)
        started = time.process_time()
        dists = maker.distributions(scores, given)
        token = dists.final.draw(0.5) if settings.temperature else dists.final.best()
        maker.make(scores, token, "model", dists, 0.5)
        times.append(time.process_time() - started)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    with threadpool_limits(1):
        for label, path, size in (("story model", None, 96), ("SmolLM2", engine.smollm2_path(), 49_152),
                                  ("Gemma 3", gemma3_path(), 262_144)):  # fmt: skip
            rows = real_rows(path)
            if rows is None:
                label, rows = f"{label}{'' if size == 96 else '-sized random rows'}", random_rows(size)
            for n in (20, 40):
                for scores in rows:
                    assert np.array_equal(top_ids(scores, n), one_pass_top_ids(scores, n))
                new, old = (per_call_us(f, rows, n, args.rounds) for f in (top_ids, one_pass_top_ids))
                print(f"{label} ({size:,}) top {n}: top_ids {new:.0f} us, one partition {old:.0f} us "
                      f"({old / new:.1f}x), same ids")  # fmt: skip
            sampled = step_ms(Settings(**SAMPLED), rows, args.rounds)
            greedy = step_ms(Settings(), rows, args.rounds)
            print(f"{label}: a step's records, CPU ms: sampled {sampled:.2f}, greedy {greedy:.2f}")
    print("command: python bench/ranking_speed.py")


if __name__ == "__main__":
    main()
