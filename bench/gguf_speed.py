"""SmolLM2-135M-Instruct (Q4_1 GGUF): the numpy engine against llama.cpp on the same file and 2 threads,
on a quiet machine and with a busy neighbour (another process spinning on one core).

    python bench/gguf_speed.py [--tokens 64] [--rounds 3] [--no-threads]

Prints decode tokens per second (greedy, one token per forward) and the time to the first token for a
200-token prompt, for the numpy engine (the bare model and through engine.Session, which also records each
step's distributions) and, when llama-cpp-python is installed, for llama.cpp, side by side in one run;
each figure is the range over the rounds. The busy neighbour is a separate Python process running a busy
loop, started before and killed after each busy measurement (and bounded in time by itself).
Then, unless --no-threads, the numpy engine's decode and prompt with BLAS held at 1 and at 2 threads,
quiet and busy: the measurements behind engine/backends/blas_threads.py's choices.
Goals on a 2-core machine: decode >= 25 tokens/s and >= 0.3x llama.cpp; first token <= 1 s; with a busy
neighbour, decode >= 0.5x the quiet figure.
"""

import argparse
import contextlib
import statistics
import subprocess
import sys
import time

import numpy as np
from timing import timed_steps

import engine
from engine.backends import blas_threads

PARAGRAPH = (
    "The history of computing is a story of people finding ways to make machines do arithmetic faster, "
    "then discovering that arithmetic was the least interesting thing the machines could do. Early "
    "mechanical calculators added and multiplied; later, stored-program computers followed instructions "
    "that could change their own course. Each step made new questions possible, and each answer raised "
    "the next question about what a machine might be asked to do. "
)
NEIGHBOUR_LIMIT_S = 300  # the busy loop ends by itself after this, even if this script dies


@contextlib.contextmanager
def busy_neighbour(on: bool = True):
    """A separate process spinning on one core while the block runs (nothing when on is False)."""
    if not on:
        yield
        return
    loop = f"import time\nend = time.monotonic() + {NEIGHBOUR_LIMIT_S}\nwhile time.monotonic() < end:\n    pass\n"
    process = subprocess.Popen([sys.executable, "-c", loop])
    try:
        time.sleep(0.3)  # let it start spinning
        yield
    finally:
        process.kill()
        process.wait()


@contextlib.contextmanager
def forced_threads(count):
    """Override engine/backends/blas_threads.py's choice for decode and prompt (None: keep the engine's)."""
    if count is None:
        yield
        return
    saved = blas_threads.DECODE_THREADS, blas_threads.PREFILL_THREADS
    blas_threads.DECODE_THREADS = blas_threads.PREFILL_THREADS = count
    try:
        yield
    finally:
        blas_threads.DECODE_THREADS, blas_threads.PREFILL_THREADS = saved


def prompt_ids(model, count=200):
    ids = model.tokenizer.encode(PARAGRAPH * 8)
    return ids[:count]


def numpy_engine(model, ids, tokens):
    cache = model.new_cache()
    started = time.perf_counter()
    scores = model.forward_cached(ids, cache, last_only=True)[-1]
    first = time.perf_counter() - started
    times = []
    for _ in range(tokens):
        token = int(np.argmax(scores))
        started = time.perf_counter()
        scores = model.forward_cached([token], cache, last_only=True)[-1]
        times.append(time.perf_counter() - started)
    return first, 1 / statistics.median(times)


def numpy_session(model, ids, tokens):
    prompt = model.tokenizer.decode(ids)
    session = engine.Session(model, prompt, max_new_tokens=tokens + 1)
    started = time.perf_counter()
    session.step()
    first = time.perf_counter() - started
    return first, 1 / statistics.median(timed_steps(session, tokens))


