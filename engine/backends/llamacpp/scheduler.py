"""Many sessions' forward passes in one llama_decode (the server's `--parallel N`, as llama-server's continuous
batching): one llama_context of the whole context's positions holds a sequence for each session (each in a KV
stream of its own), and a thread of its own decodes, each round, every token the sessions are waiting for: a generating
session's next token, and chunks of new prompts, up to a batch of 512.

Each session still samples, records and runs its rules itself, on its own thread, exactly as alone: its context
asks `Shared.forward_cached` for its rows and waits for them. A session waiting on a rule or a command simply
sends nothing; the others go on. Measured (bench/batching_ceiling.py): a sequence's rows in a batch are the
ones a context of its own gives, bit for bit, so a request decoded beside others replays alone bit for bit.

Each session gets its share of the context (its context_length: the model's // parallel, as llama-server's -np
splits -c). Steering from the inside (heads, a direction) is per context in llama.cpp: not with a shared one.
"""

import gc
import threading
import time
import weakref

import numpy as np

from engine.backends.llamacpp import library
from engine.core.checks import checked_ids

GATHER_S = 0.002  # after the first token waits: how long a round waits for the other sessions' tokens
BATCH = 512


class Shared:
    """The model as the sessions of a shared context see it: every attribute the model's, except the cache each
    session gets (a sequence of the shared context), its forward pass (through the scheduler) and its share of the
    context."""

    def __init__(self, model, parallel: int):
        if not 1 <= parallel <= 64:
            raise ValueError(f"parallel is the number of sequences decoded together: 1 to 64, not {parallel}")
        self._model, self.parallel = model, parallel
        self.context_length = model.context_length // parallel
        self.scheduler = Scheduler(model, parallel)
        self.branches_per_pass = 1  # a tree's branches one by one (its own sequences would need more slots)

    def __getattr__(self, name):
        return getattr(self._model, name)

    def open_context(self):
        from engine.backends.local import LocalContext

        return LocalContext(self)

    def new_cache(self):
        return Slot(self.scheduler, self.context_length)

    def forward_cached(self, ids, cache, last_only=False, head_scales=None, residual_add=None) -> np.ndarray:
        if head_scales is not None or residual_add is not None:
            raise ValueError("steering heads or a direction needs a context of its own: serve with --parallel 1")
        ids = checked_ids(ids, cache.length, self._model.vocab_size, self.context_length)
        return self.scheduler.forward(cache, list(ids), last_only)

    def forward_branches(self, branches, cache, residual_add=None):
        return None

    def lockstep(self, *args, **kwargs):
        return None

    def close(self) -> None:
        self.scheduler.close()


class Slot:
    """A session's sequence in the shared context: `length` positions are in it; truncate(n) forgets the rest.
    The sequence is taken at its first forward pass and given back when the session is let go."""

    def __init__(self, scheduler, positions: int):
        self.scheduler, self.positions, self.length = scheduler, positions, 0
        self._seq: list = [None]  # the sequence (None: not taken yet), in a list the finalizer holds, not the slot
        self._free = weakref.finalize(self, scheduler.give_back, self._seq)

    @property
    def seq(self) -> int | None:
        return self._seq[0]

    @seq.setter
    def seq(self, value: int) -> None:
        self._seq[0] = value

    def truncate(self, length: int) -> None:
        if length < self.length:
            if self.seq is not None:
                self.scheduler.forget(self.seq, length)
            self.length = length

    def close(self) -> None:
        """The sequence back to the scheduler now (else when the slot is collected)."""
        self._free()

    def size_for(self, positions: int) -> None:
        """(A context of its own is made as large as a text to score; the shared one is made once.)"""

    def keep_aside(self, start: int):
        raise ValueError("many seeds need a context of their own: serve with --parallel 1")


class Waiting:
    """One forward pass a session waits for: its tokens (fed in chunks as rounds have room), the rows it wants."""

    def __init__(self, slot, ids, last_only):
        self.slot, self.ids, self.last_only, self.fed, self.rows = slot, ids, last_only, 0, []
        self.done, self.error = threading.Event(), None


