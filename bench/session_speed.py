"""Session step throughput on the story model, this tree against another (before a change), side by side in
one run: the rounds alternate between the two trees, each in its own child process, so both see the same
machine load. Steps: sampled at temperature 1 with two rules that never fire (rules are checked every step),
then forced, then rewound and stepped again.

    python bench/session_speed.py                # against a worktree of `main` made for the run
    python bench/session_speed.py --before DIR   # against another checkout
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
ROUNDS = 9

CHILD = r"""
import json, time
import engine
from engine import Rule, Session
model = engine.load_model()
rules = [Rule("xyz", insert=" a"), Rule(r"q+z", insert=" b", regex=True)]
prompts = ["once upon a time", "the little dog", "tom and sue went", "in the garden"]
steps, started = 0, time.perf_counter()
for seed, prompt in enumerate(prompts * 3):
    session = Session(model, prompt, max_new_tokens=60, temperature=1.0, seed=seed, rules=rules)
    steps += len(session.run())
    taken = [s.token_id for s in session.steps]
    session.rewind(len(taken))
    for token_id in taken[:20]:
        session.force_token(token_id)
        session.step()
    steps += min(20, len(taken))
    session.rewind(10)
    steps += len(session.run())
print(json.dumps({"steps": steps, "seconds": time.perf_counter() - started}))
"""


def steps_per_second(tree: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=tree, env=env, capture_output=True, text=True, check=True)
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    return answer["steps"] / answer["seconds"]


def compare(before: Path, after: Path) -> None:
    rates = {"before": [], "after": []}
    for _ in range(ROUNDS):
        rates["before"].append(steps_per_second(before))
        rates["after"].append(steps_per_second(after))
    for name, tree in (("before", before), ("after", after)):
        r = rates[name]
        print(
            f"{name:6} {tree}: steps/s {min(r):,.0f}-{max(r):,.0f} (median {statistics.median(r):,.0f}, {ROUNDS} rounds)"
        )
    ratio = statistics.median(rates["after"]) / statistics.median(rates["before"])
    print(f"after / before (medians): {ratio:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="a checkout to compare with (default: a worktree of main)")
    parser.add_argument("--rev", default="main", help="the revision of the default worktree")
    args = parser.parse_args()
    if args.before is not None:
        compare(args.before.resolve(), HERE)
        return
    with tempfile.TemporaryDirectory(prefix="session-speed-") as folder:
        tree = Path(folder) / "before"
        subprocess.run(["git", "-C", str(HERE), "worktree", "add", "-q", "--detach", str(tree), args.rev], check=True)
        try:
            compare(tree, HERE)
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(tree)], check=True)


if __name__ == "__main__":
    main()
