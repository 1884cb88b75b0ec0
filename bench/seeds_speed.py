"""Many seeds at once (issue 16's goal: 100 seeds x a whole story on the story model <= 2 s): Session.run_seeds
against the same seeds run as 100 sessions one after another, side by side, and what they wrote (the tree's
size, the most frequent continuations, how many kept the first sentence's colour and object).

    python bench/seeds_speed.py [--seeds 100] [--temperature 1.0] [--rounds 3]
"""

import argparse
import time

from threadpoolctl import threadpool_limits

import engine
from engine.story.corpus import story_measure

PROMPT = "mia has a red ball."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = engine.load_model()
    settings = dict(temperature=args.temperature, max_new_tokens=60)
    together, apart = [], []
    with threadpool_limits(1):
        for _ in range(args.rounds):
            start = time.perf_counter()
            run = engine.Session(model, PROMPT, **settings).run_seeds(range(args.seeds))
            together.append(time.perf_counter() - start)
            start = time.perf_counter()
            for seed in range(args.seeds):
                engine.Session(model, PROMPT, seed=seed, **settings).run()
            apart.append(time.perf_counter() - start)
    tokens = sum(len(steps) for steps in run.steps.values())
    print(f"{args.seeds} seeds, {tokens} tokens, temperature {args.temperature}: run_seeds "
          f"{min(together):.2f}-{max(together):.2f} s (goal 2 s), one session per seed {min(apart):.2f}-"
          f"{max(apart):.2f} s: {min(apart) / max(together):.1f}-{max(apart) / min(together):.1f}x")  # fmt: skip
    print(f"the tree: {len(run.nodes)} nodes for {tokens} steps; {story_measure(run, PROMPT)}")
    for text, count in run.completions(3):
        print(f"  {count:3d} x {text.strip()!r}")
    print(f"command: python bench/seeds_speed.py --seeds {args.seeds} --temperature {args.temperature}")


if __name__ == "__main__":
    main()
