"""RemoteContext: one session on a server, behind the backend contract (engine.core.contract). The server
holds no state of ours but an open stream; every request is its Server's (server.py),
the one object it shares with the model and the tokenizer."""

import math
from dataclasses import replace

from engine.backends.remote.server import Server
from engine.core.steps import Candidates, Step


class RemoteContext:
    """One session on a server: the server holds no state of ours but an open stream (engine.core.contract)."""

    def __init__(self, server: Server):
        self.server = server
        self._stream = None

    def candidates(self, ids, text, settings) -> Candidates:
        return self.server.candidates(self.server.next_distribution(ids, text), settings, ids)

    def sample(self, ids, text, settings, random, stream=False, remaining=0) -> tuple[Step | None, bool]:
        """The server draws (with its own seed: `random` is not used). A stream's tokens come without ids
        where the server sends text only: asking mid-stream would end it; close_stream fills them in."""
        if stream:
            if self._stream is None:
                self._stream = self.server.stream(ids, text, settings, remaining)
            token = next(self._stream, None)
        else:
            token = self.server.sample(ids, text, settings)
        if token is None:  # the server ended the text, or a stream ran out
            return None, True
        step = self.server.make_step(token, "model", ask=not stream, settings=settings, history=ids)
        return step, token.finish == "stop"

    def force(self, ids, text, token_ids, source, settings, options=None) -> list[Step]:
        """Forced tokens scored in place (their probabilities and the server's top N at each: one echoing
        request, or one per token where the server does not echo); each step is its id's own text."""
        scored, history = self.server.score(ids, text, token_ids), [*ids, *token_ids]
        return [self.server.make_step(t, source, options if i == 0 else None, settings=settings,
                                      history=history[: len(ids) + i]) for i, t in enumerate(scored)]  # fmt: skip

    def score(self, ids, settings) -> list[Step]:
        """The text's tokens after the first, scored as forced tokens (by echo where the server echoes)."""
        return self.force(ids[:1], self.server.tokenizer.decode(ids[:1]), ids[1:], "forced", settings)

    def option_probabilities(self, ids, text, encoded, settings) -> list[tuple[float, float]]:
        """A server reports raw probabilities only, for its top N: an option with a token outside them
        counts as 0."""
        results = []
        for token_ids in encoded:
            scored = self.server.score(ids, text, token_ids)
            p = math.prod(math.exp(t.logprob) if t.logprob is not None else 0.0 for t in scored)
            results.append((p, p))
        return results

    def feed(self, ids, token_ids) -> None:
        pass  # the next request sends the text as it is now

    def truncate(self, length: int) -> None:
        pass  # the next request sends the text as it is now

    def close_stream(self, steps: list[Step]) -> list[Step]:
        if self._stream is None:
            return steps
        self._stream.close()
        self._stream = None
        if not any(step.token_id < 0 and step.source == "model" for step in steps):
            return steps
        return [
            replace(step, token_id=self.server.tokenizer.token_id(step.token))
            if step.token_id < 0 and step.source == "model"
            else step
            for step in steps
        ]
