"""What greedy as the chain's last stage costs per step (trace schema 5) against greedy at the temperature stage
(Settings.greedy_at "temperature", the engine before it): the chain and a step's records over a random row of
SmolLM2's and Gemma 3's vocabulary sizes, at the default settings and with top-k, top-p and min-p on (which now
act on the whole row rather than on greedy's one token). Prints the 10th-50th percentile per step.

    python bench/greedy_stage_speed.py [--rounds 60]
"""

import argparse
import time

import numpy as np

from engine import Settings
from engine.core.step_maker import StepMaker


class NumberedTokens:
    """A tokenizer stand-in: the records decode the top 20's texts, which is not what is measured here."""

    def decode(self, ids):
        return str(ids)


def per_step(settings: Settings, row, rounds: int) -> str:
    maker = StepMaker(NumberedTokens(), settings)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        dists = maker.distributions(row)
        maker.make(row, dists.final.best(), "model", dists)
        times.append(time.perf_counter() - start)
    times.sort()
    return f"{times[len(times) // 10] * 1e3:.2f}-{times[len(times) // 2] * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for vocab in (49_152, 262_144):
        row = (rng.standard_normal(vocab) * 3).astype(np.float32)
        for name, filters in (("defaults", {}), ("top-k 40, top-p 0.95, min-p 0.05", dict(top_k=40, top_p=0.95,
                                                                                          min_p=0.05))):  # fmt: skip
            old, new = (per_step(Settings(greedy_at=at, **filters), row, args.rounds) for at in ("temperature", "end"))
            print(f"V {vocab:>7,}, {name}: greedy at the temperature stage {old}, greedy last {new}")


if __name__ == "__main__":
    main()
