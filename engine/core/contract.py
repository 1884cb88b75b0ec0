"""The backend contract: what a model offers the Session, and what one session's position state offers.

Modelled on llama.cpp's split of `llama_model` (weights, vocabulary, metadata: shared) and `llama_context`
(one sequence's state: its KV cache). A Backend is loaded once; each Session opens its own Context and
talks to nothing else, so the Session holds no backend-specific code. Two kinds of backend implement it:

    engine/backends/local.py     LocalContext (and local_backend.py, LocalBackend): a KV cache and the engine's sampler chain over
                                 the whole row of scores. The story model and GGUF files in numpy
                                 (engine/story, engine/backends/gguf), and llama.cpp (engine/backends/llamacpp,
                                 a LocalBackend whose cache is a llama_context) are all LocalBackends.
    engine/backends/remote/      an inference server: it samples, the engine reads its top-N probabilities

What a backend's `capabilities` say decides which methods beyond the base Context and Backend the core
calls (engine/core only ever asks the capability, never the type):

    full_distribution  Context is a LocalSampling: distributions, drawn, alternatives, rewound, score_chunks, rows_at
                       (the tree's expansion, many seeds, comparing two models, every stage shown)
    local_sampling     the same LocalSampling, and candidates/sample take prefix= (token healing)
    inside             Backend is an InsideBackend (inside, unembed) and Context has set_head_scales
    grammar            Backend.grammar(text) compiles a GBNF grammar (Settings.grammar)
    streaming          Context.sample(stream=True) keeps one request open; close_stream ends it

Ids are the model's token ids. `text` is always the session's text so far (prompt + every step's token):
a server without token-id prompts is sent text. A step that fails raises ValueError and leaves the
context as it was before the call. Arrays are numpy float32; V is the vocabulary size.
"""

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from engine.core.inside import Inside
from engine.core.settings import Settings
from engine.core.step_maker import Distributions
from engine.core.steps import Candidates, Step


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the window asks these, never the backend's type."""

    full_distribution: bool  # every token's score: every sampler stage can be shown (else a server's top N raw)
    local_sampling: bool  # the engine draws with its own seed: replay is bit for bit (else the server draws)
    local_tokenizer: bool  # tokenizing asks nobody (else a request: never from the GUI thread)
    chat_template: bool  # chat_prompt renders the model's own template
    streaming: bool  # several tokens per request: Session.step(stream=True) uses one open stream
    grammar: bool = False  # GBNF grammars as a stage: `Backend.grammar(text)` (llama.cpp's own grammar sampler)
    inside: bool = False  # per-layer states (logit lens, attention): `inside(ids)`, `unembed(residuals)` (numpy)


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...  # ValueError (UnknownCharacterError) names what it cannot encode

    def decode(self, ids) -> str: ...

    def token_bytes(self, token_id: int) -> bytes: ...  # a token's own bytes (it may hold part of a character)


class Context(Protocol):
    """One session's position state."""

    def candidates(self, ids: list[int], text: str, settings: Settings) -> Candidates:
        """The next position's distribution (top candidates at every stage), without taking a step. Contexts
        that sample locally also take `prefix=` (bytes token healing still has to spell), as sample does; the
        Session passes it only to them (a server refuses healing: it samples itself)."""

    def sample(
        self, ids: list[int], text: str, settings: Settings, random: Callable[[], float], stream: bool, remaining: int
    ) -> tuple[Step | None, bool]:
        """-> (the model's next step, or None where the backend ended the text; whether the text ends after
        it). random() gives the next uniform number of the session's stream (called once per drawn token);
        stream: keep one request open for the next `remaining` tokens, where the backend can."""

    def force(
        self, ids: list[int], text: str, token_ids: list[int], source: str, settings: Settings, options=None
    ) -> list[Step]:
        """Steps for tokens the model did not choose, each with the model's probability for it (options: a
        choice's recorded options, on the first step)."""

    def score(self, ids: list[int], settings: Settings) -> list[Step]:
        """Teacher forcing (engine.score): a forced step's record for each of ids[1:], each read after the ids
        before it; the context's own positions are not kept. Local contexts (full_distribution) also offer
        score_chunks(ids, settings): the same steps chunk by chunk, with every token's scores [c, V]."""

    def option_probabilities(self, ids: list[int], text: str, encoded: list[list[int]], settings: Settings):
        """-> [(probability under the settings, raw model probability)] of each whole option."""

    def feed(self, ids: list[int], token_ids: list[int]) -> None:
        """The tokens follow ids in the text now, with records the session already has (a branch of the tree
        put back, Session.goto): a local context computes their positions in one pass, a server nothing."""

    def truncate(self, length: int) -> None:
        """Forget every position from `length` on (a rewind); the positions before are kept, not recomputed."""

    def close_stream(self, steps: list[Step]) -> list[Step]:
        """End an open stream now (Stop, or any steering; nothing to do when none is open) -> the session's
        steps, or a new list where the stream had left some ids unknown (-1) and they are now known."""

    # optional: close() -> None, the context let go now (Session.close: a shared context's sequence back to the
    # scheduler, engine/backends/llamacpp/scheduler.py); a context without it is let go when collected


