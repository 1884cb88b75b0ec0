"""Scoring 1,000 tokens of text on SmolLM2 (issue 15's goals: <= 3 s on the numpy engine; <= 1.2x llama.cpp's
own prompt evaluation on the llama.cpp backend), side by side in one run, same file, same threads. llama.cpp's
own evaluation is one llama_decode of the whole text asking for every position's logits (what scoring
needs), in C; engine.score adds each token's record (the top 20 at every stage, entropy, surprisal, ranks).

    python bench/score_speed.py [--tokens 1000] [--threads 1] [--rounds 3]
"""

import argparse
import statistics
import time

from threadpoolctl import threadpool_limits

import engine
from engine.backends.llamacpp.library import llama

PARAGRAPH = ("The history of computing is longer than the history of computing hardware and modern computing "
             "technology and includes the history of methods intended for pen and paper or for chalk and slate, "
             "with or without the aid of tables. Digital computing is intimately tied to the representation of "
             "numbers. ")  # fmt: skip


def text_of(model, tokens: int) -> list[int]:
    ids = model.tokenizer.encode(PARAGRAPH * (tokens // 40 + 2))
    return ids[:tokens]


def llama_cpp_evaluation(model, ids) -> float:
    """Seconds for llama.cpp to evaluate the ids in one context with every position's logits, in C."""
    lib = llama()
    params = lib.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = len(ids)
    params.n_threads = params.n_threads_batch = model.threads
    ctx = lib.llama_init_from_model(model.handle, params)
    batch = lib.llama_batch_init(len(ids), 0, 1)
    try:
        for i, token in enumerate(ids):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, i, 1, True
            batch.seq_id[i][0] = 0
        batch.n_tokens = len(ids)
        start = time.perf_counter()
        assert lib.llama_decode(ctx, batch) == 0
        return time.perf_counter() - start
    finally:
        lib.llama_batch_free(batch)
        lib.llama_free(ctx)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with threadpool_limits(1):
        numpy_model = engine.load_model("smollm2", backend="numpy", context_length=args.tokens + 8)
        ids = text_of(numpy_model, args.tokens)
        times = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            engine.score(numpy_model, ids)
            times.append(time.perf_counter() - start)
        print(f"numpy engine: {len(ids)} tokens scored in {min(times):.2f}-{max(times):.2f} s (goal 3 s)")

        model = engine.load_model("smollm2", backend="llama.cpp", threads=args.threads, context_length=args.tokens + 8)
        ours, theirs = [], []
        for _ in range(args.rounds):
            theirs.append(llama_cpp_evaluation(model, ids))
            start = time.perf_counter()
            engine.score(model, ids)
            ours.append(time.perf_counter() - start)
        ratios = [a / b for a, b in zip(ours, theirs)]
        print(f"llama.cpp, {args.threads} thread(s): engine.score {statistics.median(ours):.2f} s, llama.cpp's own "
              f"evaluation {statistics.median(theirs):.2f} s: {min(ratios):.2f}-{max(ratios):.2f}x (goal 1.2x)")  # fmt: skip
    print(f"command: python bench/score_speed.py --tokens {args.tokens} --threads {args.threads}")


if __name__ == "__main__":
    main()
