"""SmolLM2-135M-Instruct (Q4_1 GGUF): the numpy engine against llama.cpp on the same file and 2 threads.

    python bench/gguf_speed.py [--tokens 64]

Prints decode tokens per second (greedy, one token per forward) and the time to the first token for a
200-token prompt, for the numpy engine (the bare model and through engine.Session, which also records each
step's distributions) and, when llama-cpp-python is installed, for llama.cpp, side by side in one run.
Goal on a 2-core machine: decode >= 25 tokens/s and >= 0.3x llama.cpp; first token <= 1 s.
"""

import argparse
import statistics
import time

import numpy as np

import engine
from timing import timed_steps

PARAGRAPH = (
    "The history of computing is a story of people finding ways to make machines do arithmetic faster, "
    "then discovering that arithmetic was the least interesting thing the machines could do. Early "
    "mechanical calculators added and multiplied; later, stored-program computers followed instructions "
    "that could change their own course. Each step made new questions possible, and each answer raised "
    "the next question about what a machine might be asked to do. "
)


def prompt_ids(model, count=200):
    ids = model.tokenizer.encode(PARAGRAPH * 8)
    return ids[:count]


def numpy_engine(model, ids, tokens):
    cache = model.new_cache()
    started = time.perf_counter()
    scores = model.decode(ids, cache, last_only=True)[-1]
    first = time.perf_counter() - started
    times = []
    for _ in range(tokens):
        token = int(np.argmax(scores))
        started = time.perf_counter()
        scores = model.decode([token], cache, last_only=True)[-1]
        times.append(time.perf_counter() - started)
    return first, 1 / statistics.median(times)


def numpy_session(model, ids, tokens):
    prompt = model.tokenizer.decode(ids)
    session = engine.Session(model, prompt, max_new_tokens=tokens + 1)
    started = time.perf_counter()
    session.step()
    first = time.perf_counter() - started
    return first, 1 / statistics.median(timed_steps(session, tokens))


def llama_cpp(path, ids, tokens):
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=str(path), n_ctx=2048, n_threads=2, n_threads_batch=2, verbose=False)
    vocab = llm.n_vocab()

    def last_logits():  # only the last position's scores, as the numpy engine computes them
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))

    llm.eval(ids[:16])  # warm up, as for the numpy engine
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    started = time.perf_counter()
    model = engine.load_model("smollm2")
    load = time.perf_counter() - started
    ids = prompt_ids(model)
    model.decode(ids[:16], model.new_cache())  # warm up: the first pass touches every page once
    rows = [("numpy engine (model.decode)", numpy_engine(model, ids, args.tokens)),
            ("numpy engine (engine.Session)", numpy_session(model, ids, args.tokens)),
            ("llama.cpp (llama-cpp-python)", llama_cpp(engine.smollm2_path(), ids, args.tokens))]  # fmt: skip
    print(f"SmolLM2-135M-Instruct.Q4_1, prompt of {len(ids)} tokens, {args.tokens} greedy tokens, 2 threads")
    print(f"  load (float32 cache): {load:.2f} s")
    reference = rows[2][1]
    for name, result in rows:
        if result is None:
            print(f"  {name:32s} not installed")
            continue
        first, rate = result
        ratio = f"  {rate / reference[1]:.2f}x llama.cpp" if reference and name.startswith("numpy") else ""
        print(f"  {name:32s} first token {first:5.2f} s   decode {rate:6.1f} tokens/s{ratio}")
    print("command: python bench/gguf_speed.py")


if __name__ == "__main__":
    main()
