"""LlamaCppModel: a GGUF file run by llama.cpp behind the backend contract.

The model (weights, vocabulary) is loaded once; each session's cache is a llama_context of its own (cache.py:
made at its first use, grown as its text grows), whose memory (the KV cache) is truncated for a rewind
(llama_memory_seq_rm), so the kept prefix is not recomputed; the last prompt read is kept for the next
context given the same one (prompt_memo.py). stop_work() ends a decode in progress.
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
from engine.backends.llamacpp.branches import BRANCHES, forward_branches
from engine.backends.llamacpp.cache import LlamaCppCache
from engine.backends.llamacpp.lockstep import Lockstep
from engine.backends.llamacpp.prompt_memo import PromptMemo
from engine.backends.llamacpp.threads import check_threads, default_threads
from engine.backends.llamacpp.tokenizer import LlamaCppTokenizer
from engine.backends.local_backend import LocalBackend
from engine.core.checks import checked_ids

DEFAULT_CONTEXT = 8192  # the default context: the file's training context capped at this
ABORTED = 2  # llama_decode's status when its abort callback said stop


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
        self.prompt_memo = PromptMemo()  # the last prompt read, for the next context given the same one
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
        if start == 0 and (kept := self.prompt_memo.recall(ids, last_only, cache)) is not None:
            return kept
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
            if status != 0 or (scaler is not None and scaler.error is not None):
                # a failed or stopped decode leaves nothing, whichever batch it was in: the memory and the length
                # go back to where this call began (the batches before it were written: cache.length says so)
                llama.llama_memory_seq_rm(cache.memory, 0, start, -1)
                cache.length = start
            if scaler is not None and scaler.error is not None:  # the callback failed: the decode was stopped
                error, scaler.error = scaler.error, None
                raise ValueError(f"scaling {self.name}'s heads failed: {error}") from error
            if status != 0:
                self.decode_failed(status, n, start + chunk)
            cache.length = start + chunk + n
            outputs = sum(wanted)
            if outputs:
                pointer = llama.llama_get_logits(ctx)
                rows.append(np.ctypeslib.as_array(pointer, shape=(outputs, self._vocab_size)).copy())
        rows = rows[0] if len(rows) == 1 else np.concatenate(rows)
        if start == 0:
            self.prompt_memo.remember(ids, last_only, cache, rows)
        return rows

    def decode_failed(self, status: int, tokens: int, position: int):
        """The ValueError for a llama_decode that returned `status` (its memory already truncated)."""
        if status == ABORTED and self.work_stopped:
            raise ValueError(f"{self.name} was told to stop its work (stop_work): decoding stopped")
        raise ValueError(f"llama.cpp could not decode {tokens} tokens at position {position} "
                         f"(status {status}){library.error_suffix()}")  # fmt: skip

    branches_per_pass = BRANCHES  # LocalContext.rows_at reads this many branches in one pass

    def forward_branches(self, branches, cache: LlamaCppCache, residual_add=None) -> np.ndarray | None:
        """The scores after each branch continuing the cache (a tree's level) in one pass -> float32 [n, vocab],
        or None where one pass cannot hold them (branches.py); the cache ends holding the last branch."""
        for branch in branches:
            checked_ids(branch, cache.length, self._vocab_size, self.context_length)
        if not self._free.alive or not cache._free.alive:
            raise ValueError(f"{self.name} is closed")
        if cache.head_scales is not None:  # heads scaled: their callback sees one sequence; read one by one
            return None
        return forward_branches(self, branches, cache, residual_add)

    def lockstep(self, cache: LlamaCppCache, start: int, limit: int, residual_add=None, timing=None,
                 nodes: bool = False) -> Lockstep | None:  # fmt: skip
        """Up to cache.sequences paths continuing the cache's `start` positions for at most `limit` tokens each, one
        llama_decode a level (lockstep.py), or None where the context cannot hold them (read one by one). nodes: a
        tree's nodes instead, up to `limit` of them, each a sequence of its own holding its path's cells."""
        if not self._free.alive or not cache._free.alive:
            raise ValueError(f"{self.name} is closed")
        sequences = cache.node_sequences if nodes else cache.sequences
        cells = start + (min(limit, sequences) if nodes else BRANCHES * limit)  # the unified cache holds them all
        if cache.head_scales is not None or cache.length != start or cells > self.context_length:
            return None
        if cells > cache.positions:
            cache.grow(cells)
        return Lockstep(self, cache, start, residual_add, timing, sequences)

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