def llama_cpp_runner(path, warmup_ids):
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=str(path), n_ctx=2048, n_threads=2, n_threads_batch=2, verbose=False)
    vocab = llm.n_vocab()

    def last_logits():  # only the last position's scores, as the numpy engine computes them
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))

    def run(ids, tokens):
        llm.reset()
        started = time.perf_counter()
        llm.eval(ids)
        token = int(np.argmax(last_logits()))
        first = time.perf_counter() - started
        times = []
        for _ in range(tokens):
            token = int(np.argmax(last_logits()))
            started = time.perf_counter()
            llm.eval([token])
            times.append(time.perf_counter() - started)
        return first, 1 / statistics.median(times)

    run(warmup_ids, 1)  # warm up, as for the numpy engine
    return run


def span(values, fmt):
    low, high = min(values), max(values)
    return fmt.format(low) if fmt.format(low) == fmt.format(high) else f"{fmt.format(low)}-{fmt.format(high)}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-threads", action="store_true", help="skip the 1-versus-2 BLAS threads table")
    args = parser.parse_args()
    started = time.perf_counter()
    model = engine.load_model("smollm2", backend="numpy")
    load = time.perf_counter() - started
    ids = prompt_ids(model)
    model.forward_cached(ids[:16], model.new_cache())  # warm up: the first pass touches every page once
    llama = llama_cpp_runner(engine.smollm2_path(), ids[:16])
    runners = {"numpy engine (model.forward_cached)": lambda: numpy_engine(model, ids, args.tokens),
               "numpy engine (engine.Session)": lambda: numpy_session(model, ids, args.tokens)}  # fmt: skip
    if llama is not None:
        runners["llama.cpp (llama-cpp-python)"] = lambda: llama(ids, args.tokens)
    results = {(name, busy): [] for name in runners for busy in (False, True)}
    for _ in range(args.rounds):  # quiet and busy alternate, so both see the same drift of the machine
        for busy in (False, True):
            with busy_neighbour(busy):
                for name, run in runners.items():
                    results[name, busy].append(run())
    threads = {}
    if not args.no_threads:
        for _ in range(args.rounds):
            for busy in (False, True):
                with busy_neighbour(busy):
                    for count in (1, 2):
                        with forced_threads(count):
                            threads.setdefault((count, busy), []).append(numpy_engine(model, ids, args.tokens // 4))

    print(f"SmolLM2-135M-Instruct.Q4_1, prompt of {len(ids)} tokens, {args.tokens} greedy tokens, "
          f"{args.rounds} rounds (ranges); numpy BLAS threads: decode {blas_threads.DECODE_THREADS}, "
          f"prompt {blas_threads.PREFILL_THREADS}; llama.cpp 2 threads")  # fmt: skip
    print(f"  load (float32 cache): {load:.2f} s")
    if llama is None:
        print("  llama.cpp (llama-cpp-python)     not installed")
    for busy in (False, True):
        print("  with a busy neighbour (one process spinning):" if busy else "  quiet:")
        reference = results.get(("llama.cpp (llama-cpp-python)", busy))
        for name in runners:
            firsts, rates = zip(*results[name, busy])
            notes = []
            if reference and name.startswith("numpy"):
                ref_rate = statistics.median(r for _, r in reference)
                notes.append(f"{statistics.median(rates) / ref_rate:.2f}x llama.cpp")
            if busy:
                quiet = statistics.median(r for _, r in results[name, False])
                notes.append(f"{statistics.median(rates) / quiet:.2f}x quiet (goal >= 0.5x)")
            print(f"    {name:32s} first token {span(firsts, '{:.2f}')} s   decode {span(rates, '{:.1f}')} tokens/s"
                  + "".join(f"  {n}" for n in notes))  # fmt: skip
    if threads:
        print(f"  numpy engine (model.forward_cached) with BLAS held at 1 or 2 threads, {args.tokens // 4} tokens:")
        for (count, busy), values in sorted(threads.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            firsts, rates = zip(*values)
            print(
                f"    {'busy' if busy else 'quiet'} {count} thread{'s' * (count > 1)}: "
                f"200-token prompt {span(firsts, '{:.2f}')} s   decode {span(rates, '{:.1f}')} tokens/s"
            )
    print(f"command: python bench/gguf_speed.py --tokens {args.tokens} --rounds {args.rounds}")


if __name__ == "__main__":
    main()
