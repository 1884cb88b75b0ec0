"""What the status bar says about speed: what runs (engine, threads, context), and a run's figures, live.

The figures of one Generate, measured in the worker where the steps happen (no Qt here):
- time to first token: from Generate's start to its first step;
- prompt evaluation: the tokens the model was fed before that first step (the prompt, or what was added
  since the last run) / the seconds its forward passes took (Session.timing; a server does not say);
- generation: the tokens after the first / the seconds from the first to the latest. The prompt is not
  in it: a 3-token run is 2 tokens over the time from its first to its third.
"""

import time
from dataclasses import dataclass

from engine import ForwardTiming

UPDATE_SECONDS = 0.25  # live figures go to the window at most this often (and at the first token, and the end)


@dataclass(frozen=True)
class SpeedFigures:
    steps: int  # tokens this run took so far
    first_token_seconds: float | None  # None before the first token
    prompt_tokens: int  # tokens fed before the first token (0: none, or unknown: a server)
    prompt_seconds: float
    generation_rate: float | None  # tokens per second after the first; None before the second

    @property
    def prompt_rate(self) -> float | None:
        return self.prompt_tokens / self.prompt_seconds if self.prompt_tokens and self.prompt_seconds > 0 else None


class RunClock:
    """One run's figures: start() at Generate, stepped() after every step; figures() at any time.
    clock: seconds, monotonic (a test gives its own)."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._started = self._first = self._latest = self._shown = 0.0
        self._steps = 0
        self._timing: ForwardTiming | None = None
        self._before = ForwardTiming()
        self._prompt = ForwardTiming()

    def start(self, timing: ForwardTiming | None) -> None:
        """timing: the session's forward-pass record (None: a server), read again at the first step."""
        self._started = self._clock()
        self._steps = 0
        self._timing = timing
        self._before = timing.snapshot() if timing is not None else ForwardTiming()
        self._prompt = ForwardTiming()

    def stepped(self) -> bool:
        """Count a step -> whether the window should hear now (the first token, then every UPDATE_SECONDS)."""
        now = self._latest = self._clock()
        self._steps += 1
        if self._steps == 1:
            self._first = self._shown = now
            if self._timing is not None:
                self._prompt = self._timing.since(self._before)
            return True
        if now - self._shown >= UPDATE_SECONDS:
            self._shown = now
            return True
        return False

    def figures(self) -> SpeedFigures:
        first = self._first - self._started if self._steps else None
        span = self._latest - self._first
        rate = (self._steps - 1) / span if self._steps > 1 and span > 0 else None
        return SpeedFigures(self._steps, first, self._prompt.tokens, self._prompt.seconds, rate)


def rate_text(rate: float) -> str:
    """Tokens per second as a person reads it: '0.5 tokens/s', '17 tokens/s', never '1 tokens/s'."""
    return f"{rate:.1f} tokens/s" if rate < 10 else f"{rate:,.0f} tokens/s"


def speed_text(figures: SpeedFigures) -> str:
    """'38 tokens/s · first token 0.92 s · prompt 240 tokens/s' (what is known so far)."""
    parts = []
    if figures.generation_rate is not None:
        parts.append(rate_text(figures.generation_rate))
    if figures.first_token_seconds is not None:
        parts.append(f"first token {figures.first_token_seconds:.2f} s")
    if figures.prompt_rate is not None and figures.prompt_tokens > 1:  # one token fed is a step, not a prompt
        parts.append(f"prompt {rate_text(figures.prompt_rate)}")
    return " · ".join(parts)


def speed_tip(figures: SpeedFigures) -> str:
    prompt = (f"the model read {figures.prompt_tokens:,} tokens in {figures.prompt_seconds:.3f} s before the first"
              if figures.prompt_tokens else "nothing new to read before the first token")  # fmt: skip
    return (
        f"This run: {figures.steps:,} tokens; {prompt}.\n"
        "tokens/s: the tokens after the first / the time since the first (the prompt is not in it)\n"
        "first token: from Generate to the first token\n"
        "prompt: the tokens read before the first token / the time the model took to read them"
    )


def runtime_text(model) -> str:
    """What runs the model: 'llama.cpp · 1 thread · ctx 8192', 'numpy · story model · ctx 64',
    'numpy · GGUF · ctx 2048', 'server http://host:8080 · ctx 4096'."""
    described = model.describe()
    context = f"ctx {model.context_length}" if model.context_length else "ctx unknown"
    if "url" in described:
        return f"server {described['url']} · {context}"
    if described.get("backend") == "llama.cpp":
        threads = model.threads
        return f"llama.cpp · {threads} thread{'' if threads == 1 else 's'} · {context}"
    kind = "GGUF" if str(model.source).endswith(".gguf") else model.name
    return f"numpy · {kind} · {context}"
