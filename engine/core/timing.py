"""How long a context's forward passes took: a small running record, two clock reads per pass.

A local context (engine/backends/local.py) adds every forward pass it runs; Session.timing hands it out.
The window reads it to say how fast the prompt was read: the tokens fed, and the seconds spent feeding
them, between a run's start and its first token (a snapshot before, the difference after).
"""

from dataclasses import dataclass


@dataclass
class ForwardTiming:
    passes: int = 0  # forward passes run
    tokens: int = 0  # tokens fed through them
    seconds: float = 0.0  # wall-clock time inside them (perf_counter)

    def add(self, tokens: int, seconds: float) -> None:
        self.passes += 1
        self.tokens += tokens
        self.seconds += seconds

    def snapshot(self) -> "ForwardTiming":
        return ForwardTiming(self.passes, self.tokens, self.seconds)

    def since(self, before: "ForwardTiming") -> "ForwardTiming":
        """The passes run after `before` (a snapshot of this record)."""
        return ForwardTiming(self.passes - before.passes, self.tokens - before.tokens, self.seconds - before.seconds)
