"""Inside a model on llama.cpp (issue 28): what looking costs, what it agrees with, and that decoding costs
nothing more for it.

- The Inside tab's request (engine.inside_view) for a 200-token text: SmolLM2 on llama.cpp and in numpy,
  Gemma 3 270M on llama.cpp; one llama.cpp thread, one BLAS thread (the lens grid's, on a thread of its own
  beside llama.cpp's decode: lens_grid.py), and beside it the grid unembedded after the forward.
- The lens on llama.cpp against the numpy engine's on SmolLM2, per layer: the largest probability difference
  and whether the top tokens agree.
- The inspected forward (flash attention off) against a session's own row (flash attention on).
- Decoding: SmolLM2 on llama.cpp, greedy through a Session, with this model.py and with model.py as it was
  before issue 28 (read from git at BEFORE), rounds interleaved in one run.

    python bench/llamacpp_inside_speed.py [--tokens 48] [--rounds 4]
"""

import argparse
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

import engine
from engine.core.inside import softmax_rows
from engine.discovery import gemma3_path

BEFORE = "ee47df6^"  # the last commit before the llama.cpp Inside views
ROOT = Path(__file__).resolve().parent.parent
PROMPT = "The old lighthouse keeper opened the door and"
TEXTS = (PROMPT, "Paris is the capital of", "def fibonacci(n):\n    return")


def model_before():
    """engine/backends/llamacpp/model.py as it was at BEFORE, as a module of this process."""
    source = subprocess.run(["git", "show", f"{BEFORE}:engine/backends/llamacpp/model.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    module = types.ModuleType("llamacpp_model_before")
    exec(compile(source, "llamacpp_model_before", "exec"), module.__dict__)  # noqa: S102 - our own file, from git
    return module


def decode_rate(model, tokens: int) -> float:
    session = engine.Session(model, PROMPT, max_new_tokens=tokens)
    session.step()  # the prompt's read: not decoding
    start = time.perf_counter()
    session.run()
    return (len(session.steps) - 1) / (time.perf_counter() - start)


class AfterTheForward:
    """The model with its layers handed over only with the result: the grid unembedded after the forward, as
    before lens_grid.py (what the pipelining saves)."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)

    def inside(self, ids, head_scales=None, last=None, on_layer=None, residual_add=None):
        return self.model.inside(ids, head_scales=head_scales, last=last, residual_add=residual_add)


def speed(models, rounds: int) -> None:
    print(f"| model | engine | tokens | inside_view (the Inside tab), min-max of {rounds} | grid after the forward |")
    print("|---|---|---|---|---|")
    for label, model in models:
        ids = model.tokenizer.encode(PROMPT * 40)[:200]
        engine.inside_view(model, ids[:8])  # the first unembed reads the output head from the file
        times = {"now": [], "after": []}
        for _ in range(rounds):  # interleaved: the machine's load falls on both alike
            for key, which in (("now", model), ("after", AfterTheForward(model))):
                start = time.perf_counter()
                engine.inside_view(which, ids)
                times[key].append(time.perf_counter() - start)
        now, after = (f"{min(times[k]):.2f}-{max(times[k]):.2f} s" for k in ("now", "after"))
        print(f"| {model.name} | {label} | {len(ids)} | {now} | {after} |")


def agreement(llamacpp, numpy_model) -> None:
    print("SmolLM2 lens, llama.cpp vs numpy: max |p difference| per layer (row 0 = embedding), top tokens agree?")
    for text in TEXTS:
        ids = llamacpp.tokenizer.encode(text)
        ours, theirs = engine.logit_lens(llamacpp, ids), engine.logit_lens(numpy_model, ids)
        differences = np.abs(ours - theirs).max(axis=-1)
        agree = (ours.argmax(-1) == theirs.argmax(-1)).sum()
        print(f"  {text!r}: top agrees at {agree} of {len(ours)} layers; max {differences.max():.4f}")
        print("   ", " ".join(f"{d:.3f}" for d in differences))


def flash_difference(llamacpp) -> None:
    for text in TEXTS:
        ids = llamacpp.tokenizer.encode(text)
        session_row = softmax_rows(llamacpp.open_context()._scores(ids))
        inspected = softmax_rows(llamacpp.inside(ids).scores)
        print(f"  inspected (flash attention off) vs session row (on), {text!r}: "
              f"max |p difference| {np.abs(session_row - inspected).max():.4f}, "
              f"same top: {session_row.argmax() == inspected.argmax()}")  # fmt: skip


def decoding(tokens: int, rounds: int) -> None:
    path = engine.smollm2_path()
    now = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=512)
    before = model_before().LlamaCppModel(path, threads=1, context_length=512)
    rates = {"now": [], "before": []}
    decode_rate(now, 4), decode_rate(before, 4)  # warm
    order = [("now", now), ("before", before)]
    for _ in range(rounds):
        for name, model in order:
            rates[name].append(decode_rate(model, tokens))
        order.reverse()  # neither goes first every round
    print(f"SmolLM2 llama.cpp decode, {tokens} greedy tokens, 1 thread, {rounds} interleaved rounds:")
    for name in ("now", "before"):
        r = rates[name]
        print(f"  {name:6s} {min(r):.1f}-{max(r):.1f} tokens/s (median {statistics.median(r):.1f})")
    print(f"  now / before (medians): {statistics.median(rates['now']) / statistics.median(rates['before']):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    llamacpp = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=512)
    numpy_model = engine.load_model("smollm2", backend="numpy")
    models = [("llama.cpp", llamacpp), ("numpy", numpy_model)]
    if gemma3_path(assemble=True) is not None:
        models.append(("llama.cpp", engine.load_model(gemma3_path(), backend="llama.cpp", threads=1)))
    with threadpool_limits(1):
        speed(models, args.rounds)
        agreement(llamacpp, numpy_model)
        flash_difference(llamacpp)
        decoding(args.tokens, args.rounds)
    print(f"command: python bench/llamacpp_inside_speed.py --tokens {args.tokens} --rounds {args.rounds}")


if __name__ == "__main__":
    sys.exit(main())
