"""What many sequences in one llama_decode give on this machine (issue 45), with llama.cpp's low-level API.

1. Exactness: is a sequence's row of scores the same, bit for bit, whatever else is in its batch? Each of N
   sequences (its own prompt) is read in a context of its own, fed one token at a time (as a Session feeds its
   steps): the reference. The same tokens go (1) in one llama_decode of N tokens a step, one per sequence, in one
   context of N sequences, and (2) in that context too, but one llama_decode per sequence. Rows are compared for
   N = 2, 4, 8, 16, `--depth` steps deep.
2. The ceiling: N sequences generating `--tokens` tokens each (greedy, argmax in numpy), one llama_decode per
   sequence per step against one llama_decode of N tokens per step, rounds interleaved. Prints tokens/s of each
   and the ratio.

3. 16 sequences each in a KV stream of its own (the server's scheduler), their tokens given in the order of their
   sequences against a random order each step.
4. Session.run_seeds of 16 seeds, and a tree expansion of 200 nodes (top 3), against the batched decode of 16 in
   the same round: each node read keeping its cells as a sequence of its own (a row costs a token) against the
   branches fed as a trie each pass (a level's cells removed after it).

    python bench/batching_ceiling.py [--threads 1] [--tokens 48] [--rounds 3] [--sizes 1,4,8,16]
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: E402
from engine.backends.llamacpp import library  # noqa: E402

PROMPTS = ["The old lighthouse keeper", "Once upon a time", "def add(a, b):", "The capital of France is",
           "In the beginning", "My favourite colour", "Water boils at", "She opened the door and",
           "import numpy as np", "The quick brown fox", "Dear Sir or Madam,", "1, 2, 3, 4,",
           "The weather today", "Chapter one:", "Roses are red,", "Question: what is"]  # fmt: skip


class Batch:
    """One llama_context of up to 16 sequences (unified KV cache) and its batch."""

    def __init__(self, model, positions=2048, sequences=16, unified=True):
        self.model, llama = model, model.llama
        params = llama.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = positions, 512, 512
        params.n_seq_max, params.kv_unified, params.no_perf = sequences, unified, True
        params.n_threads = params.n_threads_batch = model.threads
        self.ctx = llama.llama_init_from_model(model.handle, params)
        self.batch = llama.llama_batch_init(512, 0, sequences)
        self.vocab = model.vocab_size

    def decode(self, tokens) -> np.ndarray:
        """tokens: (token, position, sequence) each wanting its row -> float32 [len(tokens), vocab] (a copy)."""
        llama, batch = self.model.llama, self.batch
        for i, (token, pos, seq) in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, True
            batch.seq_id[i][0] = seq
        batch.n_tokens = len(tokens)
        library.errors.clear()
        if llama.llama_decode(self.ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        return np.ctypeslib.as_array(llama.llama_get_logits(self.ctx), shape=(len(tokens), self.vocab)).copy()

    def prompt(self, ids, seq) -> np.ndarray:
        return self.decode([(t, p, seq) for p, t in enumerate(ids)])[-1]

    def close(self):
        self.model.llama.llama_batch_free(self.batch)
        self.model.llama.llama_free(self.ctx)


def exactness(model, n: int, depth: int) -> tuple[tuple[int, float], tuple[int, float]]:
    """Against each sequence in a context of its own, fed one token at a time (as a Session feeds its steps): the
    rows that differ and the largest difference, (1) for the n sequences decoded together, one llama_decode of n
    tokens a step, (2) for the n sequences in one context each decoded alone (n llama_decodes a step)."""
    prompts = [model.tokenizer.encode(p) for p in PROMPTS[:n]]
    own = [Batch(model, sequences=1) for _ in range(n)]
    together, interleaved = Batch(model), Batch(model)
    lengths, nxt = [len(p) for p in prompts], []
    for seq, ids in enumerate(prompts):
        row = own[seq].prompt(ids, 0)
        together.prompt(ids, seq), interleaved.prompt(ids, seq)
        nxt.append(int(np.argmax(row)))
    found = [[0, 0.0], [0, 0.0]]
    for _ in range(depth):
        reference = [own[s].decode([(nxt[s], lengths[s], 0)])[0] for s in range(n)]
        batched = together.decode([(nxt[s], lengths[s], s) for s in range(n)])
        alone = [interleaved.decode([(nxt[s], lengths[s], s)])[0] for s in range(n)]
        for k, rows in enumerate((batched, alone)):
            for s in range(n):
                d = float(np.max(np.abs(rows[s] - reference[s])))
                found[k][0] += d != 0.0
                found[k][1] = max(found[k][1], d)
        lengths = [length + 1 for length in lengths]
        nxt = [int(np.argmax(row)) for row in reference]
    for ctx in (*own, together, interleaved):
        ctx.close()
    return tuple(found[0]), tuple(found[1])


def generation_rate(model, n: int, tokens: int, batched: bool, streams: bool = False, shuffled: bool = False) -> float:
    """Tokens/s of n sequences generating greedily; streams: a KV stream each (kv_unified off, as the server's
    scheduler); shuffled: each step's tokens in a random order of their sequences, not 0..n-1."""
    prompts = [model.tokenizer.encode(p) for p in PROMPTS[:n]]
    ctx = Batch(model, unified=not streams)
    nxt = [int(np.argmax(ctx.prompt(ids, s))) for s, ids in enumerate(prompts)]
    lengths = [len(p) for p in prompts]
    order, draw = list(range(n)), np.random.default_rng(0)
    started = time.perf_counter()
    for _ in range(tokens):
        if shuffled:
            order = [int(s) for s in draw.permutation(n)]
        if batched:
            rows = ctx.decode([(nxt[s], lengths[s], s) for s in order])
        else:
            rows = [ctx.decode([(nxt[s], lengths[s], s)])[0] for s in order]
        for s, row in zip(order, rows):
            nxt[s] = int(np.argmax(row))
        lengths = [length + 1 for length in lengths]
    seconds = time.perf_counter() - started
    ctx.close()
    return n * tokens / seconds


