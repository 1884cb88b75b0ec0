"""LlamaCppModel: a GGUF file run by llama.cpp behind the backend contract.

The model (weights, vocabulary) is loaded once; each session's cache is a llama_context of its own (made at its
first use; a text to score gets one as large as the text), whose memory (the KV cache) is truncated for a
rewind (llama_memory_seq_rm), so the kept prefix is not recomputed. stop_work() ends a decode in progress.
forward_cached decodes the new ids in one batch (chunks of n_batch), asks for scores only where they are
needed, and copies them out of llama.cpp's buffer as float32 [rows, vocab]; LocalContext does the rest.
"""

import ctypes
import os
import weakref
from pathlib import Path

import numpy as np

from engine.backends import blas_threads
from engine.backends.gguf.header import check_gguf_file, gguf_architecture, readable
from engine.backends.gguf.reader import file_sha256
from engine.backends.llamacpp import library
from engine.backends.llamacpp.threads import check_threads, default_threads
from engine.backends.llamacpp.tokenizer import LlamaCppTokenizer
from engine.backends.local import LocalBackend
from engine.core.checks import checked_ids

DEFAULT_CONTEXT = 8192  # the default context: the file's training context capped at this
MAX_BATCH = 512  # tokens per llama_decode call (a longer feed is decoded in chunks)
# a session's context starts this large and doubles as its text grows (LlamaCppCache.grow): a context of 8,192
# positions took 0.2-3 s to make here, one of 512 0.01-0.02 s, and most texts are short
FIRST_POSITIONS = 1024
ABORTED = 2  # llama_decode's status when its abort callback said stop


class LlamaCppCache:
    """One session's llama_context: `length` positions are in its memory; truncate(n) forgets the rest. The
    context is made at its first use, `positions` large (FIRST_POSITIONS, or what size_for says), and made
    again larger when the text outgrows it (grow), up to the model's context."""

    def __init__(self, model: "LlamaCppModel"):
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
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = model.threads
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
        self.batch = llama.llama_batch_init(self.batch_size, 0, 1)
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


def _report(progress, done: float, raised: list) -> bool:
    """llama.cpp's progress callback: an exception cannot cross into C, so it cancels the load (False) and is
    kept in `raised` to be raised once llama.cpp has returned (a cancelled load reaches the caller as such)."""
    try:
        progress(round(done * 1000), 1000)
    except BaseException as error:  # noqa: BLE001
        raised.append(error)
        return False
    return True


