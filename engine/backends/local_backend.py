"""What a numpy model with a KV cache offers besides its forward pass: the backend half of the local context
(engine/backends/local.py), and the array cache's keep-aside for a rewind."""

from functools import cached_property

from engine.backends.local import LocalContext
from engine.core.contract import Capabilities


class ArrayCache:
    """keep_aside / put_back (LocalContext.rewound) for a preallocated cache of `k` and `v` arrays whose
    second-to-last axis is the position, `length` positions in use."""

    def keep_aside(self, start: int) -> tuple:
        """A copy of the positions from `start` on."""
        end = self.length
        return start, end, self.k[..., start:end, :].copy(), self.v[..., start:end, :].copy()

    def put_back(self, kept: tuple) -> None:
        """The positions kept aside, as they were (whatever was written there since)."""
        start, length, k, v = kept
        self.k[..., start:length, :], self.v[..., start:length, :] = k, v
        self.length = length


class LocalBackend:
    """What a numpy model with a KV cache offers besides its forward pass (engine.core.contract.Backend):
    subclasses give name, weights_sha256, tokenizer, end_token_ids, context_length, vocab_size, new_cache
    and forward_cached."""

    has_inside = False  # a model whose forward pass the engine runs sets it: inside(ids), unembed(residuals)
    residual_steering = False  # forward_cached takes residual_add [layers, d] (Session.steer_vector); residual_shape
    first_steerable_layer = 0  # the first layer residual_add may add after

    end_reason = "end of text"
    source = ""  # the file it came from; "" for the built-in model
    work_stopped = False  # stop_work(): every forward pass is refused, until stop_work(False)

    @cached_property
    def token_texts(self) -> dict[int, str]:
        """Each token's text, decoded once for all of this model's contexts (a session's first steps then
        decode nothing)."""
        return {}

    def stop_work(self, stopped: bool = True) -> None:
        """Thread-safe, for closing an app whose worker thread may be busy with this model: while stopped, every
        forward pass on it (in any thread) raises ValueError before it starts, so a loop of them (seeds, an
        expansion, a text being scored) ends at its next pass; stop_work(False) lets them run again."""
        self.work_stopped = stopped

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            full_distribution=True,
            local_sampling=True,
            local_tokenizer=True,
            chat_template=self.has_chat_template(),
            streaming=False,
            grammar=self.has_grammars(),
            inside=self.has_inside,
        )

    def has_chat_template(self) -> bool:
        return False

    def has_grammars(self) -> bool:
        return False

    def grammar(self, text: str):
        """A compiled GBNF grammar (allowed(), allows(id), accept(id), reset()); ValueError when it does not
        parse, or where this backend has no grammars."""
        raise ValueError(f'grammars need the llama.cpp backend ({self.name} runs elsewhere): pip install ".[llama]"')

    def chat_prompt(self, user_text: str) -> str:
        raise ValueError(f"{self.name} has no chat template: send the text as it is")

    def open_context(self) -> LocalContext:
        return LocalContext(self)

    def describe(self) -> dict:
        return {"name": self.name, "weights_sha256": self.weights_sha256}

    def close(self) -> None:
        pass  # nothing is held open
