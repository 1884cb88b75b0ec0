"""Several branches of the tree read in one llama_decode (a tree expansion's level, engine/core/expand.py).

The cache's sequence 0 holds the text the branches continue. Each branch gets a sequence of its own, the
text shared into it (llama.cpp's unified KV cache: its cells are tagged, not copied), and the branches'
tokens go in as a trie: a token they share is fed once, tagged with every sequence that passes through it,
so each sequence attends to exactly its own branch's tokens. Each branch's last token gives a row of scores.

Measured on SmolLM2 at 1 thread: a token costs ~7 ms whatever the batch, a row of scores ~3 ms alone but ~1 ms
in a batch of 16, and a pass has its own cost; fed one by one, a branch also fed the tokens it shares with
its cousins again. The rows are the ones a branch read alone gives, bit for bit (tests/test_expand_branches.py).
"""

import numpy as np

from engine.backends.llamacpp import library

BRANCHES = 16  # sequences a context holds: the most branches one pass reads


def trie(branches) -> tuple[list[tuple[int, int, list[int]]], list[int]]:
    """Token lists -> the trie's entries (token, depth, the branches through it), each after its parent, the
    last branch's first, and the entry each branch ends at. (The branch the cache keeps goes first, so its cells
    come before the others': a cell the others leave free is never one before its own, which read later
    tokens of it wrongly here.)"""
    entries, index, ends = [], {}, [0] * len(branches)
    for b in [len(branches) - 1, *range(len(branches) - 1)]:
        branch = branches[b]
        for depth in range(len(branch)):
            key = tuple(branch[: depth + 1])
            if key not in index:
                index[key] = len(entries)
                entries.append((branch[depth], depth, []))
            entries[index[key]][2].append(b)
        ends[b] = index[tuple(branch)]
    return entries, ends


def forward_branches(model, branches, cache, residual_add=None) -> np.ndarray | None:
    """The scores after each branch (token lists continuing the cache's text) -> float32 [len(branches), vocab];
    None where one pass cannot hold them (more than the context's sequences, a trie longer than the batch, an empty text):
    the caller reads them one by one. The cache ends holding its text and the last branch."""
    start, n = cache.length, len(branches)
    entries, ends = trie(branches)
    if start == 0 or not 1 <= n <= cache.sequences or not all(branches) or len(entries) > cache.batch_size:
        return None
    if start + len(entries) > cache.positions:
        cache.grow(start + len(entries))
    ctx = cache.opened()
    cache.set_additions(residual_add)
    llama, batch, memory = model.llama, cache.batch, cache.memory
    seq_of = [b + 1 for b in range(n - 1)] + [0]  # the last branch stays in sequence 0
    for seq in seq_of[:-1]:
        llama.llama_memory_seq_cp(memory, 0, seq, -1, -1)
    wanted = set(ends)
    for i, (token, depth, through) in enumerate(entries):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = int(token), start + depth, len(through)
        for j, b in enumerate(through):
            batch.seq_id[i][j] = seq_of[b]
        batch.logits[i] = i in wanted
    batch.n_tokens = len(entries)
    library.errors.clear()
    status = llama.llama_decode(ctx, batch)
    for seq in seq_of[:-1]:
        llama.llama_memory_seq_rm(memory, seq, -1, -1)
    if status != 0:
        llama.llama_memory_seq_rm(memory, 0, start, -1)
        model.decode_failed(status, len(entries), start)
    cache.length = start + len(branches[-1])
    rank = {entry: r for r, entry in enumerate(sorted(wanted))}  # outputs come in the batch's order
    rows = np.ctypeslib.as_array(llama.llama_get_logits(ctx), shape=(len(wanted), model.vocab_size))
    return rows[[rank[e] for e in ends]]  # a copy (fancy indexing)
