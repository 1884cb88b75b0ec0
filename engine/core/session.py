"""THE generation loop. Everything that generates (generate(), the CLI, the window, replay, the benches)
drives a Session: it holds the text so far and the KV cache, takes one step at a time, and lets a person
or a rule steer between two steps.

Every change to a session is one logged action (sample, force, insert, choose, rewind, settings); replaying the log
on a fresh session repeats the same forward passes in the same chunks, so a trace replays bit for bit.
"""

import math
import random
from dataclasses import dataclass, replace

import numpy as np

from engine.core.rules import Rule
from engine.core.sampling import Settings, draw
from engine.core.steps import SOURCES, Candidates, Step, StepMaker


class Session:
    def __init__(self, model, prompt, max_new_tokens=60, temperature=0.0, top_k=None, top_p=None, min_p=None,
                 seed=0, rules=()):  # fmt: skip
        self.settings = Settings(max_new_tokens, temperature, top_k, top_p, min_p, seed).check_vocab(model.vocab_size)
        self.initial_settings = self.settings  # a trace starts from these; "settings" actions change them
        if not isinstance(prompt, str):
            raise ValueError(f"prompt must be a string, got {type(prompt).__name__}")
        if not prompt:
            raise ValueError("empty prompt")
        prompt_ids = model.tokenizer.encode(prompt)  # ValueError names an unknown character
        if len(prompt_ids) > model.context_length:
            raise ValueError(
                f"prompt of {len(prompt_ids)} tokens is longer than the {model.context_length} positions the model has"
            )
        self.rules = self._checked_rules(model, rules)
        self.initial_rules = self.rules  # a trace's "rules"; "rules" actions record later changes
        self.model = model
        self.prompt = prompt
        self.prompt_ids = list(prompt_ids)
        self.ids = list(prompt_ids)  # prompt + every step's token
        self.text = prompt
        self.steps: list[Step] = []
        self.actions: list[dict] = []  # the log that replay repeats
        self.events: list[str] = []  # what went wrong in a rule or tool, for the person to read
        self._texts: dict[int, str] = {}
        self._maker = StepMaker(model.tokenizer, self.settings, self._texts)
        self._epochs = [Epoch(0, self.settings, 0)]  # settings in force from a step on; see update_settings
        # A remote model (an inference server) samples itself: no cache, no scores here. Generation may then
        # stream several tokens per request; any steering closes the stream first.
        self.remote = bool(getattr(model, "remote", False))
        self.stream_generation = False
        self._stream = None
        self._stream_action: dict | None = None
        self._ended_at: int | None = None  # a server ended the text after this many steps
        self._cache = None if self.remote else model.new_cache()
        self._next_scores = None  # scores for the position after ids[-1], once computed
        # per step, for rewinding without a forward pass: the scores row it was chosen from, the text's
        # length and the number of random draws used before it
        self._rows: list[np.ndarray] = []
        self._text_lengths: list[int] = []
        self._draws_before: list[int] = []
        self._rng = random.Random(self.settings.seed)
        self._draws = 0  # random draws taken by the steps so far
        self._forced: int | None = None  # force_token's token, taken by the next step
        self._returned = 0  # steps handed out by step(); a rule's several steps go out one per call
        self._fired: set[tuple[int, int]] = set()  # (rule index, text length) where a rule fired

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
        return self.text[len(self.prompt) :]

    def peek(self) -> Candidates | None:
        """The distribution the next model step would be drawn from (top candidates at every stage),
        without taking it; None when the context is full. Computing it now costs the next step nothing."""
        if len(self.ids) >= self.model.context_length:
            return None
        if self.remote:
            return self.model.candidates(self.model.next_distribution(self.ids, self.text))
        return self._maker.candidates(self._maker.distributions(self._scores()))

    # --- stepping --------------------------------------------------------------------------------
    def step(self) -> Step | None:
        """Take one step and return it, or None once generation has stopped (see `stopped`).

        A forced token goes first; then, if a rule's trigger ends the text, the rule acts (its steps are
        handed out one per call); otherwise the model samples one token."""
        if self._returned < len(self.steps):
            self._returned += 1
            return self.steps[self._returned - 1]
        if self._forced is not None:  # actions are logged once done: a failed request changes nothing
            token_id = self._forced
            if self.remote:
                self._append_remote([token_id], "forced")
            else:
                self._append(token_id, "forced", self._scores())
            self._forced = None
            self._log({"kind": "force", "token_id": token_id})
            return self._hand_out()
        if self.stopped:
            return None
        if self._fire_rules():
            return self._hand_out()
        if self.remote:
            return self._remote_sample()
        scores = self._scores()
        dists = self._maker.distributions(scores)
        final = dists[-1]
        if self.settings.temperature == 0:
            token_id, u = int(dists[0][0]), None  # the best candidate: highest score, lowest id
        else:
            u = self._rng.getstate(), self._rng.random()  # the state, to give the draw back if the step fails
            token_id = draw(final, u[1])
        try:
            self._append(token_id, "model", scores, dists, None if u is None else u[1])
        except BaseException:
            if u is not None:
                self._rng.setstate(u[0])
            raise
        self._draws += u is not None
        self._log({"kind": "sample"})  # logged once the step exists: a failed step leaves no trace
        return self._hand_out()

    def _remote_sample(self) -> Step | None:
        """The server draws the next token: one request, or the next token of an open stream."""
        if self.stream_generation:
            opened = self._stream is None
            if opened:
                remaining = self.settings.max_new_tokens - len(self.steps)
                self._stream = self.model.stream(self.ids, self.text, self.settings, remaining)
            try:
                token = next(self._stream, None)
            except ValueError:
                self.interrupt()  # closes the broken stream and asks for the ids it left unknown
                raise
            if opened:
                self._log({"kind": "stream", "n": 0})
                self._stream_action = self.actions[-1]
        else:
            token = self.model.sample(self.ids, self.text, self.settings)  # a fault raises: nothing logged
        if token is None:  # the server ended the text (or a stream ran out)
            if self.stream_generation:
                self.interrupt()
            else:
                self._log({"kind": "sample"})
            self._ended_at = len(self.steps)
            return None
        step = self.model.make_step(token, "model", ask=not self.stream_generation)
        self._append_step(step, None)
        if self.stream_generation:
            self._stream_action["n"] += 1
        else:
            self._log({"kind": "sample"})  # logged once the step exists
        if token.finish == "stop":
            self._ended_at = len(self.steps)
        return self._hand_out()

    def interrupt(self) -> None:
        """Close a server stream now (Stop, or any steering): the server stops generating for us. Token
        ids a stream left unknown are then asked for where the server needs ids in its prompts."""
        if self._stream is None:
            return
        self._stream.close()
        self._stream, self._stream_action = None, None
        start = len(self.prompt_ids)
        for index, step in enumerate(self.steps):
            if step.token_id < 0 and step.source == "model":
                known = replace(step, token_id=self.model.tokenizer.token_id(step.token))
                self.steps[index], self.ids[start + index] = known, known.token_id

    def run(self) -> list[Step]:
        """Step until generation stops; returns the steps this call took."""
        taken = []
        while (step := self.step()) is not None:
            taken.append(step)
        return taken

    # --- steering --------------------------------------------------------------------------------
    def force_token(self, token_id) -> None:
        """The next step takes this token, whatever its probability (replacing an earlier force)."""
        self._check_token_id(token_id)
        self.interrupt()
        self._forced = None
        self._check_room(1)
        self._forced = int(token_id)

    def insert_text(self, text, source="forced") -> list[Step]:
        """Append the text's tokens as forced steps, each with the model's own probability for it, through
        one batched forward over the new positions."""
        return self.insert_tokens(self._encode_nonempty(text, "inserted text"), source)

    def insert_tokens(self, token_ids, source="forced") -> list[Step]:
        """insert_text for token ids (replay uses it: a trace records the ids that were inserted)."""
        if source not in SOURCES or source == "model":
            raise ValueError(f"an inserted token's source must be 'forced', 'rule' or 'tool', got {source!r}")
        if not isinstance(token_ids, (list, tuple, np.ndarray)) or len(token_ids) == 0:
            raise ValueError(f"token ids must be a non-empty list of ints, got {token_ids!r:.60}")
        for token_id in token_ids:
            self._check_token_id(token_id)
        token_ids = [int(t) for t in token_ids]
        self._check_room(len(token_ids))
        self.interrupt()
        steps = self._insert(token_ids, source)
        self._log({"kind": "insert", "token_ids": token_ids, "source": source})
        return self._handed_to_caller(steps)

    def choose(self, options, source="forced") -> list[Step]:
        """The next tokens spell one of the options: the one the model, under the current settings, finds
        most probable as a whole (ties: higher raw-model probability, then the first listed). Every
        option's probability is recorded on the first step. No random draw is used."""
        if source not in ("forced", "rule"):
            raise ValueError(f"a choice's source must be 'forced' or 'rule', got {source!r:.40}")
        encoded = self._check_options(options)
        self._check_room(max(len(ids) for ids in encoded))
        self.interrupt()
        steps = self._choose(list(options), encoded, source)
        self._log({"kind": "choose", "options": list(options), "source": source})
        return self._handed_to_caller(steps)

    def update_settings(self, **changes) -> Settings:
        """Change settings from the next step on (a branch with another temperature or seed, say). The
        change is logged, a fresh random stream starts from the (new) seed, and rewinding to before the
        change brings the earlier settings back. A change of max_new_tokens alone keeps the random stream:
        it decides when to stop, not what is drawn (the window raises it to generate on after a stop)."""
        unknown = set(changes) - set(self.settings.to_dict())
        if unknown:
            raise ValueError(f"unknown setting {sorted(unknown)[0]!r}; settings are {sorted(self.settings.to_dict())}")
        new = replace(self.settings, **changes).check_vocab(self.model.vocab_size)  # validates
        if new == self.settings:
            return new
        self.interrupt()
        self._log({"kind": "settings", "settings": new.to_dict()})
        same_stream = replace(new, max_new_tokens=self.settings.max_new_tokens) == self.settings
        draws_before = self._epochs[-1].draws_before if same_stream else self._draws
        if self._epochs[-1].start == len(self.steps):  # no step since the last change: replace it
            self._epochs.pop()
        self._epochs.append(Epoch(len(self.steps), new, draws_before))
        self._enter_epoch(self._epochs[-1], self._draws)
        return new

    def set_rules(self, rules) -> tuple[Rule, ...]:
        """Replace the rules from the next step on (the rules panel calls this when a person edits it). All
        are checked first: a bad rule raises ValueError and changes nothing. The change is logged; rules
        may fire at once where a new trigger already ends the text."""
        checked = self._checked_rules(self.model, rules)
        if checked == self.rules:
            return self.rules
        self.interrupt()
        self._log({"kind": "rules", "rules": [rule.describe() for rule in checked]})
        # where a rule already fired is kept by its index: carry that over for the rules that stay
        self._fired = {(checked.index(self.rules[i]), at) for i, at in self._fired if self.rules[i] in checked}
        self.rules = checked
        return checked

    def rewind(self, n) -> None:
        """Drop the last n steps and their cache rows (O(1)); stepping again continues from there. The
        random state rewinds too, so with nothing else changed the same steps come again."""
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= len(self.steps):
            raise ValueError(f"can rewind 0 to {len(self.steps)} steps (the steps taken so far), not {n!r}")
        if n == 0:
            return
        self.interrupt()
        self._log({"kind": "rewind", "n": n})
        keep = len(self.steps) - n
        self._next_scores = self._rows[keep]
        self._ended_at = None
        self.text = self.text[: self._text_lengths[keep]]
        draws = self._draws_before[keep]
        del self.steps[keep:], self._rows[keep:], self._text_lengths[keep:], self._draws_before[keep:]
        del self.ids[len(self.prompt_ids) + keep :]
        if self._cache is not None:
            self._cache.truncate(len(self.ids))
        while self._epochs[-1].start > keep:  # settings changed after the point we return to
            self._epochs.pop()
        if draws != self._draws or self._epochs[-1].settings != self.settings:
            self._enter_epoch(self._epochs[-1], draws)
        self._forced = None
        self._returned = min(self._returned, keep)
        self._fired = {(rule, at) for rule, at in self._fired if at < len(self.text)}

    # --- the trace --------------------------------------------------------------------------------
    def result(self) -> "GenerationResult":
        return GenerationResult(self.text, list(self.steps), self.stopped, self.settings)

    def trace(self) -> dict:
        """The whole run as JSON-ready data (schema in engine/core/trace.py); replay() repeats it."""
        from engine.core.trace import session_trace

        return session_trace(self)

    # --- internals ---------------------------------------------------------------------------------
    def _enter_epoch(self, epoch: "Epoch", draws: int) -> None:
        """Make `epoch` current with `draws` draws taken in all: its settings, and its random stream
        advanced past the draws its own steps took (~0.1 us each)."""
        if epoch.settings != self.settings:
            self.settings = epoch.settings
            self._maker = StepMaker(self.model.tokenizer, epoch.settings, self._texts)
        self._rng, self._draws = random.Random(epoch.settings.seed), draws
        for _ in range(draws - epoch.draws_before):
            self._rng.random()

    def _scores(self) -> np.ndarray:
        """Scores for the next position: feeds every token not yet in the cache in one forward."""
        if self._next_scores is None:
            self._next_scores = self._decode(self.ids[self._cache.length :], last_only=True)[-1]
        return self._next_scores

    def _decode(self, token_ids, last_only=False) -> np.ndarray:
        """The model's scores after feeding token_ids; a failed or non-finite forward leaves the cache as
        it was, so the session is unchanged."""
        start = self._cache.length
        try:
            rows = self.model.decode(token_ids, self._cache, last_only=last_only)
            finite = np.isfinite(rows).all(axis=-1)
            if not finite.all():
                position = start + (int(np.argmin(finite)) if not last_only else len(token_ids) - 1)
                raise ValueError(f"the model produced non-finite scores (NaN or inf) at position {position}: "
                                 "its weights or its cache are damaged")  # fmt: skip
        except BaseException:
            self._cache.truncate(start)
            raise
        return rows

    def _append(self, token_id, source, scores, dists=None, u=None, options=None) -> Step:
        step = self._maker.make(scores, token_id, source, dists, u, options)
        return self._append_step(step, scores)

    def _append_step(self, step: Step, scores) -> Step:
        self.steps.append(step)
        self._rows.append(scores)
        self._text_lengths.append(len(self.text))
        self._draws_before.append(self._draws)  # a sampled step counts its own draw once it exists
        self.ids.append(step.token_id)
        self.text += step.token
        self._next_scores = None
        return step

    def _append_remote(self, token_ids, source, options=None) -> list[Step]:
        """Forced tokens on a server, scored in place (their probabilities and the server's top N at each:
        one echoing request, or one request per token where the server does not echo); each step is its
        id's own text, so the text grows by exactly the steps."""
        scored = self.model.score(self.ids, self.text, token_ids)
        steps = [
            self.model.make_step(token, source, options if index == 0 else None) for index, token in enumerate(scored)
        ]
        return [self._append_step(step, None) for step in steps]  # appended only once all are known

    def _handed_to_caller(self, steps: list[Step]) -> list[Step]:
        self._returned = len(self.steps)  # the caller has them; step() must not hand them out again
        return steps

    def _hand_out(self) -> Step:
        self._returned += 1
        return self.steps[self._returned - 1]

    def _insert(self, token_ids, source, options=None) -> list[Step]:
        if self.remote:
            return self._append_remote(token_ids, source, options)
        first_row = self._scores()
        rows = [first_row]
        if len(token_ids) > 1:
            rows += list(self._decode(self.ids[self._cache.length :] + token_ids[:-1]))
        taken = [
            self._append(token_id, source, row, options=options if i == 0 else None)
            for i, (token_id, row) in enumerate(zip(token_ids, rows))
        ]
        return taken  # the last inserted token is not fed yet; all the others are in the cache

    def _option_probabilities(self, encoded) -> list[tuple[float, float]]:
        """(probability under the settings, raw model probability) of each whole option. A server reports
        raw probabilities only, for its top N: an option with a token outside them counts as 0."""
        if self.remote:
            results = []
            for token_ids in encoded:
                scored = self.model.score(self.ids, self.text, token_ids)
                p = math.prod(math.exp(t.logprob) if t.logprob is not None else 0.0 for t in scored)
                results.append((p, p))
            return results
        first = self._scores()
        start = self._cache.length
        results = []
        for token_ids in encoded:
            rows = [first]
            if len(token_ids) > 1:
                rows += list(self._decode(token_ids[:-1]))
                self._cache.truncate(start)
            p_settings = p_raw = 1.0
            for token_id, row in zip(token_ids, rows):
                _, raw, _, _, final = self._maker.distributions(row)
                p_settings *= float(final[token_id])
                p_raw *= float(raw[token_id])
            results.append((p_settings, p_raw))
        return results

    def _choose(self, options, encoded, source) -> list[Step]:
        probabilities = self._option_probabilities(encoded)
        best = max(range(len(options)), key=lambda i: (probabilities[i][0], probabilities[i][1], -i))
        recorded = tuple((option, p) for option, (p, _) in zip(options, probabilities))
        return self._insert(encoded[best], source, options=recorded)

    def _fire_rules(self) -> bool:
        """Let the first rule whose trigger ends the text act, once per occurrence. True if it added steps."""
        for index, rule in enumerate(self.rules):
            if (index, len(self.text)) in self._fired or not rule.matches(self.text):
                continue
            self._fired.add((index, len(self.text)))
            if self._act(rule):
                return True
        return False

    def _act(self, rule: Rule) -> bool:
        self.interrupt()  # a server's open stream would go on from the text as it was before the rule
        room = self.model.context_length - len(self.ids)
        if rule.action == "choose":
            encoded = [self.model.tokenizer.encode(o) for o in rule.choose]
            if max(map(len, encoded)) > room:
                self.events.append(f"rule {rule.when!r}: its options do not fit in the context")
                return False
            steps = self._choose(list(rule.choose), encoded, "rule")
            self._log({"kind": "choose", "options": list(rule.choose), "source": "rule"})
            return bool(steps)
        source, text = "rule", rule.insert
        if rule.action == "tool":
            source = "tool"
            try:
                text = rule.tool(self.text)
            except Exception as error:  # a tool is someone else's code: its failure must not end the session
                self.events.append(f"rule {rule.when!r}: the tool failed: {type(error).__name__}: {error}")
                return False
            if not isinstance(text, str):
                self.events.append(f"rule {rule.when!r}: the tool returned {type(text).__name__}, not text")
                return False
        try:
            token_ids = self.model.tokenizer.encode(text)
        except ValueError as error:
            self.events.append(f"rule {rule.when!r}: cannot insert {text[:40]!r}: {error}")
            return False
        if len(token_ids) > room:
            self.events.append(f"rule {rule.when!r}: only {room} of {len(token_ids)} tokens fit in the context")
            token_ids = token_ids[:room]
        if not token_ids:
            return False
        steps = self._insert(token_ids, source)
        self._log({"kind": "insert", "token_ids": token_ids, "source": source})
        return bool(steps)

    def _log(self, action: dict) -> None:
        self.actions.append(action)

    def _check_token_id(self, token_id) -> None:
        if not isinstance(token_id, (int, np.integer)) or isinstance(token_id, (bool, np.bool_)):
            raise ValueError(f"token id must be an int, got {token_id!r}")
        if self.model.vocab_size is None:  # a server's vocabulary: its tokenizer says what is valid
            if token_id < 0:
                raise ValueError(f"token id {token_id} is negative")
        elif not 0 <= token_id < self.model.vocab_size:
            raise ValueError(f"token id {token_id} is outside the vocabulary (0 to {self.model.vocab_size - 1})")

    def _check_room(self, count: int) -> None:
        """Refuse to add tokens past the last position (a pending forced token already holds one)."""
        room = self.model.context_length - len(self.ids) - (self._forced is not None)
        if count > room:
            raise ValueError(
                f"cannot add {count} token{'s' * (count != 1)}: {self.model.context_length - room} of the "
                f"model's {self.model.context_length} positions are used, {room} left"
            )

    def _encode_nonempty(self, text, what: str) -> list[int]:
        if not isinstance(text, str) or not text:
            raise ValueError(f"{what} must be non-empty text, got {text!r}")
        return self.model.tokenizer.encode(text)

    def _check_options(self, options) -> list[list[int]]:
        if isinstance(options, str) or not isinstance(options, (list, tuple)) or not options:
            raise ValueError(f"options must be a non-empty list of strings, got {options!r}")
        encoded = [self._encode_nonempty(option, "each option") for option in options]
        if len(set(options)) != len(options):
            raise ValueError(f"options must differ from each other, got {list(options)!r}")
        return encoded

    @staticmethod
    def _checked_rules(model, rules) -> tuple[Rule, ...]:
        if isinstance(rules, (str, bytes, Rule)) or not hasattr(rules, "__iter__"):
            raise ValueError(f"rules must be a list of engine.Rule objects, got {type(rules).__name__}")
        rules = tuple(rules)
        for rule in rules:
            if not isinstance(rule, Rule):
                raise ValueError(f"rules must be engine.Rule objects, got {type(rule).__name__}")
            for text in ([rule.insert] if rule.insert is not None else []) + list(rule.choose or ()):
                if not text:
                    raise ValueError(f"rule {rule.when!r}: empty option")
                model.tokenizer.encode(text)  # ValueError names an unknown character
        return rules


@dataclass(frozen=True)
class Epoch:
    start: int  # the first step these settings apply to
    settings: Settings
    draws_before: int  # random draws taken before it (its own stream starts at Random(settings.seed))


@dataclass(frozen=True)
class GenerationResult:
    text: str  # prompt plus generated text
    steps: list[Step]
    stopped: str | None
    settings: Settings

    @property
    def seed(self) -> int:
        return self.settings.seed

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "stopped": self.stopped,
            "settings": self.settings.to_dict(),
            "steps": [step.to_dict() for step in self.steps],
        }


def generate(model, prompt, max_new_tokens=60, temperature=0.0, top_k=None, top_p=None, min_p=None, seed=0):
    """Continue the prompt until the model stops; a thin wrapper over Session."""
    session = Session(model, prompt, max_new_tokens, temperature, top_k, top_p, min_p, seed)
    session.run()
    return session.result()
