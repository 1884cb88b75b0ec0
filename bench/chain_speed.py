"""The sampler chain's cost per step with every stage on, stage by stage, over a whole vocabulary: SmolLM2's
49,152 tokens and Gemma 3's 262,144 (issue 14's goals: <= 2 ms and <= 6 ms per step). Rows are real scores
when the models are installed (llama.cpp backend), else random rows of the same size; the history is 500
tokens that end with a phrase seen before, so the penalties and DRY have work to do.

    python bench/chain_speed.py [--rounds 200]
"""

import argparse
import statistics
import time

import numpy as np
from llamacpp_speed import gemma3_path  # assembled once into the user cache, as the tests do
from threadpoolctl import threadpool_limits

import engine
from engine.core.sampling import ChainInput, Row, chain, softmax
from engine.core.settings import LLAMA_CPP_ORDER, Settings
from engine.core.step_maker import StepMaker

EVERY_STAGE = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, presence_penalty=0.2,
                   frequency_penalty=0.1, dry_multiplier=0.8, xtc_probability=1.0, xtc_threshold=0.1,
                   typical_p=0.95, top_n_sigma=2.0, logit_bias=((5, 1.0), (7, -float("inf"))))  # fmt: skip


TEXT = "Once upon a time there was a little girl who lived in a village near the forest. Whenever she went out,"


def real_rows(path) -> np.ndarray | None:
    """[n, V] float32: a model's real scores at the last 8 positions of TEXT (llama.cpp backend), or None."""
    import engine

    if path is None:
        return None
    try:
        model = engine.load_model(path, backend="llama.cpp", threads=1, context_length=256)
    except ValueError:
        return None
    ids = model.tokenizer.encode(TEXT)
    rows = model.forward_cached(ids, model.new_cache())[-8:]
    model.close()
    return rows


def random_rows(size: int, seed: int = 0) -> np.ndarray:  # [4, size] float32 spread like a model's scores
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((4, size)) * 3 + rng.standard_normal(size) * 2).astype(np.float32)


def history_with_a_repeat(size: int = 500, repeat: int = 12) -> np.ndarray:
    """[size] token ids like a text's: ids of common words (so the penalties find repeats in their window),
    ending with a 12-token phrase seen earlier (so DRY penalises the token that would continue it, by
    0.8 * 1.75 ** 10). A history that is one phrase over and over instead drives DRY's penalty to
    -FLT_MAX: top-n-sigma's standard deviation overflows and it keeps every token, as in llama.cpp."""
    ids = np.random.default_rng(1).integers(0, 2_000, size)
    ids[-repeat:] = ids[100 : 100 + repeat]
    return ids.astype(np.int64)


class Texts:
    """A stand-in tokenizer for StepMaker's candidate texts (the chain itself needs none)."""

    def decode(self, ids):
        return f"<{ids[0]}>"


def per_stage(settings: Settings, rows, given: ChainInput, rounds: int) -> dict[str, float]:
    """Median ms per stage (each stage timed on the row the stages before it made)."""
    times: dict[str, list[float]] = {}
    for r in range(rounds):
        scores = rows[r % len(rows)]
        row_state = Row(scores, softmax(scores), len(scores))
        for stage in chain(settings):
            start = time.perf_counter()
            row_state = stage.apply(row_state, given)
            times.setdefault(stage.name, []).append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1000 for name, values in times.items()}


def whole_step(settings: Settings, rows, given: ChainInput, rounds: int) -> float:
    """Median ms for what a step computes: softmax, every stage, the top 20, removed-by and stage ranks."""
    maker = StepMaker(Texts(), settings)
    times = []
    for r in range(rounds):
        scores = rows[r % len(rows)]
        start = time.perf_counter()
        dists = maker.distributions(scores, given)
        maker.make(scores, dists.final.best(), "model", dists)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    given = ChainInput(history_with_a_repeat(), 0.0, None)  # DRY without breakers: its repeat search still runs
    print("ms per step, median of", args.rounds, "(1 BLAS thread)")
    with threadpool_limits(1):
        for label, path, size, goal in (("SmolLM2", engine.smollm2_path(), 49_152, 2.0),
                                        ("Gemma 3", gemma3_path(), 262_144, 6.0)):  # fmt: skip
            rows = real_rows(path)
            if rows is None:
                label, rows = f"{label}-sized random rows", random_rows(size)
            for order_name, order in (("default order", None), ("llama.cpp order", LLAMA_CPP_ORDER)):
                settings = Settings(**EVERY_STAGE, **({"samplers": order} if order else {}))
                stages = per_stage(settings, rows, given, args.rounds)
                step = whole_step(settings, rows, given, args.rounds)
                parts = ", ".join(f"{name} {ms:.2f}" for name, ms in stages.items())
                print(f"{label} ({size:,}), {order_name}: whole step {step:.2f} ms (goal {goal:g}); "
                      f"chain {sum(stages.values()):.2f} = {parts}")  # fmt: skip
    print("command: python bench/chain_speed.py")


if __name__ == "__main__":
    main()