class Scheduler:
    def __init__(self, model, parallel: int):
        self.model, self.parallel = model, parallel
        self._cond = threading.Condition()  # guards the waiting list and the free sequences
        self._memory = threading.RLock()  # llama.cpp's context: one call at a time (a decode, a sequence's removal)
        self._waiting: list[Waiting] = []
        self._free = list(range(parallel - 1, -1, -1))
        self._closed = False
        self.ctx = self.batch = self.memory = None
        self.rounds = self.tokens = 0  # decodes run and tokens fed (the bench reads them)
        self._thread = threading.Thread(target=self._loop, name="llama.cpp scheduler", daemon=True)
        self._thread.start()
        model._caches.add(self)  # closed before the model (a sequence given back later finds no context)

    # --- the sessions' side ------------------------------------------------------------------------------------
    def forward(self, slot: Slot, ids: list[int], last_only: bool) -> np.ndarray:
        with self._cond:
            if self._closed:
                raise ValueError(f"{self.model.name} is closed")
            if slot.seq is None:
                while not self._free:  # every sequence is a session's: wait for one to be given back
                    gc.collect()  # a session let go without close() gives its sequence back when collected
                    self._cond.wait(1.0)
                    if self._closed:
                        raise ValueError(f"{self.model.name} is closed")
                slot.seq = self._free.pop()
            waiting = Waiting(slot, ids, last_only)
            self._waiting.append(waiting)
            self._cond.notify_all()
        waiting.done.wait()
        if waiting.error is not None:
            raise waiting.error
        slot.length += len(ids)
        return np.stack(waiting.rows)

    def forget(self, seq: int, start: int) -> None:
        with self._memory:
            if self.memory is not None:
                self.model.llama.llama_memory_seq_rm(self.memory, seq, start, -1)

    def give_back(self, holder: list) -> None:
        """A slot let go (its finalizer): its sequence's cells go and the sequence is free for another session."""
        seq = holder[0]
        if seq is None:
            return
        with self._memory:
            if self.memory is not None:
                self.model.llama.llama_memory_seq_rm(self.memory, seq, -1, -1)
        with self._cond:
            self._free.append(seq)
            self._cond.notify_all()

    def close(self) -> None:
        """The thread stopped and the context freed (the model's close() calls it first); a session still waiting
        hears that the model is closed."""
        with self._cond:
            self._closed = True
            for waiting in self._waiting:
                waiting.error = ValueError(f"{self.model.name} is closed")
                waiting.done.set()
            self._waiting.clear()
            self._cond.notify_all()
        self._thread.join(timeout=5)
        with self._memory:
            if self.ctx is None:
                return

            self.model.llama.llama_batch_free(self.batch)
            self.model.llama.llama_free(self.ctx)
            self.ctx = self.memory = None

    # --- the scheduler's thread --------------------------------------------------------------------------------
    def _opened(self):
        if self.ctx is None:
            llama, model = self.model.llama, self.model
            params = llama.llama_context_default_params()
            params.n_ctx, params.n_batch, params.n_ubatch = model.context_length, BATCH, BATCH
            # a stream of its own for each sequence (kv_unified off, n_ctx // parallel positions each): in a unified
            # cache, cells a finished session gave back are filled by the others' next tokens out of their order,
            # and llama.cpp then gives other rows (bench/batching_ceiling.py)
            params.n_seq_max, params.kv_unified, params.no_perf = self.parallel, False, True
            params.n_threads = params.n_threads_batch = model.threads
            library.errors.clear()
            self.ctx = llama.llama_init_from_model(model.handle, params)
            if not self.ctx:
                raise ValueError(f"llama.cpp could not create a shared context{library.error_suffix()}")
            self.batch = llama.llama_batch_init(BATCH, 0, 1)
            self.memory = llama.llama_get_memory(self.ctx)
        return self.ctx

    def _warm(self) -> None:
        """The context made, and one token decoded and forgotten (as llama-server warms up at its start)."""
        ctx, llama, batch = self._opened(), self.model.llama, self.batch
        batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.logits[0] = 0, 0, 1, True
        batch.seq_id[0][0], batch.n_tokens = 0, 1
        library.errors.clear()
        llama.llama_decode(ctx, batch)
        llama.llama_memory_seq_rm(self.memory, 0, -1, -1)

    def _round(self) -> list[tuple[Waiting, int, int]]:
        """Wait for tokens, then a moment for the other sessions' (each gives one a round while generating) ->
        what this round feeds: (waiting, from, to) of its ids, single tokens first, then prompts' chunks."""
        with self._cond:
            while not self._waiting and not self._closed:
                self._cond.wait()
            deadline = time.monotonic() + GATHER_S
            busy = self.parallel - len(self._free)
            while not self._closed and len(self._waiting) < busy and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            if self._closed:
                return []
            room, plan = BATCH, []
            for waiting in sorted(self._waiting, key=lambda w: len(w.ids) - w.fed):
                take = min(room, len(waiting.ids) - waiting.fed)
                if take:
                    plan.append((waiting, waiting.fed, waiting.fed + take))
                    room -= take
            # in the order of their sequences: llama.cpp decoded 16 streams' tokens given out of order 1.2-1.3x
            # slower (bench/batching_ceiling.py)
            return sorted(plan, key=lambda entry: entry[0].slot.seq)

    def _loop(self) -> None:
        try:  # made and warmed now, not at the first request (0.2-3 s to make; the first decode ~0.3 s more)
            with self._memory:
                self._warm()
        except ValueError:
            pass  # said to the first request, whose decode tries again
        while True:
            plan = self._round()
            if not plan:
                return
            try:
                with self._memory:
                    self._decode(plan)
            except ValueError as error:
                for waiting, _a, _b in plan:
                    waiting.error = error
            with self._cond:
                for waiting, _start, end in plan:
                    waiting.fed = end
                    if waiting.error is not None or waiting.fed == len(waiting.ids):
                        self._waiting.remove(waiting)
                        waiting.done.set()

    def _decode(self, plan) -> None:
        ctx, llama = self._opened(), self.model.llama
        batch, i, wanted = self.batch, 0, 0
        for waiting, start, end in plan:
            base = waiting.slot.length
            for k in range(start, end):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = waiting.ids[k], base + k, 1
                batch.seq_id[i][0] = waiting.slot.seq
                batch.logits[i] = not waiting.last_only or k == len(waiting.ids) - 1
                wanted += batch.logits[i]
                i += 1
        batch.n_tokens = i
        library.errors.clear()
        status = llama.llama_decode(ctx, batch)
        self.rounds, self.tokens = self.rounds + 1, self.tokens + i
        if status != 0:
            for waiting, _start, _end in plan:  # what the failed request's earlier chunks wrote goes too
                llama.llama_memory_seq_rm(self.memory, waiting.slot.seq, waiting.slot.length, -1)
            raise ValueError(f"llama.cpp could not decode {i} tokens for {len(plan)} sessions (status {status})"
                             f"{library.error_suffix()}")  # fmt: skip
        out = 0
        logits = llama.llama_get_logits(ctx)
        rows = np.ctypeslib.as_array(logits, shape=(wanted, self.model.vocab_size))
        for waiting, start, end in plan:
            for k in range(start, end):
                if not waiting.last_only or k == len(waiting.ids) - 1:
                    waiting.rows.append(rows[out].copy())
                    out += 1