class LlamaCppModel(LocalBackend):
    """A GGUF file in llama.cpp (any architecture it supports), with the engine's sampler chain on top."""

    has_inside = True  # its layers through llama.cpp's graph callback (inside.py)
    _head = None  # the lens's output head (inside.OutputHead), read from the file at the first unembed
    residual_steering = True  # llama.cpp's control vectors (LlamaCppCache.set_additions)
    first_steerable_layer = 1  # llama.cpp's control vector has no slot for the first layer's output

    @property
    def residual_shape(self) -> tuple[int, int]:  # (layers, d): what residual_add indexes
        return self.llama.llama_model_n_layer(self.handle), self.llama.llama_model_n_embd(self.handle)

    def __init__(self, path, *, context_length=None, threads=None, gpu_layers=0, progress=None, weights_sha256=None):
        """progress(done, total) hears how far llama.cpp has read the file (done of 1000); weights_sha256: the
        file's sha256 when the caller has it (else it is computed here, after the load)."""
        path = Path(path)
        if threads is None:
            threads = default_threads()  # not the core count: threads.py says why
        check_threads(threads)  # 1 to the CPUs: more overran ggml (SIGSEGV) or spun for minutes
        if isinstance(gpu_layers, bool) or not isinstance(gpu_layers, int) or gpu_layers < -1:
            raise ValueError(f"gpu_layers must be a whole number >= -1 (-1: all), got {gpu_layers!r}")
        if context_length is not None and (
            isinstance(context_length, bool) or not isinstance(context_length, int) or context_length < 1
        ):
            raise ValueError(f"context size must be a whole number of at least 1, got {context_length!r}")
        check_gguf_file(path)
        self.llama = llama = library.llama()
        params = llama.llama_model_default_params()
        params.n_gpu_layers = gpu_layers  # no GPU here: the CPU path is what the tests cover
        raised: list[BaseException] = []
        if progress is not None:
            callback = llama.llama_progress_callback(lambda done, _data: _report(progress, done, raised))
            params.progress_callback = callback  # `callback` stays referenced until the load returns
        library.errors.clear()
        handle = llama.llama_model_load_from_file(os.fsencode(path), params)  # a name need not be UTF-8
        if raised:  # the progress callback raised: that is why the load stopped (a freed model, if any)
            if handle:
                llama.llama_model_free(handle)
            raise raised[0]
        if not handle:
            architecture = gguf_architecture(path)
            raise ValueError(f"{path}: llama.cpp cannot load this file (architecture {architecture!r})"
                             f"{library.error_suffix()}")  # fmt: skip
        self.handle = handle
        self._abort_flag = ctypes.create_string_buffer(2)  # library.abort_check's: b"\x01" in front stops decoding
        self._caches: weakref.WeakSet = weakref.WeakSet()
        self._grammars: weakref.WeakSet = weakref.WeakSet()
        self._grammar_order = None  # grammar_order()'s
        self._free = weakref.finalize(self, llama.llama_model_free, handle)
        try:
            self.trained_context = llama.llama_model_n_ctx_train(handle)
            if self.trained_context < 1:  # checks.py refuses such a file first; this, for a caller that did not
                raise ValueError(f"{path}: llama.cpp reads the model's context length as {self.trained_context}")
            if context_length is None:
                context_length = min(self.trained_context, DEFAULT_CONTEXT)
            elif context_length > self.trained_context:
                raise ValueError(f"context size {context_length} is larger than the model's "
                                 f"{self.trained_context} positions")  # fmt: skip
            self._context_length = context_length
            self.threads = threads
            self.gpu_layers = gpu_layers
            vocab = llama.llama_model_get_vocab(handle)
            template = llama.llama_model_chat_template(handle, None)
            self.tokenizer = LlamaCppTokenizer(llama, vocab, template.decode("utf-8") if template else None)
            self._vocab_size = self.tokenizer.vocab_size
            self.end_token_ids = frozenset(i for i in range(self._vocab_size) if llama.llama_vocab_is_eog(vocab, i))
            self.architecture = self._meta("general.architecture")
            self.name = readable(path.stem)
            self.source = str(path)
            # progress hears the hashing too (a file of gigabytes takes seconds): an exception it raises cancels
            self.weights_sha256 = weights_sha256 or file_sha256(
                path, each_block=progress and (lambda: progress(1000, 1000))
            )
        except BaseException:
            self._free()
            raise

    @property
    def context_length(self) -> int:
        return self._context_length

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def new_cache(self) -> LlamaCppCache:
        if not self._free.alive:
            raise ValueError(f"{self.name} is closed")
        return LlamaCppCache(self)

    def forward_cached(
        self, ids, cache: LlamaCppCache, last_only: bool = False, head_scales=None, residual_add=None
    ) -> np.ndarray:
        """llama.cpp's scores for ids continuing the cache -> float32 [len(ids), vocab] (or [1, vocab]);
        head_scales: [layers, heads], each head's output scaled (inside.HeadScaler), None: as trained; residual_add:
        [layers, d] added to the stream after each layer (llama.cpp's control vector), None: none."""
        ids = checked_ids(ids, cache.length, self._vocab_size, self.context_length)
        if not self._free.alive or not cache._free.alive:
            raise ValueError(f"{self.name} is closed")
        if cache.length + len(ids) > cache.positions:
            cache.grow(cache.length + len(ids))
        cache.scale_heads(head_scales)
        ctx = cache.opened()
        cache.set_additions(residual_add)
        llama, batch, start, total = self.llama, cache.batch, cache.length, len(ids)
        rows = []
        for chunk in range(0, total, cache.batch_size):
            part = ids[chunk : chunk + cache.batch_size]
            n = len(part)
            wanted = [not last_only or chunk + i == total - 1 for i in range(n)]
            for i, token in enumerate(part):
                batch.token[i] = int(token)
                batch.pos[i] = start + chunk + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = wanted[i]
            batch.n_tokens = n
            library.errors.clear()
            status = llama.llama_decode(ctx, batch)
            scaler = cache._scaler
            if scaler is not None and scaler.error is not None:  # the callback failed: the decode was stopped
                error, scaler.error = scaler.error, None
                llama.llama_memory_seq_rm(cache.memory, 0, start, -1)
                raise ValueError(f"scaling {self.name}'s heads failed: {error}") from error
            if status != 0:
                llama.llama_memory_seq_rm(cache.memory, 0, start, -1)
                if status == ABORTED and self.work_stopped:
                    raise ValueError(f"{self.name} was told to stop its work (stop_work): decoding stopped")
                raise ValueError(f"llama.cpp could not decode {n} tokens at position {start + chunk} "
                                 f"(status {status}){library.error_suffix()}")  # fmt: skip
            cache.length = start + chunk + n
            outputs = sum(wanted)
            if outputs:
                pointer = llama.llama_get_logits(ctx)
                rows.append(np.ctypeslib.as_array(pointer, shape=(outputs, self._vocab_size)).copy())
        return rows[0] if len(rows) == 1 else np.concatenate(rows)

    @property
    def heads_shape(self) -> tuple[int, int]:  # (layers, heads): what head_scales index
        return self.n_layers, self.llama.llama_model_n_head(self.handle)

    @property
    def n_layers(self) -> int:
        return self.llama.llama_model_n_layer(self.handle)

    def inside(self, ids, head_scales=None, last=None, on_layer=None, residual_add=None) -> "Inside":  # noqa: F821
        """One decode of ids in an inspection context of its own (inside.py): the residual stream at every
        layer (at the last `last` positions: only they are outputs), the last position's attention, the scores;
        head_scales [layers, heads] scales heads' outputs; on_layer(row, stream) as each layer is computed;
        residual_add [layers, d] as the control vector (Session.steer_vector's table)."""
        from engine.backends.llamacpp.inside import inspect
        from engine.core.inside import kept_positions

        ids = checked_ids(ids, 0, self._vocab_size, self.context_length)
        kept = kept_positions(len(ids), last)
        if self.work_stopped:
            raise ValueError(f"{self.name} was told to stop its work (stop_work): no forward pass runs")
        if not self._free.alive:
            raise ValueError(f"{self.name} is closed")
        return inspect(self, ids, head_scales, kept, on_layer, residual_add)

    def unembed(self, residuals) -> np.ndarray:  # [..., d] -> [..., vocab]: the final norm and output matrix
        if self._head is None:
            from engine.backends.llamacpp.inside import OutputHead, ggml

            self._head = OutputHead(ggml(self.llama), Path(self.source))
        with blas_threads.for_tokens(max(1, np.size(residuals) // self.residual_shape[1])):  # rows: a prompt's
            return self._head(residuals)

    def abort_on_stop(self, ctx) -> None:
        """stop_work() ends a decode in progress on ctx at its next graph node."""
        check = library.abort_check(self.llama)
        if check is not None:
            self.llama.llama_set_abort_callback(ctx, check, ctypes.addressof(self._abort_flag))

    def stop_work(self, stopped: bool = True) -> None:
        """LocalBackend.stop_work; a decode in progress on any of this model's contexts also ends, at its next
        node of the graph (llama_decode returns ABORTED)."""
        super().stop_work(stopped)
        self._abort_flag[0] = 1 if stopped else 0

    def has_grammars(self) -> bool:
        return True

    def grammar(self, text: str):
        from engine.backends.llamacpp.grammar import Grammar

        if not self._free.alive:
            raise ValueError(f"{self.name} is closed")
        grammar = Grammar(self, text)
        self._grammars.add(grammar)  # freed before the model (it holds the model's vocabulary)
        return grammar

    def grammar_order(self):
        """Every token id sorted by its text, for a grammar's chunks (grammar.py); made once: 0.25 s here."""
        if self._grammar_order is None:
            from engine.backends.llamacpp.grammar import text_order

            self._grammar_order = text_order(self.tokenizer, self._vocab_size)
        return self._grammar_order

    def has_chat_template(self) -> bool:
        return bool(self.tokenizer.chat_template)

    def chat_prompt(self, user_text: str) -> str:
        return self.tokenizer.chat_prompt(user_text)

    def describe(self) -> dict:
        return {"name": self.name, "weights_sha256": self.weights_sha256, "backend": "llama.cpp"}

    def close(self) -> None:
        """Free every session's context, then the model; a later step says the model is closed."""
        for cache in list(self._caches):
            cache.close()
        for grammar in list(self._grammars):
            grammar.close()
        self.tokenizer.close()
        self._free()

    def _meta(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(256)
        n = self.llama.llama_model_meta_val_str(self.handle, key.encode(), buffer, len(buffer))
        return buffer.value.decode("utf-8", "replace") if n >= 0 else None
