"""llama.cpp at 1, 2, ... threads side by side, through engine.Session as the window runs it: the time to
the first token (a fresh session: its llama_context, the prompt read, one step), the prompt's evaluation
speed, and decode tokens/s after the first token. The thread counts take turns within each round, so
each sees the same machine load; ranges over rounds.

    python bench/llamacpp_threads.py [--rounds 5] [--threads 1 2] [--tokens 32] [--busy 0] [--model smollm2]

--busy N spins N processes beside it (a compiler, a test run, another program: "beside any other work").
"""

import argparse
import multiprocessing
import os
import statistics
import time

import engine
from engine.backends.llamacpp import default_threads, load_llamacpp
from engine.backends.llamacpp.threads import physical_cores

CHAT_PROMPT = "What is the capital of France?"  # the window's SmolLM2 prompt, sent in the chat format
LONG_TEXT = ("In the early years of the fifteenth century, printers across Europe experimented with movable type, "
             "ink made from linseed oil, and presses adapted from those used to make wine. ")  # fmt: skip


def long_prompt(model, length=200):
    text = LONG_TEXT
    while len(model.tokenizer.encode(text)) < length:
        text += LONG_TEXT
    return model.tokenizer.decode(model.tokenizer.encode(text)[:length])


def one_run(model, prompt, tokens):
    """-> (seconds to the first token, prompt tokens/s, decode tokens/s after the first)."""
    started = time.perf_counter()
    session = engine.Session(model, prompt, max_new_tokens=tokens + 1, temperature=0)
    session.step()
    first = time.perf_counter()
    timing = session.timing.snapshot()
    count = 0
    while count < tokens and session.step() is not None:
        count += 1
    decode = count / (time.perf_counter() - first)
    return first - started, timing.tokens / timing.seconds, decode


def spin():
    while True:
        pass


def spread(values, digits=1):
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tokens", type=int, default=32, help="decode tokens after the first")
    parser.add_argument("--busy", type=int, default=0, help="processes spinning beside the bench")
    parser.add_argument("--model", default="smollm2", help="smollm2 or a GGUF file's path")
    args = parser.parse_args()
    path = engine.smollm2_path() if args.model == "smollm2" else args.model
    model = load_llamacpp(path, context_length=2048, threads=1)
    prompts = {"chat": model.chat_prompt(CHAT_PROMPT), "200-token": long_prompt(model)}
    print(f"{model.name}: {os.cpu_count()} CPUs, {physical_cores()} physical cores, default {default_threads()} "
          f"thread(s); {args.busy} busy process(es) beside; load {os.getloadavg()[0]:.1f}")  # fmt: skip
    busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for process in busy:
        process.start()
    results = {(name, n): [] for name in prompts for n in args.threads}
    try:
        for n in args.threads:  # warm up each count once
            model.threads = n
            one_run(model, prompts["chat"], 4)
        for _ in range(args.rounds):
            for name, prompt in prompts.items():
                for n in args.threads:
                    model.threads = n  # the next session's llama_context computes with n threads
                    results[name, n].append(one_run(model, prompt, args.tokens))
    finally:
        for process in busy:
            process.terminate()
    print(f"median (range) over {args.rounds} rounds; decode: {args.tokens} tokens after the first")
    print(f"{'prompt':10} {'threads':>7}  {'first token ms':>20}  {'prompt tokens/s':>20}  {'decode tokens/s':>20}")
    for (name, n), runs in results.items():
        first, prompt_rate, decode = zip(*runs)
        print(f"{name:10} {n:>7}  {spread([t * 1000 for t in first], 0):>20}  {spread(prompt_rate, 0):>20}  "
              f"{spread(decode):>20}")  # fmt: skip
    print(f"load after: {os.getloadavg()[0]:.1f}")
    model.close()


if __name__ == "__main__":
    main()
