"""One request's generation (no web framework here): a Session stepped a token at a time, its text handed out as
it grows (held back while it could still become a stop string), each token's log-probabilities as OpenAI writes
them, and why it ended.

The log-probabilities are the model's own distribution (temperature 1, before any sampler stage: the steps'
`model_probability` and raw candidates), as vLLM reports by default and as the window's chart shows first; a
token a rule inserted carries the model's probability for it, so a client sees how unlikely a forced token was.
"""

import math
import time
from dataclasses import dataclass, field

from engine.core.scoring import score
from engine.core.session import Session
from engine.core.steps import Step

FINISH = {"max_new_tokens": "length", "context full": "length"}  # else the model's end token, or a stop string: "stop"


@dataclass
class Piece:
    """What one step adds: the text now safe to hand out (maybe ""), and the step's token log-probabilities."""

    text: str
    tokens: list[dict] = field(default_factory=list)  # [{"token", "logprob", "bytes", "top_logprobs", "id", "offset"}]
    finish: str | None = None  # the finish reason, on the text's last piece


def joined(pieces: list[Piece]) -> Piece:
    """Several steps' pieces as one (what piled up while the last was being sent: one event, not several)."""
    if len(pieces) == 1:
        return pieces[0]
    return Piece("".join(p.text for p in pieces), [t for p in pieces for t in p.tokens], pieces[-1].finish)


class Run:
    def __init__(self, session: Session, stops: tuple[str, ...], top_logprobs: int | None, tools=None, index=0,
                 echo: bool = False, generate: bool = True):  # fmt: skip
        """echo: the answer starts with the prompt (its tokens' log-probabilities too, the first None, as vLLM
        gives them); generate False: nothing after it (`max_tokens: 0`, only with echo)."""
        self.session, self.stops, self.top_logprobs, self.index = session, stops, top_logprobs, index  # index: `n`
        self.echo_pending, self.generate = echo, generate
        self.echo_text, self.echo_tokens = "", []  # the prompt and its log-probabilities, once echoed
        self.tools = tools  # a chat request's tools.ToolPlan: its answer is read as tool calls (None: text)
        self.sent = 0  # characters of the generated text handed out
        self.tokens: list[dict] = []  # every step's log-probabilities (when asked for)
        self.watched = 0  # steps sent to the server's watchers
        self.taken, self.stepping = 0, 0.0  # steps taken and the seconds they took (the model's pace)
        self.finish_reason: str | None = None
        self.ended = False  # the server has kept its trace and told its watchers
        self.trace_error: str | None = None  # why its trace could not be kept (--traces), if it could not
        self._stopped_at: int | None = None  # where a stop string begins in the generated text

    def step(self) -> Piece | None:
        """One inference pass (or a rule's insertion) -> the new Piece; None once the text has ended."""
        if self.finish_reason is not None:
            return None
        echoed = self._echoed() if self.echo_pending else Piece("")
        if not self.generate:
            self.finish_reason = "length"
            return Piece(echoed.text, echoed.tokens, self.finish_reason)
        piece = self._step()
        if echoed.text:
            piece = joined([echoed, piece])
        return piece

    def _step(self) -> Piece:
        offset = len(self.echo_text) + len(self.session.text) - len(self.session.prompt_text)  # this token's start
        started = time.perf_counter()
        step = self.session.step(stream=True)  # a server behind: one open stream, stopped where a rule acts
        self.taken, self.stepping = self.taken + 1, self.stepping + time.perf_counter() - started
        if step is None:
            self.finish_reason = FINISH.get(self.session.stopped, "stop")
            return Piece(self._release(len(self.content())), finish=self.finish_reason)
        tokens = [dict(self._logprobs(step), offset=offset)] if self.top_logprobs is not None else []
        self.tokens += tokens
        text = self.content()
        for stop in self.stops:  # a stop string ends the text before it, the stop string itself left out
            at = text.find(stop, max(0, self.sent - len(stop)))
            if at >= 0 and (self._stopped_at is None or at < self._stopped_at):
                self._stopped_at = at
        if self._stopped_at is not None:
            self.finish_reason = "stop"
            return Piece(self._release(self._stopped_at), tokens, self.finish_reason)
        return Piece(self._release(len(text) - self._held_back(text)), tokens)

    def _echoed(self) -> Piece:
        """The prompt as the answer's first piece: its text, and (asked for) each token's log-probabilities, read
        in one pass (engine.score) on the stepping thread, as a step is."""
        session = self.session
        self.echo_text, self.echo_pending = session.prompt_text, False
        if self.top_logprobs is not None:
            ids, tokenizer = session.prompt_ids, session.model.tokenizer
            first = tokenizer.decode(ids[:1])
            self.echo_tokens = [{"token": first, "logprob": None, "id": ids[0], "offset": 0, "top_logprobs": None,
                                 "bytes": list(_bytes(tokenizer, ids[0], first))}]  # fmt: skip
            offset = len(first)  # each token's start, as the session's own text grows by each step's token
            for step in score(session.model, ids).steps if len(ids) > 1 else ():
                self.echo_tokens.append(dict(self._logprobs(step), offset=offset))
                offset += len(step.token)
        return Piece(self.echo_text, list(self.echo_tokens))

    def content(self) -> str:
        """The generated text, less the model's end token (a chat's <|im_end|> is not the answer's)."""
        text, steps = self.session.generated_text, self.session.steps
        if self._stopped_at is not None:
            return text[: self._stopped_at]
        if steps and steps[-1].token_id in self.session.model.end_token_ids and text.endswith(steps[-1].token):
            return text[: len(text) - len(steps[-1].token)]
        return text

    def _release(self, end: int) -> str:
        text = self.content()[self.sent : max(self.sent, end)]
        self.sent += len(text)
        return text

    def _held_back(self, text: str) -> int:
        """How many characters at the end of the text could still be the start of a stop string."""
        longest = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:n]):
                    longest = n
                    break
        return longest

    def _logprobs(self, step: Step) -> dict:
        tokenizer, candidates = self.session.model.tokenizer, step.candidates
        top = [
            {"token": text, "logprob": _log(p), "bytes": list(_bytes(tokenizer, i, text)), "id": i}
            for i, text, p in zip(candidates.token_ids, candidates.tokens, candidates.raw)
        ][: self.top_logprobs]
        return {"token": step.token, "logprob": _log(step.model_probability), "id": step.token_id,
                "bytes": list(_bytes(tokenizer, step.token_id, step.token)), "top_logprobs": top}  # fmt: skip


def usage(runs: list[Run]) -> dict:
    """OpenAI's usage of an answer: the prompt once, every choice's tokens."""
    prompt, completion = len(runs[0].session.prompt_ids), sum(len(run.session.steps) for run in runs)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _log(p: float | None) -> float:
    """ln p, as JSON allows it: -9999.0 where p is 0 or unknown (OpenAI's own floor for a token it never saw)."""
    return math.log(p) if p else -9999.0


def _bytes(tokenizer, token_id: int, text: str) -> bytes:
    if token_id >= 0 and hasattr(tokenizer, "token_bytes"):
        return tokenizer.token_bytes(token_id)
    return text.encode("utf-8")
