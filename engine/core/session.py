"""THE generation loop. Everything that generates (generate(), the CLI, the window, replay, the benches)
drives a Session: it holds the text so far, takes one step at a time, and lets a person or a rule steer
between two steps. The model's side (a KV cache, or a server) is the backend's Context
(engine/core/contract.py): the Session holds no backend-specific code.

Every change to a session is one logged action (sample, force, insert, choose, rewind, settings); replaying the log
on a fresh session repeats the same forward passes in the same chunks, so a trace replays bit for bit.
"""

import random
from dataclasses import replace

import numpy as np

from engine.core.checks import checked_prompt_ids
from engine.core.epochs import Epoch, Standing
from engine.core.gbnf import check_grammar_backend
from engine.core.healing import NO_HEALING, healed_prompt, healer_for
from engine.core.rules import Rule, checked_rules
from engine.core.seeds import checked_seeds_run, checked_seeds_start, run_seeds, seed_streams
from engine.core.session_steering import Steering
from engine.core.session_tree import TreeCommands
from engine.core.settings import Settings
from engine.core.settings import known_settings as _known
from engine.core.steps import Candidates, GenerationResult, Step
from engine.core.tree import Tree


class Session(TreeCommands, Steering):
    def __init__(self, model, prompt, max_new_tokens=60, temperature=0.0, top_k=None, top_p=None, min_p=None,
                 seed=0, rules=(), **samplers):  # fmt: skip
        """samplers: the other Settings fields (repeat_penalty, dry_multiplier, samplers=order, ...)."""
        self.settings = Settings(max_new_tokens, temperature, top_k, top_p, min_p, seed, **_known(samplers))
        self.settings.check_vocab(model.vocab_size)
        check_grammar_backend(model, self.settings.grammar)
        self.initial_settings = self.settings  # a trace starts from these; "settings" actions change them
        prompt_ids = checked_prompt_ids(model.tokenizer, prompt, model.context_length)
        self.rules = checked_rules(model, rules)
        self.initial_rules = self.rules  # a trace's "rules"; "rules" actions record later changes
        self.model = model
        self.prompt = prompt
        # token healing: the bytes the next steps must spell first (None: none), and per step what it was before
        self._healing: bytes | None = None
        self._healing_before: list[bytes | None] = []
        if self.settings.heal:
            prompt_ids, prompt, self._healing = healed_prompt(model, prompt_ids, prompt)
        self.prompt_text = prompt  # the text before the first step: the prompt, less what healing cut
        self.prompt_ids = list(prompt_ids)
        self.ids = list(prompt_ids)  # prompt + every step's token
        self.text = prompt
        self.steps: list[Step] = []
        self.actions: list[dict] = []  # the log that replay repeats
        self.events: list[str] = []  # what went wrong in a rule or tool, for the person to read
        self.conversation: dict | None = None  # chat's Conversation.to_dict() the text was written in: traces keep it
        self._epochs = [Epoch(0, self.settings, 0)]  # settings in force from a step on; see update_settings
        self._context = model.open_context()  # the model's side: a KV cache, or a server's open stream
        self._stream_action: dict | None = None  # the "stream" action counting an open stream's tokens
        self._ended_at: int | None = None  # the backend ended the text after this many steps
        # per step, for rewinding: the text's length and the number of random draws used before it
        self._text_lengths: list[int] = []
        self._draws_before: list[int] = []
        self._read_under: list[tuple] = []  # and the steering it was read under (Node.steering)
        self._rng = random.Random(self.settings.seed)
        self._draws = 0  # random draws taken by the steps so far
        self._forced: int | None = None  # force_token's token, taken by the next step
        self._returned = 0  # steps handed out by step(); a rule's several steps go out one per call
        self._fired: set[tuple[int, int]] = set()  # (rule index, text length) where a rule fired
        # (start, end) ranges of the text a server's client wrote (its prompt, its steer's insertions): a command
        # rule's program is told of them (engine/core/commands.py); the server adds the prompt's
        self.client_spans: list[tuple[int, int]] = []
        self.slow_rules: list[Rule] = []  # regex rules disabled for taking too long to match (an event says so)
        self._prompt_score = None  # score_prompt's, once asked for
        self.head_scales: tuple[tuple[int, int, float], ...] = ()  # steer_heads': (layer, head, factor)
        self.head_table: np.ndarray | None = None  # the same as [layers, heads] factors (None: as trained)
        self.tree = Tree()  # every step ever taken, branches kept (engine/core/tree.py)
        self.path: list[int] = []  # the tree's node of each step

    # --- reading ---------------------------------------------------------------------------------
    @property
    def stopped(self) -> str | None:
        """Why the model would not take another step now, or None."""
        if self.steps and self.ids[-1] in self.model.end_token_ids or self._ended_at == len(self.steps):
            return self.model.end_reason
        if len(self.steps) >= self.settings.max_new_tokens:
            return "max_new_tokens"
        if len(self.ids) >= self.model.context_length:
            return "context full"
        return None

    @property
    def generated_text(self) -> str:
        return self.text[len(self.prompt_text) :]

    @property
    def healing(self) -> str | None:
        """The text the next steps must spell first (token healing), or None."""
        return None if self._healing is None else self._healing.decode("utf-8", errors="replace")

    @property
    def timing(self):
        """The forward passes this session ran so far (engine.core.timing.ForwardTiming: passes, tokens fed,
        seconds), or None where a server runs them."""
        return getattr(self._context, "timing", None)

    def score_prompt(self):
        """The prompt's own tokens scored (engine.score: every token after the first, as a forced step's record,
        with the log-likelihood and perplexity), under the settings the session started with; computed once."""
        if self._prompt_score is None:
            from engine.core.scoring import score

            self._prompt_score = score(self.model, self.prompt_ids, **self.initial_settings.to_dict())
        return self._prompt_score

    def peek(self) -> Candidates | None:
        """The distribution the next model step would be drawn from (top candidates at every stage),
        without taking it; None when the context is full. Computing it now costs the next step nothing."""
        if len(self.ids) >= self.model.context_length:
            return None
        return self._context.candidates(self.ids, self.text, self.settings, **self._prefix())

    # --- stepping --------------------------------------------------------------------------------
    def step(self, stream: bool = False) -> Step | None:
        """Take one step and return it, or None once generation has stopped (see `stopped`).

        A forced token goes first; then, if a rule's trigger ends the text, the rule acts (its steps are
        handed out one per call); otherwise the model samples one token. stream: a backend that can keep one
        request open gives the next tokens from it (Generate); any steering closes it."""
        if self._returned < len(self.steps):
            self._returned += 1
            return self.steps[self._returned - 1]
        if self._forced is not None:  # actions are logged once done: a failed request changes nothing
            token_id = self._forced
            self._append(self._context.force(self.ids, self.text, [token_id], "forced", self.settings))
            self._forced = None
            self._log({"kind": "force", "token_id": token_id})
            return self._hand_out()
        if self.stopped:
            self.interrupt()  # a stream open at max_new_tokens closes, and the ids it left unknown are filled in
            return None
        if self._end_thinking() or self._fire_rules():
            return self._hand_out()
        return self._sample(stream and self.model.capabilities.streaming)

    def _sample(self, stream: bool) -> Step | None:
        if not stream:
            self.interrupt()  # a plain step after streamed ones continues from the text, not from the stream
        opening = stream and self._stream_action is None
        try:
            step, ends = self._context.sample(
                self.ids,
                self.text,
                self.settings,
                self._rng.random,
                stream and self._healing is None,  # a healing step is one step: what it spells decides the next
                self.settings.max_new_tokens - len(self.steps),
                **self._prefix(),
            )
        except BaseException:  # a failed step uses no draw: the stream as it was (getstate each step costs ~20 us)
            self._rng = self._epochs[-1].stream(self._draws)
            if stream:
                self.interrupt()  # closes the broken stream and asks for the ids it left unknown
            raise
        if opening:
            self._log({"kind": "stream", "n": 0})
            self._stream_action = self.actions[-1]
        if step is None:  # the backend ended the text (a server's stream ran out, or it said stop)
            self.interrupt()
            if not stream:
                self._log({"kind": "sample"})
            self._ended_at = len(self.steps)
            return None
        self._append([step])
        self._draws += (step.draw is not None) + (step.xtc_draw is not None)  # XTC's draw comes first
        if stream:
            self._stream_action["n"] += 1
        else:
            self._log({"kind": "sample"})  # logged once the step exists: a failed step leaves no trace
        if ends:
            self._ended_at = len(self.steps)
        return self._hand_out()

    def interrupt(self) -> None:
        """Close an open stream now (Stop, or any steering): a server stops generating for us, and the ids
        its stream left unknown are filled in."""
        self._stream_action = None
        steps = self._context.close_stream(self.steps)
        if steps is not self.steps:
            for node_id, old, new in zip(self.path, self.steps, steps):
                if old is not new:  # a streamed step whose id is known now
                    self.tree.replace_step(node_id, new)
            self.steps[:] = steps
            self.ids[len(self.prompt_ids) :] = [step.token_id for step in steps]

    def run(self, stream: bool = False) -> list[Step]:
        """Step until generation stops; returns the steps this call took."""
        taken = []
        while (step := self.step(stream)) is not None:
            taken.append(step)
        return taken

    def run_seeds(self, seeds, max_new_tokens: int | None = None, at: int | None = None, **changes):
        """Many seeds at once from here (engine/core/seeds.py): each seed continues the text as this session
        would after update_settings(seed=s, **changes) and run(), bit for bit, for at most max_new_tokens new
        tokens (default: the settings'); shared prefixes are computed once. at: from the first `at` steps
        (what Continue from here keeps), as the session would after rewinding to there; None: from the end.
        Rules do not act; the session itself does not change (nor its text, nor what comes next).
        -> SeedRun (the tree of what was drawn with counts, each seed's steps; its `at`)."""
        keep = checked_seeds_start(self.model, at, len(self.steps))
        here = self._standing(keep)
        settings, limit = checked_seeds_run(self.model, here, changes, max_new_tokens)
        self.interrupt()
        stream_of = seed_streams(here, settings)
        ids = self.ids[: len(self.prompt_ids) + keep]
        # as rewind leaves it, and put back bit for bit after: from the end too, where the seeds' first read (the
        # whole text again after steer_heads) would otherwise stay in the cache, in another chunking than a
        # session without the seeds (which are not logged: replay) reads it
        with self._context.rewound(len(ids)):
            run = run_seeds(self._context, self.model, ids, here.text, settings, seeds, limit, stream_of)
        return replace(run, at=keep)

    def _standing(self, keep: int) -> Standing:
        """The session as a rewind to its first `keep` steps would leave it (_cut's arithmetic; nothing changes)."""
        if keep == len(self.steps):
            return Standing(self.text, self.settings, self._rng.getstate(), self._healing, self.stopped)
        epoch = next(e for e in reversed(self._epochs) if e.start <= keep)  # as _cut keeps them
        stream = epoch.stream(self._draws_before[keep])
        ids = self.ids[: len(self.prompt_ids) + keep]
        stopped = None
        if keep and ids[-1] in self.model.end_token_ids:
            stopped = self.model.end_reason
        elif len(ids) >= self.model.context_length:
            stopped = "context full"
        text = self.text[: self._text_lengths[keep]]
        return Standing(text, epoch.settings, stream.getstate(), self._healing_before[keep], stopped)

    def update_settings(self, **changes) -> Settings:
        """Change settings from the next step on (a branch with another temperature or seed, say). The
        change is logged, a fresh random stream starts from the (new) seed, and rewinding to before the
        change brings the earlier settings back. A change of max_new_tokens alone keeps the random stream:
        it decides when to stop, not what is drawn (the window raises it to generate on after a stop)."""
        new = replace(self.settings, **_known(changes)).check_vocab(self.model.vocab_size)  # validates
        if new == self.settings:
            return new
        if new.heal and not self.model.capabilities.local_sampling:
            raise ValueError(NO_HEALING)
        if new.grammar != self.settings.grammar:
            check_grammar_backend(self.model, new.grammar)
        self.interrupt()
        self._log({"kind": "settings", "settings": new.to_dict()})
        same_stream = replace(new, max_new_tokens=self.settings.max_new_tokens) == self.settings
        draws_before = self._epochs[-1].draws_before if same_stream else self._draws
        if self._epochs[-1].start == len(self.steps):  # no step since the last change: replace it
            self._epochs.pop()
        self._epochs.append(Epoch(len(self.steps), new, draws_before))
        self._enter_epoch(self._epochs[-1], self._draws)
        return new

    def rewind(self, n) -> None:
        """Drop the last n steps and their cache rows (O(1)); stepping again continues from there. The
        random state rewinds too, so with nothing else changed the same steps come again."""
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= len(self.steps):
            raise ValueError(f"can rewind 0 to {len(self.steps)} steps (the steps taken so far), not {n!r}")
        if n == 0:
            return
        self.interrupt()
        self._log({"kind": "rewind", "n": n})
        self._cut(len(self.steps) - n)

    def _cut(self, keep: int) -> None:
        """Keep the first `keep` steps (the body of rewind: the cache, draws, settings and healing as they
        stood after them)."""
        self._ended_at = None
        self.text = self.text[: self._text_lengths[keep]]
        draws = self._draws_before[keep]
        self._healing = self._healing_before[keep]
        del self.steps[keep:], self._text_lengths[keep:], self._draws_before[keep:], self._healing_before[keep:]
        del self._read_under[keep:]
        del self.path[keep:]
        del self.ids[len(self.prompt_ids) + keep :]
        self._context.truncate(len(self.ids))
        while self._epochs[-1].start > keep:  # settings changed after the point we return to
            self._epochs.pop()
        if draws != self._draws or self._epochs[-1].settings != self.settings:
            self._enter_epoch(self._epochs[-1], draws)
        self._forced = None
        self._returned = min(self._returned, keep)
        self._fired = {(rule, at) for rule, at in self._fired if at < len(self.text)}
        end = len(self.text)
        self.client_spans = [(start, min(stop, end)) for start, stop in self.client_spans if start < end]

    # --- the trace --------------------------------------------------------------------------------
    def close(self) -> None:
        """Let the context go now, not when the session is collected (a shared context's sequence goes back to the
        other sessions: engine/backends/llamacpp/scheduler.py); the session takes no step after."""
        getattr(self._context, "close", lambda: None)()

    def result(self) -> GenerationResult:
        return GenerationResult(self.text, list(self.steps), self.stopped, self.settings)

    def trace(self, branches: str = "all", record=None) -> dict:
        """The whole run as JSON-ready data (schema in engine/core/trace.py); replay() repeats it. branches:
        "all" (the whole tree) or "active" (only the branch the text is on; the log still replays whole);
        record(step): what the trace holds for each step (None: Step.to_dict)."""
        from engine.core.trace import session_trace

        return session_trace(self, branches, record)

    # --- internals ---------------------------------------------------------------------------------
    def _enter_epoch(self, epoch: Epoch, draws: int) -> None:
        """Make `epoch` current with `draws` draws taken in all: its settings, and its random stream
        advanced past the draws its own steps took (~0.1 us each)."""
        self.settings = epoch.settings
        self._rng, self._draws = epoch.stream(draws), draws

    def _append(self, steps: list[Step]) -> list[Step]:
        draws = self._draws  # a sampled step counts its own draw once it exists (in _sample)
        for step in steps:
            healing_before = self._healing
            if healing_before is not None:
                self._healing = self._healer().advance(healing_before, step.token_id)
            after = draws + (step.draw is not None) + (step.xtc_draw is not None)
            steering = (self.head_table, self.residual_table)
            node = self.tree.add(
                self.path[-1] if self.path else 0,
                step,
                draws_before=draws,
                draws_after=after,
                healing_before=healing_before,
                healing_after=self._healing,
                epoch=self._epochs[-1],
                steering=steering,
            )
            self._push(step, node, draws, healing_before, steering)
            draws = after
        return steps

    def _push(self, step: Step, node: int, draws_before: int, healing_before: bytes | None, steering: tuple) -> None:
        """One step onto the text, with what a rewind to before it needs (shared by _append and goto)."""
        self.steps.append(step)
        self.path.append(node)
        self.tree.walked(node)
        self._text_lengths.append(len(self.text))
        self._draws_before.append(draws_before)
        self._healing_before.append(healing_before)
        self._read_under.append(steering)
        self.ids.append(step.token_id)
        self.text += step.token

    def _handed_to_caller(self, steps: list[Step]) -> list[Step]:
        self._returned = len(self.steps)  # the caller has them; step() must not hand them out again
        return steps

    def _hand_out(self) -> Step:
        self._returned += 1
        return self.steps[self._returned - 1]

    def _healer(self):
        return healer_for(self.model.tokenizer, self.model.vocab_size)

    def _prefix(self) -> dict:
        """The keyword a context takes while token healing has text to spell."""
        return {} if self._healing is None else {"prefix": self._healing}

    def _log(self, action: dict) -> None:
        self.actions.append(action)

    def _check_room(self, count: int) -> None:
        """Refuse to add tokens past the last position (a pending forced token already holds one)."""
        room = self.model.context_length - len(self.ids) - (self._forced is not None)
        if count > room:
            raise ValueError(
                f"cannot add {count} token{'s' * (count != 1)}: {self.model.context_length - room} of the "
                f"model's {self.model.context_length} positions are used, {room} left"
            )


def generate(model, prompt, max_new_tokens=60, temperature=0.0, top_k=None, top_p=None, min_p=None, seed=0,
             **samplers):  # fmt: skip
    """Continue the prompt until the model stops; a thin wrapper over Session (samplers: other Settings)."""
    session = Session(model, prompt, max_new_tokens, temperature, top_k, top_p, min_p, seed, **samplers)
    session.run()
    return session.result()
