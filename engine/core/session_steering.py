"""Session's steering commands (a mixin of engine/core/session.py's Session): force a token, insert text or
token ids, choose among options, the rules that do the same between two steps (set_rules), and steering from the
inside (steer_heads, steer_vector). They use the Session's
state and private helpers (_log, _append, _check_room, ...) as its own methods do."""

import bisect

import numpy as np

from engine.core.chat import checked_budget
from engine.core.checks import checked_token_id, encoded_nonempty, encoded_options
from engine.core.inside import head_scale_table
from engine.core.rules import Rule, checked_rules, rule_matches, rule_plan
from engine.core.steering import steering_table, vector_action
from engine.core.steps import Step
from engine.core.tree import INSERTED


class Steering:
    # steer_vector's: (the vector, its layers, the strength), None while none is added; the additions [layers, d]
    vector_steering = None
    residual_table: np.ndarray | None = None
    thinking: tuple[str, str, int] | None = None  # set_thinking_budget's (opening, closing, tokens)

    def set_thinking_budget(self, opening, closing, tokens) -> None:
        """Bound a reasoning model's thinking, as llama.cpp's reasoning budget does: once `tokens` tokens follow
        the last `opening` marker with no `closing` after it, the closing marker is inserted (a rule's insertion,
        logged: replay repeats it). tokens None removes the bound. Logged."""
        if tokens is None:
            self.thinking = None
        else:
            for name, marker in (("opening", opening), ("closing", closing)):
                if not isinstance(marker, str) or not marker:
                    raise ValueError(f"a thinking budget's {name} marker must be non-empty text, got {marker!r:.40}")
            encoded_nonempty(self.model.tokenizer, closing, "the closing marker")  # insertable, or a ValueError now
            self.thinking = (opening, closing, checked_budget(tokens))
        self._log({"kind": "thinking", "budget": None if self.thinking is None else list(self.thinking)})

    def _end_thinking(self) -> bool:
        """Insert the closing marker where the thinking has used its budget. True if it added steps."""
        if self.thinking is None:
            return False
        opening, closing, budget = self.thinking
        start = self.text.rfind(opening)
        if start < 0 or self.text.find(closing, start) >= 0:
            return False
        taken = len(self.steps) - bisect.bisect_left(self._text_lengths, start + len(opening))  # tokens after it
        if taken < budget or len(self.steps) >= self.settings.max_new_tokens:
            return False
        token_ids = self.model.tokenizer.encode(closing)
        if len(token_ids) > self.model.context_length - len(self.ids):
            return False
        self.interrupt()
        return bool(self._insert_logged(list(token_ids), "rule", heal=False))

    def set_rules(self, rules) -> tuple[Rule, ...]:
        """Replace the rules from the next step on (the rules panel calls this when a person edits it). All
        are checked first: a bad rule raises ValueError and changes nothing. The change is logged; rules
        may fire at once where a new trigger already ends the text."""
        checked = checked_rules(self.model, rules)
        if checked == self.rules:
            return self.rules
        self.interrupt()
        self._log({"kind": "rules", "rules": [rule.describe() for rule in checked]})
        # where a rule already fired is kept by its index: carry that over for the rules that stay
        self._fired = {(checked.index(self.rules[i]), at) for i, at in self._fired if self.rules[i] in checked}
        self.rules = checked
        return checked

    def steer_heads(self, scales) -> tuple[tuple[int, int, float], ...]:
        """Scale attention heads' outputs from the next step on (steering from the inside): scales lists
        (layer, head, factor), 0-based as engine.attention_weights indexes them; 0 ablates a head, [] puts every
        head back. The next step reads the whole text again through the steered model (steps already taken keep
        their records); a rewind or a goto keeps the scales (as set_rules). Logged, so replay repeats it. Only
        where the engine runs the model's layers."""
        checked, table = head_scale_table(self.model, scales)
        if checked == self.head_scales:
            return checked
        self.interrupt()
        self._context.set_head_scales(table)
        self._log({"kind": "heads", "scales": [list(entry) for entry in checked]})
        self.head_scales, self.head_table = checked, table
        return checked

    def steer_vector(self, vector, layers, strength):
        """Add strength x the vector's direction to the residual stream after each of these layers (0-based, as
        engine.steering_vector makes them) from the next step on; strength 0 (or no layer) removes it. As
        steer_heads: the next step reads the whole text again under it (steps taken keep their records), a rewind
        or a goto keeps it, and it is logged, so replay repeats it. -> the steering now in force (or None)."""
        checked, strength, table = steering_table(self.model, vector, layers, strength)
        now = None if table is None else (vector, checked, strength)
        if _same(self.vector_steering, now):
            return self.vector_steering
        self.interrupt()
        self._context.set_residual_additions(table)
        self._log(vector_action(vector, checked, strength))
        self.vector_steering, self.residual_table = now, table
        return now

    def steering_at(self, index) -> tuple:
        """(head_table, residual_table) the step at this index was read under (None: as trained), the steering
        in force now for index len(steps) (the next token): the Inside tab reads a step as it was drawn."""
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index <= len(self.steps):
            raise ValueError(f"a step index is an int from 0 to {len(self.steps)} (the next token), not {index!r:.40}")
        if index == len(self.steps):
            return self.head_table, self.residual_table
        return self._read_under[index]

    def force_token(self, token_id) -> None:
        """The next step takes this token, whatever its probability (replacing an earlier force)."""
        checked_token_id(token_id, self.model.vocab_size)
        self.interrupt()
        self._forced = None
        self._check_room(1)
        self._forced = int(token_id)

    def insert_text(self, text, source="forced") -> list[Step]:
        """Append the text's tokens as forced steps, each with the model's own probability for it, through
        one batched forward over the new positions."""
        return self.insert_tokens(encoded_nonempty(self.model.tokenizer, text, "inserted text"), source)

    def insert_tokens(self, token_ids, source="forced", heal=True) -> list[Step]:
        """insert_text for token ids (replay uses it: a trace records the ids that were inserted). heal False: the
        ids are taken whole even with token healing on (as the thinking budget's closing marker was)."""
        if source not in INSERTED:
            raise ValueError(f"an inserted token's source must be 'forced', 'rule' or 'tool', got {source!r}")
        if not isinstance(token_ids, (list, tuple, np.ndarray)) or len(token_ids) == 0:
            raise ValueError(f"token ids must be a non-empty list of ints, got {token_ids!r:.60}")
        for token_id in token_ids:
            checked_token_id(token_id, self.model.vocab_size)
        token_ids = [int(t) for t in token_ids]
        self._check_room(len(token_ids))
        self.interrupt()
        return self._handed_to_caller(self._insert_logged(token_ids, source, heal=heal is not False))

    def choose(self, options, source="forced") -> list[Step]:
        """The next tokens spell one of the options: the one the model, under the current settings, finds
        most probable as a whole (ties: higher raw-model probability, then the first listed). Every
        option's probability is recorded on the first step. No random draw is used."""
        if source not in ("forced", "rule"):
            raise ValueError(f"a choice's source must be 'forced' or 'rule', got {source!r:.40}")
        encoded = encoded_options(self.model.tokenizer, options)
        self._check_room(max(len(ids) for ids in encoded))
        self.interrupt()
        steps = self._choose(list(options), encoded, source)
        self._log({"kind": "choose", "options": list(options), "source": source})
        return self._handed_to_caller(steps)

    def _insert(self, token_ids, source, options=None, heal=True) -> list[Step]:
        """Forced steps, appended only once every one is known: a failure adds none. With token healing on,
        the last token(s) of an inserted text are left for the model to spell (at least one is inserted)."""
        cut = self._healer().backoff(token_ids, keep=1) if heal and self.settings.heal else 0
        kept = list(token_ids[: len(token_ids) - cut])
        steps = self._append(self._context.force(self.ids, self.text, kept, source, self.settings, options))
        if cut:
            self._healing = b"".join(self._healer().pieces[i] for i in token_ids[-cut:])
        return steps

    def _insert_logged(self, token_ids: list[int], source: str, heal: bool = True) -> list[Step]:
        """_insert, logged as an "insert" action once its steps exist (insert_tokens, a rule, the thinking budget):
        replay repeats the ids, never the rule."""
        steps = self._insert(token_ids, source, heal=heal)
        self._log(
            {"kind": "insert", "token_ids": list(token_ids), "source": source, **({} if heal else {"heal": False})}
        )
        return steps

    def _choose(self, options, encoded, source) -> list[Step]:
        probabilities = self._context.option_probabilities(self.ids, self.text, encoded, self.settings)
        best = max(range(len(options)), key=lambda i: (probabilities[i][0], probabilities[i][1], -i))
        recorded = tuple((option, p) for option, (p, _) in zip(options, probabilities))
        return self._insert(encoded[best], source, options=recorded, heal=False)  # an option is spelled whole

    def _fire_rules(self) -> bool:
        """Let the first rule whose trigger ends the text act, once per occurrence. True if it added steps."""
        for index, rule in enumerate(self.rules):
            if (index, len(self.text)) in self._fired or not rule_matches(
                rule, self.text, self.slow_rules, self.events
            ):
                continue
            self._fired.add((index, len(self.text)))
            if self._act(rule):
                return True
        return False

    def _act(self, rule: Rule) -> bool:
        self.interrupt()  # an open stream would go on from the text as it was before the rule
        # a rule adds at most what the context and max_new_tokens leave: a long insert cannot outgrow the request
        room = min(self.model.context_length - len(self.ids), self.settings.max_new_tokens - len(self.steps))
        plan = rule_plan(rule, self.text, self.model.tokenizer, room, self.events, self.client_spans)
        if plan is None:
            return False
        start = len(self.text)
        if plan.options:
            steps = self._choose(list(plan.options), list(plan.encoded), "rule")
            self._log({"kind": "choose", "options": list(plan.options), "source": "rule"})
        else:
            steps = self._insert_logged(list(plan.token_ids), plan.source)
        if rule.client and steps:  # to its end, the bytes healing left for the model to spell included
            healed = len((self._healing or b"").decode("utf-8", "replace"))
            self.client_spans.append((start, len(self.text) + healed))
        return bool(steps)


def _same(old, new) -> bool:
    """The same steering: none both, or the same layers, strength and rows (a vector made again, or replayed)."""
    if old is None or new is None:
        return old is new
    (old_vector, old_layers, old_strength), (vector, layers, strength) = old, new
    rows = list(layers)
    return (old_layers, old_strength) == (layers, strength) and np.array_equal(
        old_vector.directions[rows], vector.directions[rows]
    )
