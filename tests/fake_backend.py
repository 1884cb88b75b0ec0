"""Fake backends for testing the Session's own rules without a real model (issue 12).

FakeBackend is a bigram model: eight character tokens, and the scores of the next token depend only on the
token before, read from a fixed table (TABLE). It subclasses LocalBackend, so the Session talks to the real
LocalContext and the engine's real sampler chain; every expected value in a test can be worked out from
the table by hand. It records how many positions each forward pass fed (`calls`), so tests can check
batching, and the cache records the ids it holds.

FakeStreamingBackend is a server-like backend (local_sampling=False, streaming=True,
full_distribution=False): its "server" continues greedily by the table and reads the text it is sent,
never the ids. A stream gives tokens by their text only (id -1, as a text-only server does) until
close_stream fills the ids in; `fail_after` makes a stream fail after that many tokens; the end token
ends the text without a step (the server's finish reason "stop").
"""

import hashlib
import math
from dataclasses import replace

import numpy as np

from engine.backends.local_backend import LocalBackend
from engine.core.checks import UnknownCharacterError
from engine.core.contract import Capabilities
from engine.core.sampling import softmax
from engine.core.settings import Settings
from engine.core.step_maker import StepMaker

END = 7  # the end token: its text is ""
TOKENS = ("a", "b", "c", "d", "e", " ", ".", "")  # id -> text
ID = {text: token_id for token_id, text in enumerate(TOKENS) if text}

# TABLE[previous token][next token]: the next token's score. Greedy from "a" cycles "bc abc abc ...";
# from "e" it writes "." and ends.
TABLE = np.array(
    [
        #  a     b     c     d     e    " "    .    end
        [-2.0, 3.0, 1.0, 1.0, 0.0, -1.0, -3.0, -5.0],  # a: b by far; c and d tied behind it
        [1.0, -2.0, 2.0, 2.0, 0.5, 0.0, -3.0, -5.0],  # b: c and d tied at the top (greedy: c, the lower id)
        [0.2, 0.1, 0.0, 0.1, 0.2, 0.3, 0.0, -5.0],  # c: nearly uniform (sampling settings matter here)
        [0.0, 0.0, 0.0, 0.0, 1.0, 2.5, 0.5, -4.0],  # d: a space
        [1.0, 1.0, 1.0, 1.0, -1.0, 0.5, 2.0, 0.0],  # e: a full stop
        [2.0, 1.5, 1.0, 0.5, 0.0, -4.0, -4.0, -6.0],  # " ": a, then falling
        [-3.0, -3.0, -3.0, -3.0, -3.0, 1.5, -3.0, 2.0],  # .: the end, or a space
        [0.0] * 8,  # end: never fed (the session stops at it)
    ],
    dtype=np.float32,
)
SHA256 = hashlib.sha256(TABLE.tobytes()).hexdigest()


def probabilities(previous: int) -> np.ndarray:
    """The raw model probabilities of the token after `previous` (the engine's own softmax, float32)."""
    return softmax(TABLE[previous])


class FakeTokenizer:
    """One character per token; the end token is never encoded."""

    def encode(self, text: str) -> list[int]:
        for position, char in enumerate(text):
            if char not in ID:
                raise UnknownCharacterError(
                    f"{char!r} at position {position} is not in the fake alphabet", char, position
                )
        return [ID[char] for char in text]

    def decode(self, ids) -> str:
        return "".join(TOKENS[int(i)] for i in ids)

    def token_bytes(self, token_id: int) -> bytes:
        return TOKENS[token_id].encode()


class FakeCache:
    """What LocalContext needs of a KV cache: a length and an O(1) truncate. It keeps the ids it holds."""

    def __init__(self):
        self.ids: list[int] = []

    @property
    def length(self) -> int:
        return len(self.ids)

    def truncate(self, length: int) -> None:
        del self.ids[length:]


class FakeBackend(LocalBackend):
    name = "fake bigram"
    vocab_size = len(TOKENS)
    end_token_ids = frozenset({END})

    def __init__(self, context_length: int = 64, table: np.ndarray = TABLE):
        self.context_length = context_length
        self.table = table
        self.weights_sha256 = hashlib.sha256(table.tobytes()).hexdigest()  # another table: another model
        self.tokenizer = FakeTokenizer()
        self.calls: list[int] = []  # positions fed by each forward pass, in order
        self.broken = False  # True: every forward pass raises ValueError

    def new_cache(self) -> FakeCache:
        return FakeCache()

    def forward_cached(self, ids, cache: FakeCache, last_only: bool = False) -> np.ndarray:
        if self.broken:
            raise ValueError("the fake model is broken")
        if cache.length + len(ids) > self.context_length:
            raise ValueError(f"cannot cache position {cache.length + len(ids) - 1}")
        self.calls.append(len(ids))
        cache.ids.extend(int(i) for i in ids)
        rows = self.table[list(ids)]
        return rows[-1:] if last_only else rows


