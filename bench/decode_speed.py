"""Greedy decoding speed on the story model: KV cache against full recompute of the prefix at every step.

    python bench/decode_speed.py [--rounds 3]

Both methods continue the first sentence of each of the 60 dev stories to the end of the story, in the
same run; the figure is generated tokens per second (best of the rounds), and their ratio. A third line
shows the product's path, engine.generate (a Session: the same KV-cache decode plus each step's record).
"""

import argparse
import time

import numpy as np

import engine
from engine.story import corpus as stories


def greedy_with_cache(model, ids, max_new_tokens):
    cache = model.new_cache()
    scores = model.forward_cached(ids, cache)[-1]
    out = []
    while len(out) < max_new_tokens:
        token = int(np.argmax(scores))
        out.append(token)
        if token in model.end_token_ids or cache.length == model.context_length:
            break
        scores = model.forward_cached([token], cache)[-1]
    return out


def greedy_full_recompute(model, ids, max_new_tokens):
    ids, out = list(ids), []
    while len(out) < max_new_tokens:
        token = int(np.argmax(model.scores(ids)[-1]))  # the whole prefix again, every step
        out.append(token)
        ids.append(token)
        if token in model.end_token_ids or len(ids) == model.context_length:
            break
    return out


def greedy_session(model, ids, max_new_tokens):
    prompt = model.tokenizer.decode(ids)
    return [s.token_id for s in engine.generate(model, prompt, max_new_tokens=max_new_tokens).steps]


def tokens_per_second(method, model, prompts, rounds):
    best = 0.0
    for _ in range(rounds):
        started, generated = time.perf_counter(), 0
        outputs = [method(model, ids, 60) for ids in prompts]
        generated = sum(len(o) for o in outputs)
        best = max(best, generated / (time.perf_counter() - started))
    return best, outputs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = engine.load_model()
    _train, dev, _test = stories.split()
    prompts = [model.tokenizer.encode(stories.first_sentence(s)) for s in dev]
    cached, cached_out = tokens_per_second(greedy_with_cache, model, prompts, args.rounds)
    full, full_out = tokens_per_second(greedy_full_recompute, model, prompts, args.rounds)
    session, session_out = tokens_per_second(greedy_session, model, prompts, args.rounds)
    assert cached_out == full_out == session_out, "the methods must generate the same tokens"
    print(f"greedy decoding, 60 dev stories, {sum(map(len, cached_out))} tokens, best of {args.rounds}")
    print(f"  KV cache        {cached:9.0f} tokens/s")
    print(f"  full recompute  {full:9.0f} tokens/s")
    print(f"  ratio           {cached / full:9.2f}x")
    print(f"  engine.generate {session:9.0f} tokens/s  (KV cache + sampling stages + step records)")
    print("command: python bench/decode_speed.py")


if __name__ == "__main__":
    main()
