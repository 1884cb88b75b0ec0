"""SmolLM2's float32 cache: how long a cached load takes now that the cache is verified as it is read.

    python bench/gguf_cache_load.py [--rounds 5]

Each round runs in a fresh process (as the app's start would) and times engine.load_model("smollm2", backend="numpy") from
an existing cache, twice: "cold-ish", after asking the kernel to drop the cache's files from its page cache
(posix_fadvise DONTNEED: no root needed, though pages another process maps may stay), and "warm", right
after. Then, in the same process, the verification's own cost: sha256 over bytes already in memory
(weights.npy's and tokenizer.json's), and blake2b over the same bytes for comparison. Each figure is the
range over the rounds, then each round's. The cold-ish figures include the disk: on a shared machine another
process's I/O shows up as a single slow round (a plain read of weights.npy varies as much).
Goal (issue 11): a cached load <= 2 s on a 2-core machine.
"""

import argparse
import json
import subprocess
import sys

ROUND = r"""
import hashlib, json, os, time
import engine
from engine.backends.gguf import cache as gguf_cache
from engine.loading import smollm2_path

path = smollm2_path()
directory = gguf_cache.cache_root() / gguf_cache.cache_key(path)
engine.load_model(path, backend="numpy") if not (directory / "meta.json").exists() else None  # build the cache once
files = [directory / name for name in ("weights.npy", "tokenizer.json", "meta.json")]


def evict():
    for file in files:
        with open(file, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def timed(action):
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


evict()
cold, model = timed(lambda: engine.load_model(path, backend="numpy"))
del model
warm, model = timed(lambda: engine.load_model(path, backend="numpy"))
weights = files[0].read_bytes()
tokenizer = files[1].read_bytes()
sha256, _ = timed(lambda: (hashlib.sha256(weights).digest(), hashlib.sha256(tokenizer).digest()))
blake2b, _ = timed(lambda: (hashlib.blake2b(weights).digest(), hashlib.blake2b(tokenizer).digest()))
print(json.dumps({"cold": cold, "warm": warm, "sha256": sha256, "blake2b": blake2b, "megabytes": len(weights) / 1e6}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds = []
    for _ in range(args.rounds):
        done = subprocess.run([sys.executable, "-c", ROUND], capture_output=True, text=True, check=True)
        rounds.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        f"SmolLM2 float32 cache, {rounds[0]['megabytes']:.0f} MB of weights; {args.rounds} rounds, fresh process each"
    )
    for key, label in (("cold", "cached load, cold-ish (page cache dropped)"), ("warm", "cached load, warm"),
                       ("sha256", "verify: sha256 of weights + tokenizer in memory"),
                       ("blake2b", "        blake2b of the same, for comparison")):  # fmt: skip
        values = [r[key] for r in rounds]
        each = " ".join(f"{v:.2f}" for v in values)
        print(f"  {label:50s} {min(values):.2f}-{max(values):.2f} s   (rounds: {each})")


if __name__ == "__main__":
    main()