class FakeStreamingBackend:
    """A server-like backend (engine.core.contract.Backend) over the same table: it samples itself
    (greedily: the script is the table's argmax path) and streams several tokens per request."""

    name = "fake streaming server"
    weights_sha256 = SHA256
    source = "fake://server"
    vocab_size = len(TOKENS)
    end_token_ids = frozenset({END})
    end_reason = "end of text"
    capabilities = Capabilities(
        full_distribution=False, local_sampling=False, local_tokenizer=True, chat_template=False, streaming=True
    )

    def __init__(self, context_length: int = 64, fail_after: int | None = None):
        self.context_length = context_length
        self.tokenizer = FakeTokenizer()
        self.fail_after = fail_after  # a stream raises ValueError after giving this many tokens
        self.requests: list[str] = []  # "sample", "stream", "score", "closed": what the server was asked

    def open_context(self) -> "FakeStreamingContext":
        return FakeStreamingContext(self)

    def has_chat_template(self) -> bool:
        return False

    def chat_prompt(self, user_text: str) -> str:
        raise ValueError("no chat template")

    def describe(self) -> dict:
        return {"name": self.name, "weights_sha256": self.weights_sha256, "url": self.source}

    def close(self) -> None:
        pass

    def next_token(self, previous: int) -> int:
        return int(np.argmax(TABLE[previous]))


class FakeStreamingContext:
    def __init__(self, model: FakeStreamingBackend):
        self.model = model
        self._stream = None
        self._maker = StepMaker(model.tokenizer, Settings())  # raw probabilities: a server reports no stages

    def candidates(self, ids, text, settings):
        return self._maker.candidates(self._maker.distributions(TABLE[self._last(text)]))

    def sample(self, ids, text, settings, random, stream=False, remaining=0):
        """The server draws (greedily; `random` is not used). A stream's tokens come without ids."""
        if stream:
            if self._stream is None:
                self.model.requests.append("stream")
                self._stream = self._tokens(self._last(text), remaining)
            token_id = next(self._stream, None)
        else:
            self.model.requests.append("sample")
            token_id = self.model.next_token(self._last(text))
            token_id = None if token_id == END else token_id
        if token_id is None:  # the server ended the text (or the stream ran out)
            return None, True
        step = self._maker.make(TABLE[self._last(text)], token_id, "model")
        return (replace(step, token_id=-1) if stream else step), False

    def force(self, ids, text, token_ids, source, settings, options=None):
        self.model.requests.append("score")
        previous = [self._last(text), *token_ids[:-1]]
        return [
            self._maker.make(TABLE[before], token_id, source, options=options if i == 0 else None)
            for i, (before, token_id) in enumerate(zip(previous, token_ids))
        ]

    def score(self, ids, settings):
        return self.force(ids[:1], self.model.tokenizer.decode(ids[:1]), ids[1:], "forced", settings)

    def option_probabilities(self, ids, text, encoded, settings):
        results = []
        for token_ids in encoded:
            previous = [self._last(text), *token_ids[:-1]]
            p = math.prod(float(probabilities(before)[token_id]) for before, token_id in zip(previous, token_ids))
            results.append((p, p))
        return results

    def feed(self, ids, token_ids) -> None:
        pass  # the next request sends the text as it is now

    def truncate(self, length: int) -> None:
        pass  # the next request sends the text as it is now

    def close_stream(self, steps):
        if self._stream is None:
            return steps
        self._stream.close()
        self._stream = None
        self.model.requests.append("closed")
        if not any(step.token_id < 0 for step in steps):
            return steps
        return [replace(s, token_id=self.model.tokenizer.encode(s.token)[0]) if s.token_id < 0 else s for s in steps]

    def _last(self, text: str) -> int:
        return self.model.tokenizer.encode(text[-1])[0]  # the server reads the text, not the ids

    def _tokens(self, previous: int, remaining: int):
        for given in range(remaining):
            if self.model.fail_after is not None and given == self.model.fail_after:
                raise ValueError("the fake server cut the stream")
            token_id = self.model.next_token(previous)
            if token_id == END:
                return
            yield token_id
            previous = token_id
