"""The local context: a KV cache and the engine's own sampler chain over the whole row of scores.

The story model and GGUF models in numpy share it: each offers `new_cache()` and
`forward_cached(ids, cache, last_only)` (float32 scores [T, vocab] for ids continuing the cache). The row
each step was chosen from is kept by position, so a rewind needs no forward pass; the last token of the
text is fed only when the next position's scores are needed.
"""

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from engine.backends.kept_rows import KeptRows
from engine.core import penalties
from engine.core.healing import healer_for
from engine.core.sampling import NO_INPUT, ChainInput
from engine.core.settings import Settings
from engine.core.step_maker import StepMaker
from engine.core.steps import Candidates, Step
from engine.core.timing import ForwardTiming
from engine.core.tree import shared_prefix

SCORE_CHUNK = 128  # the fewest positions per forward pass when a text is scored
MAX_SCORE_CHUNK = 512  # the most (llama.cpp's batch)
SCORE_BYTES = 128 * 2**20  # the rows one scoring pass may hold: 512 of SmolLM2's 49,152 scores (96 MiB)


def score_chunk(vocab_size: int) -> int:
    """Positions per forward pass when a text is scored: as many rows as SCORE_BYTES holds, from SCORE_CHUNK
    to MAX_SCORE_CHUNK (SmolLM2: 512; Gemma 3's 262,144 scores: 128). Few, large passes: each is one
    llama_decode whose threads wait for each other at every operation, and beside other work 128-row passes
    at 2 threads took up to 3.8x llama.cpp's one batch of the text. The passes compute with the model's threads
    whatever the load: unlike a one-token decode (engine/backends/llamacpp/threads.py), a pass of hundreds of
    positions loses little to a thread that waits for its core. SmolLM2, 1,000 tokens at 2 threads
    (bench/score_speed.py), against the one thread that the cores left idle allowed: beside one spinning
    process 16.1-16.6 s against 18.9-19.0 s, beside two 21.7 against 26.8 s, beside two bursty ones 14.3 against
    19.3 s; Gemma 3's 128-position passes beside one spinning process: the same either way (13.0-13.9 s).
    The scores are the same bit for bit at any thread count (tests/test_score_threads.py)."""
    return max(SCORE_CHUNK, min(MAX_SCORE_CHUNK, SCORE_BYTES // (4 * vocab_size)))


@dataclass
class GrammarState:
    """A grammar in use: it constrains the text from position `start`; `accepted` are the tokens since."""

    grammar: object
    text: str
    start: int
    accepted: list = field(default_factory=list)
    broken: bool = False  # a token it refused was taken (forced): it has no say from there


class LocalContext:
    def __init__(self, model):
        self.model = model
        self.cache = model.new_cache()
        self._rows = KeptRows()  # the rows of scores kept by position (kept_rows.py: not one a token)
        self._texts = model.token_texts  # token id -> text, decoded once per model (shared by every StepMaker)
        self._maker = StepMaker(model.tokenizer, Settings(), self._texts)
        self._dry: dict[tuple[str, ...], object] = {}  # DRY's breakers per set of breaker strings
        self._grammar: GrammarState | None = None
        self._head_scales: np.ndarray | None = None  # [layers, heads]: Session.steer_heads; None: as trained
        self._residual_add: np.ndarray | None = None  # [layers, d]: Session.steer_vector; None: nothing added
        self.timing = ForwardTiming()  # every forward pass this context ran (the window's prompt speed)

    # --- the contract ------------------------------------------------------------------------------------
    def candidates(self, ids, text, settings, prefix: bytes | None = None) -> Candidates:
        return self._maker_for(settings).candidates(self.distributions(ids, settings, None, prefix))

    def sample(self, ids, text, settings, random, stream=False, remaining=0, prefix=None) -> tuple[Step, bool]:
        """prefix: token healing's bytes still to spell (the step must keep to them)."""
        return self.drawn(ids, settings, random, prefix), False

    def distributions(self, ids, settings, xtc_draw: float | None = None, prefix: bytes | None = None, row=None):
        """The raw row at position len(ids) and the row after every stage of the chain (StepMaker's); row: the
        scores there, where the caller has them (rows_at)."""
        scores = self._scores(ids) if row is None else row
        return self._maker_for(settings).distributions(scores, self._given(ids, settings, xtc_draw, prefix))

    def drawn(self, ids, settings, random, prefix: bytes | None = None, dists=None, row=None) -> Step:
        """The model's step at position len(ids), drawn as every sampled step is: XTC's chance first (while XTC
        is on), then the token's own draw (none at temperature 0: the best left, the lowest id of ties).
        dists: the distributions, where the caller has them and XTC is off (many seeds at one node); row: the
        scores there, where the caller has them (lockstep)."""
        xtc_draw = random() if settings.active("xtc") else None  # XTC's chance, before the token's own draw
        if dists is None or xtc_draw is not None:
            dists = self.distributions(ids, settings, xtc_draw, prefix, row)
        if settings.temperature == 0:
            token_id, u = dists.final.best(), None
        else:
            u = random()
            token_id = dists.final.draw(u)
        healing = None if prefix is None else prefix.decode("utf-8", errors="replace")
        maker = self._maker_for(settings)
        scores = self._scores(ids) if row is None else row
        return maker.make(scores, token_id, "model", dists, u, xtc_draw=xtc_draw, healing=healing)

    def alternatives(self, ids, settings, token_ids, dists, prefix: bytes | None = None, row=None) -> list[Step]:
        """A step for each of these tokens as the one after ids (a tree expansion's children), all read from
        the one row at len(ids) (or `row`, rows_at's) and its distributions `dists`; nothing is drawn. prefix:
        what token healing had to spell there (recorded on the steps, as a sampled step records it)."""
        maker, scores = self._maker_for(settings), self._scores(ids) if row is None else row
        healing = None if prefix is None else prefix.decode("utf-8", errors="replace")
        return [maker.make(scores, token_id, "expanded", dists, healing=healing) for token_id in token_ids]

    def close(self) -> None:
        """The cache let go now (a shared context's sequence back to its scheduler), not when collected."""
        getattr(self.cache, "close", lambda: None)()

    def lockstep(self, ids, limit: int, nodes: bool = False):
        """Many paths continuing ids for at most `limit` tokens, every path's next row in one pass (llama.cpp's
        sequences: engine/backends/llamacpp/lockstep.py), or None: read them one by one. nodes: up to `limit` of
        a tree's nodes, each keeping its path's cells (expand.py)."""
        make = getattr(self.model, "lockstep", None)
        if make is None or self._head_scales is not None:
            return None
        self._scores(ids)  # the text's own row (as a session reads it), the cache holding the text
        self.truncate(len(ids))
        return make(self.cache, len(ids), limit, self._residual_add, self.timing, nodes)

    @property
    def branches_per_pass(self) -> int:
        """The branches rows_at reads in one forward pass (llama.cpp: several sequences; else one)."""
        return getattr(self.model, "branches_per_pass", 1)

    def rows_at(self, held, paths) -> list[np.ndarray]:
        """The row of scores at the end of each path (a tree's level, in its order), the cache holding `held`
        before and the last path after. One by one, each fed what it does not share with the one before;
        llama.cpp reads them in one pass (engine/backends/llamacpp/branches.py: the same rows, bit for bit)."""
        if len(paths) > 1 and self._head_scales is None and hasattr(self.model, "forward_branches"):
            self.truncate(min(shared_prefix(held, path) for path in paths))
            self._make_again(paths[0])
            kept = self.cache.length
            if self.model.work_stopped:
                raise ValueError(f"{self.model.name} was told to stop its work (stop_work): no forward pass runs")
            started = time.perf_counter()
            rows = self.model.forward_branches([path[kept:] for path in paths], self.cache, self._residual_add)
            if rows is not None:
                self.timing.add(sum(len(path) - kept for path in paths), time.perf_counter() - started)
                try:
                    self._check_finite(rows, len(paths[0]))
                except ValueError:
                    self.cache.truncate(kept)
                    raise
                self._rows.put(len(paths[-1]), rows[-1])
                return list(rows)
        rows = []
        for path in paths:
            self.truncate(shared_prefix(held, path))
            rows.append(self._scores(path))
            held = path
        return rows

    def force(self, ids, text, token_ids, source, settings, options=None) -> list[Step]:
        """One batched forward over the new positions: the last new token is not fed yet."""
        maker = self._maker_for(settings)
        rows = [self._scores(ids)]
        fed = self.cache.length
        try:
            if len(token_ids) > 1:
                rows += list(self._forward(list(ids[fed:]) + list(token_ids[:-1])))
            text_ids = np.asarray([*ids, *token_ids], dtype=np.int64)  # each step's history is a view of it
            steps = [
                maker.make(row, token_id, source, maker.distributions(row, self._given(text_ids[: len(ids) + i], settings)),
                           options=options if i == 0 else None)
                for i, (token_id, row) in enumerate(zip(token_ids, rows))
            ]  # fmt: skip
        except BaseException:
            self.cache.truncate(fed)  # nothing of these tokens stays: the session does not take them
            raise
        for position, row in enumerate(rows[1:], start=len(ids) + 1):
            self._rows.put(position, row)
        return steps

    def score(self, ids, settings) -> list[Step]:
        return [step for steps, _rows in self.score_chunks(ids, settings) for step in steps]

    def score_chunks(self, ids, settings):  # -> iterator of ([c] steps, [c, V] rows)
        """Teacher forcing from an empty cache, score_chunk positions per forward pass: the records of
        ids[1:], each read after the ids before it, with the rows they were read from (rows[i]: the
        distribution of the chunk's i-th token). No row is kept (1,000 positions of Gemma 3's 262,144
        scores would be 1 GB); engine.compare reads two models' rows side by side."""
        maker = self._maker_for(settings)
        llama_cpp = hasattr(self.cache, "size_for")
        if llama_cpp:  # a context as large as the text, made much sooner (the model's threads: see score_chunk)
            self.cache.size_for(len(ids))
        self.truncate(0)
        text_ids = np.asarray(ids, dtype=np.int64)  # each step's history is a view of it
        chunk = score_chunk(self.model.vocab_size)
        try:
            for start in range(0, len(ids) - 1, chunk):
                stop = min(len(ids) - 1, start + chunk)
                rows = self._forward(list(ids[start:stop]))  # [c, V]
                steps = [maker.make(row, ids[i + 1], "forced", maker.distributions(row, self._given(text_ids[: i + 1], settings)))
                         for i, row in enumerate(rows, start=start)]  # fmt: skip
                yield steps, rows
        finally:
            self.truncate(0)  # a scoring context keeps nothing: the next score starts from the first token

    def feed(self, ids, token_ids) -> None:
        """The tokens follow ids in the text now (a branch put back): one batched forward over the new
        positions, their rows kept by position; the last token is not fed yet (as after force)."""
        self._scores(ids)
        fed = self.cache.length
        if len(token_ids) > 1:
            rows = self._forward(list(ids[fed:]) + list(token_ids[:-1]))  # row i: position fed + i + 1
            for position, row in enumerate(rows, start=fed + 1):
                self._rows.put(position, row)

    def option_probabilities(self, ids, text, encoded, settings) -> list[tuple[float, float]]:
        maker = self._maker_for(settings)
        first = maker.distributions(self._scores(ids), self._given(ids, settings))  # every option's first token
        start = self.cache.length
        results = []
        for token_ids in encoded:
            later = []
            if len(token_ids) > 1:
                later = [maker.distributions(row, self._given([*ids, *token_ids[: i + 1]], settings))
                         for i, row in enumerate(self._forward(list(token_ids[:-1])))]  # fmt: skip
                self.cache.truncate(start)
            p_settings = p_raw = 1.0
            for token_id, dists in zip(token_ids, [first, *later]):
                p_settings *= float(dists.final.probs_at([token_id])[0])
                p_raw *= float(dists.raw[token_id])
            results.append((p_settings, p_raw))
        return results

    def set_head_scales(self, scales) -> None:
        """Each head's output scaled ([layers, heads] float32, or None: as trained) in every forward pass from
        now on: the cache is emptied, so the next step reads the whole text again with them (one batched
        forward), the same whenever it happens (replay makes the same passes)."""
        self._head_scales = scales
        self.truncate(0)

    def set_residual_additions(self, additions) -> None:
        """Add additions[L] ([layers, d] float32, or None: nothing) to the residual stream after layer L in every
        forward pass from now on; the cache is emptied, as set_head_scales does, for the same reason."""
        self._residual_add = additions
        self.truncate(0)

    def truncate(self, length: int) -> None:
        """Forget every position from `length` on. A batched forward that kept only its last row (the prompt's
        first read, the whole text read again after steer_heads) left no row at the positions inside it: where
        the row at `length` is not kept, the cache keeps one token less, so that the next step feeds that
        token and gets its row."""
        self.cache.truncate(self._cache_kept(length))
        self._rows.cut(length)

    def _cache_kept(self, length: int) -> int:
        """The cache positions truncate(length) keeps (one less where the row at `length` is not kept)."""
        return min(self.cache.length, length if length in self._rows or length == 0 else length - 1)

    @contextmanager
    def rewound(self, length: int):
        """The context as truncate(length) leaves it, for a look from there that must leave the positions after
        as they were (many seeds from an earlier token): those are kept aside and put back after, bit for bit
        (recomputing them in another chunking would change the numbers of every later step)."""
        rows, kept = self._rows.copy(), self.cache.keep_aside(self._cache_kept(length))
        self.truncate(length)
        try:
            yield
        finally:
            self.cache.put_back(kept)
            self._rows = rows

    def close_stream(self, steps):
        return steps  # nothing streams here

    # --- internals ---------------------------------------------------------------------------------------
    def _given(self, ids, settings: Settings, xtc_draw: float | None = None, prefix: bytes | None = None) -> ChainInput:
        """What the chain's stages look at besides the scores: the text's ids, XTC's draw, DRY's breakers, the
        tokens that keep to token healing's prefix."""
        breakers = None
        if settings.active("dry"):
            breakers = self._dry.get(settings.dry_sequence_breakers)
            if breakers is None:  # prepared once per model and set of breakers: it reads the whole vocabulary
                breakers = self._dry[settings.dry_sequence_breakers] = self._dry_breakers(
                    settings.dry_sequence_breakers
                )
        healing = None if prefix is None else healer_for(self.model.tokenizer, self.model.vocab_size).allowed(prefix)
        # while healing spells the cut end of the prompt (or of an inserted text), the grammar waits: it
        # constrains what comes after (from the token that completes the healing on; that token is free)
        grammar = (
            None if settings.grammar is None or prefix is not None else self._grammar_allowed(ids, settings.grammar)
        )
        if breakers is None and not settings.active("penalties"):  # no stage reads the ids
            if xtc_draw is None and healing is None and grammar is None:
                return NO_INPUT
            return ChainInput(NO_INPUT.history, xtc_draw, breakers, healing, grammar)
        return ChainInput(np.asarray(ids, dtype=np.int64), xtc_draw, breakers, healing, grammar)

    def _grammar_allowed(self, ids, text: str) -> np.ndarray | None:
        """The tokens the grammar allows at position len(ids): it constrains the text from the position where
        it was first used, advanced by every token since (again from its start after a rewind). After a token
        it refuses (forced), it has no say: None."""
        state = self._grammar
        if state is None or state.text != text or len(ids) < state.start:
            if state is not None:
                state.grammar.close()
            state = self._grammar = GrammarState(self.model.grammar(text), text, len(ids))
        taken = list(ids[state.start :])
        rewound = state.broken and len(taken) <= len(state.accepted)  # back before the token it refused
        if rewound or state.accepted != taken[: len(state.accepted)]:  # a rewind or another branch: start again
            state.grammar.reset()
            state.accepted, state.broken = [], False
        for token_id in taken[len(state.accepted) :]:
            if state.broken or not state.grammar.allows(token_id):
                state.broken = True
                break
            state.grammar.accept(token_id)
            state.accepted.append(token_id)
        if state.broken:
            return None
        allowed = state.grammar.allowed()
        if len(allowed) == 0:  # (llama.cpp allows the end tokens where the grammar is complete)
            raise ValueError(f"the grammar allows no token after the {len(state.accepted)} tokens it has "
                             "followed: nothing can come next; rewind, or change or clear the grammar")  # fmt: skip
        return allowed

    def _dry_breakers(self, strings) -> penalties.DryBreakers:
        """DRY's breakers for this vocabulary, from each token's own bytes (as llama.cpp detokenizes them)."""
        tokenizer = self.model.tokenizer

        def tokenize(data: bytes):
            try:
                return tokenizer.encode_fragment(data)
            except ValueError:  # this vocabulary cannot spell the rest of the breaker: no text holds it
                return (-1,)  # an id no text has, so this restart never matches

        texts = [tokenizer.token_bytes(i) for i in range(self.model.vocab_size)]
        return penalties.dry_breakers(texts, strings, tokenize)

    def _maker_for(self, settings: Settings) -> StepMaker:
        if self._maker.settings is not settings and self._maker.settings != settings:
            self._maker = StepMaker(self.model.tokenizer, settings, self._texts)
        return self._maker

    def _scores(self, ids) -> np.ndarray:
        """Scores for position len(ids): kept from before, or one forward over the ids not yet fed."""
        row = self._rows.get(len(ids))
        if row is None:
            self._make_again(ids)
            row = self._rows.get(len(ids))
        if row is None:
            fed = list(ids[self.cache.length :])
            row = self._forward(fed, last_only=True)[-1]
            self._rows.put(len(ids), row, alone=len(fed) == 1)
        return row

    def _make_again(self, ids) -> None:
        """Where the cache stands one short of a row that was let go (truncate to it), feed that token alone
        again, as it was first fed, before anything else: a pass of several tokens would give other numbers."""
        position = self._rows.again_at(self.cache.length) if len(ids) > self.cache.length else None
        if position is not None:
            self._rows.put(position, self._forward([ids[position - 1]], last_only=True)[-1], alone=True)

    def _forward(self, token_ids, last_only=False) -> np.ndarray:
        """The model's scores after feeding token_ids; a failed or non-finite forward leaves the cache as
        it was; none runs on a model told to stop its work (LocalBackend.stop_work)."""
        if self.model.work_stopped:
            raise ValueError(f"{self.model.name} was told to stop its work (stop_work): no forward pass runs")
        start = self.cache.length
        try:
            steer = {} if self._head_scales is None else {"head_scales": self._head_scales}
            if self._residual_add is not None:
                steer["residual_add"] = self._residual_add
            started = time.perf_counter()
            rows = self.model.forward_cached(token_ids, self.cache, last_only=last_only, **steer)
            self.timing.add(len(token_ids), time.perf_counter() - started)
            self._check_finite(rows, start + (0 if not last_only else len(token_ids) - 1), not last_only)
        except BaseException:
            self.cache.truncate(start)
            raise
        return rows

    def _check_finite(self, rows, position: int, by_row: bool = False) -> None:
        """A ValueError where the model gave a non-finite score (position: the first row's, by_row: the rows are
        consecutive positions), blaming the steering where some is in force."""
        # one check of the whole pass (count_nonzero: a third of all()'s cost on a row); which row only when one is bad
        if np.count_nonzero(np.isfinite(rows)) < rows.size:
            finite = np.isfinite(rows).all(axis=-1)
            position += int(np.argmin(finite)) if by_row else 0
            steered = [what for what, table in (("a direction", self._residual_add), ("head scales", self._head_scales))
                       if table is not None]  # fmt: skip
            cause = (f"with the steering in force ({' and '.join(steered)}): it is too strong for this model; "
                     "weaken or clear it" if steered else "its weights or its cache are damaged")  # fmt: skip
            raise ValueError(f"the model produced non-finite scores (NaN or inf) at position {position}: {cause}")