def seeds_rate(model, tokens: int, lockstep: bool) -> float:
    """Session.run_seeds of 16 seeds x `tokens` (T 0.8, top-k 40, top-p 0.95): tokens/s of the seeds' steps;
    lockstep False: the depth-first walk (one path at a time)."""
    session = engine.Session(model, PROMPTS[0], max_new_tokens=tokens, temperature=0.8, top_k=40, top_p=0.95)
    session.step()
    if not lockstep:
        session._context.lockstep = lambda *args, **kwargs: None
    started = time.perf_counter()
    run = session.run_seeds(range(16))
    seconds = time.perf_counter() - started
    return sum(len(steps) for steps in run.steps.values()) / seconds


def expansion_rate(model, kept_cells: bool, nodes: int = 200) -> tuple[float, float, float]:
    """Session.expand of `nodes` nodes (top 3, depth 8, the raw model) -> (rows read per second, tokens fed a row,
    seconds);
    kept_cells False: each pass's branches fed as a trie from the text (branches.py)."""
    from engine.core import expand

    session = engine.Session(model, PROMPTS[0], max_new_tokens=1, temperature=0.8, top_k=40, top_p=0.95)
    session.step()
    if not kept_cells:
        session._context.lockstep = lambda *args, **kwargs: None
    rows, add_children = [0], expand._add_children

    def counted(*args):  # called once for each row read
        rows[0] += 1
        add_children(*args)

    expand._add_children = counted
    try:
        before = session._context.timing.snapshot()
        started = time.perf_counter()
        session.expand(top_k=3, depth=8, budget=nodes, raw=True)
        seconds = time.perf_counter() - started
    finally:
        expand._add_children = add_children
    return rows[0] / seconds, session._context.timing.since(before).tokens / rows[0], seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="1,4,8,16")
    parser.add_argument("--depth", type=int, default=32)
    args = parser.parse_args()
    model = engine.load_model("smollm2", backend="llama.cpp", threads=args.threads, context_length=2048)
    print(f"SmolLM2 on llama.cpp, {args.threads} thread(s): {model.name}")
    print("exactness against each sequence in a context of its own fed a token at a time (rows that differ, largest)")
    for n in (2, 4, 8, 16):
        (differ, largest), (differ_alone, largest_alone) = exactness(model, n, args.depth)
        print(
            f"  n={n:2d}: one decode for all: {differ} of {n * args.depth} differ (largest {largest:.3g}); "
            f"one context, a decode each: {differ_alone} differ (largest {largest_alone:.3g})"
        )
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"ceiling: tokens/s, {args.tokens} tokens per sequence, greedy; one decode per sequence vs one for all")
    for n in sizes:
        alone, together = [], []
        for _ in range(args.rounds):
            alone.append(generation_rate(model, n, args.tokens, batched=False))
            together.append(generation_rate(model, n, args.tokens, batched=True))
        ratios = [b / a for a, b in zip(alone, together)]
        print(f"  n={n:2d}: one at a time {min(alone):.0f}-{max(alone):.0f}, batched {min(together):.0f}-"
              f"{max(together):.0f} tokens/s: {min(ratios):.2f}-{max(ratios):.2f}x")  # fmt: skip
    print("16 sequences in a KV stream each (the server's scheduler): their tokens in the order of their sequences vs "
          "in a random order each step")  # fmt: skip
    for _ in range(args.rounds):
        ordered = generation_rate(model, 16, args.tokens, batched=True, streams=True)
        shuffled = generation_rate(model, 16, args.tokens, batched=True, streams=True, shuffled=True)
        print(f"  in order {ordered:.0f} tokens/s, shuffled {shuffled:.0f}: in order {ordered / shuffled:.2f}x")
    print(f"Session.run_seeds, 16 seeds x {args.tokens} tokens (T 0.8, top-k 40, top-p 0.95), against the batched "
          "decode of 16 (greedy, argmax only) in the same round")  # fmt: skip
    for _ in range(args.rounds):
        ceiling = generation_rate(model, 16, args.tokens, batched=True)
        level, depth = seeds_rate(model, args.tokens, True), seeds_rate(model, args.tokens, False)
        print(f"  level by level {level:.0f} tokens/s ({level / ceiling:.2f}x of {ceiling:.0f}); depth first "
              f"{depth:.0f} ({depth / ceiling:.2f}x)")  # fmt: skip
    print("Session.expand, 200 nodes (top 3, depth 8, raw): rows read per second against the batched decode of 16")
    for _ in range(args.rounds):
        ceiling = generation_rate(model, 16, args.tokens, batched=True)
        (kept, kept_fed, kept_s), (trie, trie_fed, trie_s) = expansion_rate(model, True), expansion_rate(model, False)
        print(f"  each node's cells kept {kept:.0f} rows/s ({kept / ceiling:.2f}x of {ceiling:.0f}), {kept_fed:.2f} "
              f"tokens a row, {kept_s:.2f} s; a trie each pass {trie:.0f} ({trie / ceiling:.2f}x), {trie_fed:.2f} "
              f"tokens a row, {trie_s:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
