"""Inside the model (issue 17): what looking costs, and that decoding costs nothing more for it.

Decoding: SmolLM2 in numpy, greedy through a Session, with this forward pass (its taps off) and with the
forward pass as it was before the taps were added (read from git at BEFORE), rounds interleaved in one run.
Looking: engine.logit_lens, attention_weights and inside_view (the Inside tab's whole request) at a few text
lengths, on the story model and SmolLM2. Everything at one BLAS thread.

    python bench/inside_speed.py [--tokens 48] [--rounds 4]
"""

import argparse
import statistics
import subprocess
import time
import types
from pathlib import Path

from threadpoolctl import threadpool_limits

import engine
import engine.backends.gguf.model as gguf_model

BEFORE = "3be3a70"  # the last commit before issue 17
ROOT = Path(__file__).resolve().parent.parent
PROMPT = "The old lighthouse keeper opened the door and"


def forward_before():
    """gguf/model.py's forward as it was at BEFORE, as a function of this process."""
    source = subprocess.run(["git", "show", f"{BEFORE}:engine/backends/gguf/model.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    module = types.ModuleType("gguf_model_before")
    exec(compile(source, "gguf_model_before", "exec"), module.__dict__)  # noqa: S102 - our own file, from git

    def forward(weights, config, ids, cache, tables, last_only=False, taps=None, head_scales=None, residual_add=None):
        if taps is not None or head_scales is not None or residual_add is not None:
            raise ValueError("the forward before issue 17 has no taps, head scales or steering")
        return module.forward(weights, config, ids, cache, tables, last_only)  # as called then

    return forward


def decode_rate(model, tokens: int) -> float:
    session = engine.Session(model, PROMPT, max_new_tokens=tokens)
    start = time.perf_counter()
    session.run()
    return len(session.steps) / (time.perf_counter() - start)


def timed(function, model, ids, rounds: int = 3) -> tuple[float, float]:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        function(model, ids)
        times.append(time.perf_counter() - start)
    return min(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    smollm2, story = engine.load_model("smollm2", backend="numpy"), engine.load_model()
    now, before = gguf_model.forward, forward_before()
    rates = {"now": [], "before": []}
    with threadpool_limits(1):
        decode_rate(smollm2, 4)  # warm
        for _ in range(args.rounds):
            for name, function in (("now", now), ("before", before)):
                gguf_model.forward = function
                rates[name].append(decode_rate(smollm2, args.tokens))
        gguf_model.forward = now
        print(f"SmolLM2 numpy decode, {args.tokens} greedy tokens, 1 thread, {args.rounds} interleaved rounds:")
        for name in ("now", "before"):
            r = rates[name]
            print(f"  {name:6s} {min(r):.1f}-{max(r):.1f} tokens/s (median {statistics.median(r):.1f})")
        ratio = statistics.median(rates["now"]) / statistics.median(rates["before"])
        print(f"  now / before (medians): {ratio:.3f}")
        print("| model | tokens | logit_lens | attention_weights | inside_view (the Inside tab) |")
        print("|---|---|---|---|---|")
        cases = [(story, story.tokenizer.encode("mia has a red ball. she goes to the park. now mia has the"))]
        cases += [(smollm2, smollm2.tokenizer.encode(PROMPT * 40)[:n]) for n in (20, 200)]
        for model, ids in cases:
            figures = [timed(f, model, ids) for f in (engine.logit_lens, engine.attention_weights, engine.inside_view)]
            cells = " | ".join(f"{low * 1000:.0f}-{high * 1000:.0f} ms" for low, high in figures)
            print(f"| {model.name} | {len(ids)} | {cells} |")
    print(f"command: python bench/inside_speed.py --tokens {args.tokens} --rounds {args.rounds}")


if __name__ == "__main__":
    main()
