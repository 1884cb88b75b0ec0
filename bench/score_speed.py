"""Scoring 1,000 tokens of text on SmolLM2 (issue 15's goals: <= 3 s on the numpy engine; <= 1.2x llama.cpp's
own prompt evaluation on the llama.cpp backend), side by side in one run, same file, same threads. llama.cpp's
own evaluation is one llama_decode of the whole text asking for every position's logits (what scoring
needs), in C; engine.score adds each token's record (the top 20 at every stage, entropy, surprisal, ranks).

Issue 30: at 1 and at 2 llama.cpp threads, engine and llama.cpp side by side (interleaved round by round),
each round with the cores the rest of the machine kept busy; engine.score's passes are score_chunk positions
large (512 for SmolLM2), with the model's threads whatever the load (score_chunk in engine/backends/local.py).
--chunk N forces N positions per pass (128: before issue 30). Run it beside a spinning process (or two) for the
busy rows: `python -c "while True: pass" &`.

    python bench/score_speed.py [--tokens 1000] [--threads 1 2] [--rounds 3] [--chunk N] [--no-numpy]
"""

import argparse
import statistics
import time

from threadpoolctl import threadpool_limits

import engine
import engine.backends.local
from engine.backends.llamacpp.library import llama
from engine.core.cpu_load import busy_cores

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


def side_by_side(threads: int, tokens: int, rounds: int) -> None:
    """engine.score against llama.cpp's own evaluation of the same ids at this many threads."""
    model = engine.load_model("smollm2", backend="llama.cpp", threads=threads, context_length=tokens + 8)
    ids = text_of(model, tokens)
    ratios, busy = [], []
    for _ in range(rounds):
        busy.append(busy_cores())
        theirs = llama_cpp_evaluation(model, ids)
        start = time.perf_counter()
        engine.score(model, ids)
        ours = time.perf_counter() - start
        ratios.append(ours / theirs)
        print(f"  {threads} thread(s), {busy[-1]:.1f} cores busy: engine.score {ours:.2f} s, llama.cpp {theirs:.2f} s "
              f"({ours / theirs:.2f}x)")  # fmt: skip
    print(f"SmolLM2 on llama.cpp, {threads} thread(s): engine / llama.cpp {min(ratios):.2f}-{max(ratios):.2f}x "
          f"(median {statistics.median(ratios):.2f}; other work {min(busy):.1f}-{max(busy):.1f} cores; goal 1.2x)")  # fmt: skip
    model.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=None, help="positions per scoring pass (default: score_chunk)")
    parser.add_argument("--no-numpy", action="store_true")
    args = parser.parse_args()
    if args.chunk is not None:
        engine.backends.local.score_chunk = lambda vocab_size: args.chunk
    with threadpool_limits(1):
        if not args.no_numpy:
            numpy_model = engine.load_model("smollm2", backend="numpy", context_length=args.tokens + 8)
            ids = text_of(numpy_model, args.tokens)
            times = []
            for _ in range(args.rounds):
                start = time.perf_counter()
                engine.score(numpy_model, ids)
                times.append(time.perf_counter() - start)
            print(f"numpy engine: {len(ids)} tokens scored in {min(times):.2f}-{max(times):.2f} s (goal 3 s)")
        for threads in args.threads:
            side_by_side(threads, args.tokens, args.rounds)
    chunk = f" --chunk {args.chunk}" if args.chunk else ""
    print(f"command: python bench/score_speed.py --tokens {args.tokens} --threads {' '.join(map(str, args.threads))}"
          f" --rounds {args.rounds}{chunk}")  # fmt: skip


if __name__ == "__main__":
    main()
