"""LlamaCppCache: one session's llama_context (engine/backends/llamacpp/model.py's model runs it).

Made at its first use, FIRST_POSITIONS large (or as large as a text to score), and made again twice as large,
its memory copied over, when the text outgrows it: a context of 8,192 positions took 0.2-3 s to make here, one
of 512 0.01-0.02 s, and most texts are short. Its memory (the KV cache) is truncated for a rewind, kept aside
and put back for a look ahead; heads scaled and a steering direction set on it live with it.
"""

import ctypes
import weakref

import numpy as np

from engine.backends.llamacpp import library
from engine.backends.llamacpp.branches import BRANCHES

MAX_BATCH = 512  # tokens per llama_decode call (a longer feed is decoded in chunks)
NODES = 128  # sequences the context holds for a tree expansion's nodes (lockstep.py), each node's cells its own
FIRST_POSITIONS = 1024  # a session's context at first (it doubles as its text grows)


class LlamaCppCache:
    """One session's llama_context: `length` positions are in its memory; truncate(n) forgets the rest. The
    context is made at its first use, `positions` large (FIRST_POSITIONS, or what size_for says), and made
    again larger when the text outgrows it (grow), up to the model's context."""

    def __init__(self, model):  # a LlamaCppModel
        self.model = model
        self.positions = min(FIRST_POSITIONS, model.context_length)
        self.batch_size = min(MAX_BATCH, self.positions)
        self.length = 0
        self.head_scales = None  # [layers, heads] (Session.steer_heads): the context runs inside.HeadScaler
        self._scaler = None  # the callback of a context made with head_scales (referenced while it lives)
        self.ctx = self.batch = self.memory = None  # made by opened()
        self.additions = None  # the residual additions set on the context (set_additions); None: none
        self._made: list = []  # (ctx, batch) once made: what _free frees
        self._free = weakref.finalize(self, _free_context, model.llama, self._made)
        model._caches.add(self)

    @property
    def sequences(self) -> int:
        """The sequences the context holds: BRANCHES, at most its batch (llama.cpp aborted on more)."""
        return min(BRANCHES, self.batch_size)

    @property
    def node_sequences(self) -> int:
        """The sequences an expansion's nodes may take (each read node one): NODES, at most the batch."""
        return min(NODES, self.batch_size)

    def size_for(self, positions: int) -> None:
        """This cache will hold at most `positions` (a text to score): a context not made yet is made that large
        (a context of 8,192 positions took 0.2-3 s to make here, one of 512 0.01-0.02 s; the scores are the
        same, bit for bit)."""
        if self.ctx is None:
            self.positions = max(1, min(positions, self.model.context_length))
            self.batch_size = min(MAX_BATCH, self.positions)

    def grow(self, needed: int) -> None:
        """Room for `needed` positions (at most the model's context): a context not made yet is made that large;
        a made one is made again, at least twice as large, with the memory it holds copied over (llama.cpp's own
        sequence state: the same cells, so the same numbers, bit for bit)."""
        positions = min(self.model.context_length, max(needed, 2 * self.positions))
        kept = self.keep_aside(0) if self.ctx is not None and self.length else None
        _free_context(self.model.llama, self._made)
        self._made.clear()
        self.ctx = self.batch = self.memory = None
        self.additions = None  # the new context has no control vector yet: forward_cached sets it again
        self.positions, self.batch_size = positions, min(MAX_BATCH, positions)
        self.length = 0
        if kept is not None:
            self.opened()
            self.put_back(kept)

    def opened(self):
        """The llama_context, made now if it is not yet; ValueError once closed (or when llama.cpp cannot)."""
        if self.ctx is not None:
            return self.ctx
        if not self._free.alive:
            raise ValueError(f"{self.model.name} is closed")
        llama, model = self.model.llama, self.model
        params = llama.llama_context_default_params()
        params.n_ctx = self.positions
        params.n_batch = params.n_ubatch = self.batch_size
        params.n_seq_max = self.node_sequences  # a tree's branches, seeds' paths, an expansion's nodes
        params.kv_unified = True  # one buffer: the branches share the text's cells
        params.n_threads = params.n_threads_batch = self.model.threads
        params.no_perf = True
        if self.head_scales is not None:  # heads scaled: the attention weights as a tensor, then the callback
            from engine.backends.llamacpp.inside import HeadScaler, ggml

            self._scaler = HeadScaler(ggml(llama), self.head_scales)
            params.flash_attn_type = llama.LLAMA_FLASH_ATTN_TYPE_DISABLED
            self._scaler.c_function = llama.ggml_backend_sched_eval_callback(self._scaler)  # C holds a pointer
            params.cb_eval = self._scaler.c_function
        library.errors.clear()
        ctx = llama.llama_init_from_model(model.handle, params)
        if not ctx:
            raise ValueError(f"llama.cpp could not create a context of {self.positions} positions"
                             f"{library.error_suffix()}")  # fmt: skip
        model.abort_on_stop(ctx)
        self.batch = llama.llama_batch_init(self.batch_size, 0, BRANCHES)
        self.memory = llama.llama_get_memory(ctx)
        self._made.append((ctx, self.batch))
        self.ctx = ctx
        return ctx

    def set_additions(self, additions) -> None:
        """llama.cpp's control vector on this context: additions[L] ([layers, d] float32) added to the output of
        layer L, or None for none. llama.cpp has no slot for layer 0 (its buffer starts at layer 1; the range
        given is inclusive), which steering_table refuses first."""
        if additions is self.additions:
            return
        from engine.backends.llamacpp.inside import set_control_vector

        set_control_vector(self.model, self.opened(), additions)
        self.additions = additions

    def scale_heads(self, table) -> None:
        """Heads scaled from now on (None: as trained): an empty cache's context is made again, with the
        callback or without it (a session's context without scaled heads never carries one)."""
        same = (table is None) == (self.head_scales is None) and (
            table is None or np.array_equal(table, self.head_scales)
        )
        if same:
            return
        if self.length:
            raise ValueError("heads are scaled on an empty cache only (set_head_scales empties it)")
        _free_context(self.model.llama, self._made)
        self._made.clear()
        self.ctx = self.batch = self.memory = None
        self.additions = None  # the new context has no control vector yet: forward_cached sets it again
        self.head_scales = None if table is None else np.array(table, dtype=np.float32)

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} positions to {length}")
        if (
            self.ctx is not None
            and self._free.alive
            and not self.model.llama.llama_memory_seq_rm(self.memory, 0, length, -1)
        ):
            raise ValueError(f"llama.cpp could not truncate its memory to {length} positions")
        self.length = length

    def keep_aside(self, start: int) -> tuple:
        """The sequence's memory as it is (llama.cpp copies a sequence whole), for put_back (LocalContext.rewound)."""
        llama, ctx = self.model.llama, self.opened()
        size = llama.llama_state_seq_get_size(ctx, 0)
        data = (ctypes.c_uint8 * size)()
        if llama.llama_state_seq_get_data(ctx, data, size, 0) != size:
            raise ValueError(f"llama.cpp could not copy its memory of {self.length} positions{library.error_suffix()}")
        return self.length, data

    def put_back(self, kept: tuple) -> None:
        """The memory kept aside, as it was (whatever was written since)."""
        length, data = kept
        llama, ctx = self.model.llama, self.opened()
        llama.llama_memory_seq_rm(self.memory, 0, -1, -1)
        if not llama.llama_state_seq_set_data(ctx, data, len(data), 0):
            self.length = 0  # llama.cpp cleared the sequence: the next step reads the text again
            raise ValueError(f"llama.cpp could not put its memory of {length} positions back{library.error_suffix()}")
        self.length = length

    def close(self) -> None:
        self._free()


def _free_context(llama, made: list) -> None:
    for ctx, batch in made:
        llama.llama_batch_free(batch)
        llama.llama_free(ctx)