class LocalSampling(Context, Protocol):
    """A context that samples with the engine's own chain over the whole row (capabilities.full_distribution
    and local_sampling: every LocalContext). Called by expand.py, seeds.py, compare.py and session.py."""

    def distributions(
        self, ids: list[int], settings: Settings, xtc_draw: float | None = None, prefix: bytes | None = None
    ) -> Distributions:
        """The raw row at position len(ids) ([V] probabilities) and the row after every stage of the chain."""

    def drawn(
        self, ids: list[int], settings: Settings, random: Callable[[], float], prefix: bytes | None = None, dists=None
    ) -> Step:
        """The model's step at len(ids), drawn as sample draws it (XTC's chance first, then the token's own
        draw from random()); dists: distributions(ids, settings) where the caller has them (XTC off)."""

    def alternatives(
        self,
        ids: list[int],
        settings: Settings,
        token_ids: list[int],
        dists: Distributions,
        prefix: bytes | None = None,
    ) -> list[Step]:
        """A step ("expanded") for each of token_ids as the one after ids, all read from the one row at
        len(ids) and its distributions; nothing is drawn."""

    def rewound(self, length: int) -> AbstractContextManager[None]:
        """A with-block in which the context is as truncate(length) leaves it; the positions after are put
        back bit for bit when it ends."""

    @property
    def branches_per_pass(self) -> int:
        """The paths rows_at reads in one forward pass (llama.cpp: several sequences at once; else 1)."""

    def rows_at(self, held: list[int], paths: list[list[int]]) -> list[np.ndarray]:
        """The [V] row of scores at the end of each path (a tree expansion's level), the context holding `held`
        before and the last path after; the rows each path read alone gives, bit for bit."""

    def lockstep(self, ids: list[int], limit: int, nodes: bool = False):
        """Many paths continuing ids for at most `limit` tokens each, read level by level, every path's next row
        in one forward pass (many seeds, engine/core/seeds.py): an object with `sequences` (the most paths at
        once), `free` (the sequences not taken yet), `split(seq) -> seq` (a new branch sharing its parent's
        positions), `end(seq)`, `read([(seq, token, position)]) -> [n, V] rows` and `close()` (the context as it
        was); None where the backend reads one path at a time (llama.cpp's sequences:
        engine/backends/llamacpp/lockstep.py). The rows are those a path read alone gives, bit for bit. nodes: a
        tree expansion's nodes (engine/core/expand.py), up to `limit`, each read node a sequence of its own."""

    def score_chunks(self, ids: list[int], settings: Settings) -> Iterator[tuple[list[Step], np.ndarray]]:
        """Teacher forcing chunk by chunk: ([c] forced steps of ids[1:], [c, V] float32 scores they were read
        from); no row is kept between chunks."""


class HeadScaled(Context, Protocol):
    """A context whose backend runs its own forward pass (capabilities.inside)."""

    def set_head_scales(self, scales: np.ndarray | None) -> None:
        """Every head's output scaled in every forward pass from now on ([layers, heads] float32, None: as
        trained); the positions are dropped, so the next step reads the whole text again with them."""


class ResidualSteered(Context, Protocol):
    """A context whose backend can add to its residual stream (the backend's residual_steering: the numpy engines,
    llama.cpp through its control vectors; the backend gives residual_shape (layers, d) and first_steerable_layer)."""

    def set_residual_additions(self, additions: np.ndarray | None) -> None:
        """additions[L] ([layers, d] float32, None: nothing) added to the stream after layer L in every forward
        pass from now on (Session.steer_vector); the positions are dropped, as set_head_scales drops them."""


class Backend(Protocol):
    name: str
    weights_sha256: str  # what a trace records as the model's identity
    source: str  # where it came from: a file, a URL, "" for the built-in model
    context_length: int
    vocab_size: int | None  # None: a server that does not say
    tokenizer: Tokenizer
    end_token_ids: frozenset[int]
    end_reason: str  # the stop reason when an end token is drawn
    capabilities: Capabilities

    def open_context(self) -> Context: ...

    def chat_prompt(self, user_text: str) -> str: ...

    def has_chat_template(self) -> bool: ...  # this model's template renders here (its tokenizer's messages_prompt)

    def describe(self) -> dict: ...  # the trace's "model" field: name and weights_sha256 at least

    def close(self) -> None: ...


class InsideBackend(Backend, Protocol):
    """A backend whose forward pass the engine runs (capabilities.inside); engine/core/inside.py reads it."""

    def inside(self, ids: list[int], head_scales: np.ndarray | None = None, last: int | None = None,
               on_layer=None, residual_add: np.ndarray | None = None) -> Inside:  # fmt: skip
        """The full forward over ids: residuals [layers + 1, P, d] at the last P = min(last, T) positions
        (None: all T; a backend may skip the rest's final layer and output head), the last position's
        attention [layers, heads, T], the next token's scores [V]. on_layer(row, stream [P, d]), where the
        backend can, hands a row of residuals over as soon as it is computed (lens_grid.py); callers get
        every row in the result either way. residual_add [layers, d]: a steering direction's additions, row L
        added after layer L (the stream read includes them)."""

    def unembed(self, residuals: np.ndarray) -> np.ndarray:
        """[..., d] residual stream -> [..., V] scores (the final norm and the output projection)."""


class GrammarBackend(Backend, Protocol):
    """capabilities.grammar: llama.cpp's own grammar sampler as a stage."""

    def grammar(self, text: str):
        """A compiled GBNF grammar (allowed(), allows(id), accept(id), reset(), close()); ValueError naming
        where it does not parse."""
