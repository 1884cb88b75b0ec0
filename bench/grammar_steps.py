"""Grammar steps on SmolLM2 (llama.cpp): what "a"? xN grammars cost a first step, what the child-process check of
a new grammar costs, and how soon stop_work ends a grammar's step.

    python bench/grammar_steps.py [--rounds 3] [--sizes 10,20,40,60,80,100]

First step: llama.cpp's grammar sampler applied to the whole vocabulary (49,152 tokens) in one call, wall and
CPU seconds, against the engine's 32 chunks of it sorted by text (what a step runs). Check: engine.Session
creation with a grammar it has not seen (the child process: Python, llama.cpp's vocabulary, the parse and one
first step), then with the same grammar (its verdict remembered), then "a"? x150 and x300, refused by the
child's 2 s bound. Stop: 1,500 six-letter words as alternatives, stop_work a fifth into the step -> the
seconds until the step returns. Ranges (min-max) over rounds: the machine may be shared.
"""

import argparse
import random
import string
import threading
import time

import numpy as np

import engine
from engine.backends.llamacpp.grammar import _apply, apply_in_chunks, compile_grammar, text_order, token_data


def optional_a(n: int) -> str:
    return "root ::= " + " ".join(['"a"?'] * n)


def span(values, unit="s") -> str:
    return f"{min(values):.3f}-{max(values):.3f} {unit}"


def first_steps(model, sizes, rounds) -> None:
    llama, vocab, size = model.llama, model.llama.llama_model_get_vocab(model.handle), model.vocab_size
    order = text_order(model.tokenizer, size)
    print('first step of "a"? xN (whole vocabulary in one call: wall, CPU; in 32 sorted chunks: wall)')
    for n in sizes:
        sampler = compile_grammar(llama, vocab, optional_a(n))
        wall, cpu, chunked = [], [], []
        for _ in range(rounds):
            data = token_data(size)
            data["id"], began, began_cpu = np.arange(size), time.perf_counter(), time.thread_time()
            _apply(llama, sampler, data)
            wall.append(time.perf_counter() - began)
            cpu.append(time.thread_time() - began_cpu)
            began = time.perf_counter()
            apply_in_chunks(llama, sampler, token_data(size), order, lambda: False)
            chunked.append(time.perf_counter() - began)
        llama.llama_sampler_free(sampler)
        print(f"  x{n:<4} one call {span(wall)} (CPU {span(cpu)}); chunked {span(chunked)}")


def checks(model, rounds) -> None:
    fresh, again = [], []
    for round_ in range(rounds):
        grammar = f'root ::= ("yes" | "no") "."  # round {round_} {time.time()}'  # a text not seen before
        began = time.perf_counter()
        engine.Session(model, "Hi", max_new_tokens=1, grammar=grammar)
        fresh.append(time.perf_counter() - began)
        began = time.perf_counter()
        engine.Session(model, "Hi", max_new_tokens=1, grammar=grammar)
        again.append(time.perf_counter() - began)
    print(f"Session with a new grammar (child check) {span(fresh)}; the same grammar again {span(again)}")
    for n in (150, 300):
        began = time.perf_counter()
        try:
            engine.Session(model, "Hi", max_new_tokens=1, grammar=optional_a(n) + f"  # {time.time()}")
            outcome = "accepted"
        except ValueError as error:
            outcome = f"refused ({str(error)[:40]}...)"
        print(f'  "a"? x{n}: {outcome} after {time.perf_counter() - began:.2f} s')


def stop_latency(model, rounds) -> None:
    letters = random.Random(1)
    words = sorted({"".join(letters.choice(string.ascii_lowercase) for _ in range(6)) for _ in range(1500)})
    grammar = model.grammar("root ::= (" + " | ".join(f'"{word}"' for word in words) + ")+")
    whole, latency = [], []
    for _ in range(rounds):
        began = time.perf_counter()
        grammar.allowed()
        whole.append(time.perf_counter() - began)
        ended: dict = {}
        worker = threading.Thread(target=stopped_step, args=(grammar, ended))
        worker.start()
        time.sleep(whole[-1] / 5)
        stopped = time.perf_counter()
        model.stop_work()
        worker.join()
        model.stop_work(False)
        latency.append(ended.get("at", time.perf_counter()) - stopped)
    grammar.close()
    print(f"1,500 alternatives: a step {span(whole)}; stop_work -> the step returned in {span(latency)}")


def stopped_step(grammar, ended: dict) -> None:
    try:
        grammar.allowed()
    except ValueError:
        ended["at"] = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="10,20,40,60,80,100")
    args = parser.parse_args()
    model = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=256)
    first_steps(model, [int(n) for n in args.sizes.split(",")], args.rounds)
    checks(model, args.rounds)
    stop_latency(model, args.rounds)
    model.close()


if __name__ == "__main__":
    main()
