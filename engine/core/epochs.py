"""What a Session keeps to rewind and to start again from an earlier step: each Epoch (settings in force
from a step on, with their random stream) and a Standing (where the session stood after some of its steps)."""

import random
from dataclasses import dataclass

from engine.core.settings import Settings


@dataclass(frozen=True)
class Epoch:
    start: int  # the first step these settings apply to
    settings: Settings
    draws_before: int  # random draws taken before it (its own stream starts at Random(settings.seed))

    def stream(self, draws: int) -> random.Random:
        """Its random stream with `draws` draws taken in all (those before it are not its own: ~0.1 us each)."""
        stream = random.Random(self.settings.seed)
        for _ in range(draws - self.draws_before):
            stream.random()
        return stream


@dataclass(frozen=True)
class Standing:
    """Where a session stands after some of its steps (Session._standing): what carrying on from there needs."""

    text: str
    settings: Settings
    random_state: tuple  # the random stream's state (random.Random.getstate)
    healing: bytes | None  # token healing's bytes still to spell
    stopped: str | None  # why no step could follow there (an end token, the context full), or None
