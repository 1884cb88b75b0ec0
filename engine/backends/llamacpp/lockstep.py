"""Many paths continuing one text in lockstep, each a sequence of its own in the cache's context (many seeds from
one point, engine/core/seeds.py): one llama_decode reads every path's next token.

The cache's sequence 0 holds the text (`start` positions). A path that splits in two gets a sequence for its new
branch, its cells shared into it (llama.cpp's unified KV cache: the cells are tagged, not copied, nor read again);
a path that ends is fed no more, and its cells stay until the walk ends (see `end`). Each level, every live path's last token goes into one batch, one per
sequence, and each gives a row of scores. Measured (bench/batching_ceiling.py): those rows are the ones a context
of its own gives a token fed alone, bit for bit (SmolLM2, 1 and 2 threads, 16 sequences, 32 tokens deep); 16
sequences read together run 1.7-1.9x the tokens/s of one at a time.

A tree expansion (engine/core/expand.py's NodeCells) walks the same way with more sequences (the cache's
node_sequences): each node it reads is a split of its parent's, so a child's row costs its own token alone.
"""

import time

import numpy as np

from engine.backends.llamacpp import library


class Lockstep:
    def __init__(self, model, cache, start: int, residual_add=None, timing=None, sequences: int | None = None):
        """cache: holding the text's `start` positions (in sequence 0), and nothing else; timing: the context's
        ForwardTiming, which counts each pass; sequences: how many it may use (default cache.sequences)."""
        self.model, self.cache, self.start, self.timing = model, cache, start, timing
        self.sequences = cache.sequences if sequences is None else sequences
        self.free = list(range(self.sequences - 1, 0, -1))  # sequence 0 is the text's, then the first path's
        self.ctx = cache.opened()
        cache.set_additions(residual_add)

    def split(self, parent: int) -> int:
        """A sequence for a new branch of `parent`'s path: its cells, shared (not copied). ValueError: none free
        (a group of seeds needs at most one sequence a seed: each path ends in a leaf some seed reached)."""
        if not self.free:
            raise ValueError(f"more than {self.sequences} paths at once")
        seq = self.free.pop()
        self.model.llama.llama_memory_seq_cp(self.cache.memory, parent, seq, -1, -1)
        return seq

    def end(self, seq: int) -> None:
        """A path that ends: nothing is fed to it again. Its cells stay until close(): a sequence's cells removed
        mid-walk leave holes the others' next tokens fill, out of their order, and llama.cpp then gives other rows
        (measured: up to 0.7 in a logit), so a sequence is never given back nor used again."""

    def read(self, feeds) -> np.ndarray:
        """feeds: (sequence, token, position) of each live path's last token -> float32 [len(feeds), vocab]."""
        if self.cache.positions < max(position for _seq, _token, position in feeds) + 1:
            raise ValueError("the paths outgrew the context made for the text")
        llama, batch = self.model.llama, self.cache.batch
        for i, (seq, token, position) in enumerate(feeds):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = int(token), position, 1, True
            batch.seq_id[i][0] = seq
        batch.n_tokens = len(feeds)
        library.errors.clear()
        started = time.perf_counter()
        status = llama.llama_decode(self.ctx, batch)
        if self.timing is not None:
            self.timing.add(len(feeds), time.perf_counter() - started)
        if status != 0:
            self.close()
            self.model.decode_failed(status, len(feeds), self.start)
        rows = np.ctypeslib.as_array(llama.llama_get_logits(self.ctx), shape=(len(feeds), self.model.vocab_size))
        return rows.copy()

    def close(self) -> None:
        """The cache as it was: the text alone, in sequence 0."""
        llama, memory = self.model.llama, self.cache.memory
        for seq in range(1, self.sequences):
            llama.llama_memory_seq_rm(memory, seq, -1, -1)
        llama.llama_memory_seq_rm(memory, 0, self.start, -1)
        self.cache.length = self.start
