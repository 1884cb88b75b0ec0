"""A conversation as a chat model reads it: a system prompt and turns (user, assistant, tool), rendered through
the model's own chat template (the GGUF file's, in the engine's jinja2 sandbox) with the assistant's turn next.

The window's chat mode and a chat trace hold a Conversation; the text a Session starts from is `chat_prompt` of
it, so a chat generation is a generation like any other: every token visible, steerable and replayed bit for bit.

What a template does on its own is found by rendering it, never by reading its source: `default_system` is the
system text a template writes where a conversation gives none (SmolLM2's "You are a helpful AI assistant named
SmolLM..."), `thinking_markers` the tags a reasoning model writes its thinking between.
"""

from dataclasses import dataclass, field, replace

ROLES = ("user", "assistant", "tool")
MAX_TURNS = 4096
MAX_TURN_CHARS = 1 << 20
PROBE_SYSTEM, PROBE_USER = "\x1fsystem probe\x1f", "\x1fuser probe\x1f"  # text no template writes itself
THINKING = (("<think>", "</think>"), ("<thinking>", "</thinking>"), ("<|channel|>analysis", "<|end|>"))


@dataclass(frozen=True)
class Turn:
    role: str  # "user", "assistant" or "tool"
    content: str
    name: str = ""  # a tool turn: which tool answered (shown; templates that take it read it)

    def to_dict(self) -> dict:
        return {"role": self.role, "content": self.content, **({"name": self.name} if self.name else {})}


@dataclass(frozen=True)
class Conversation:
    """What a person built in chat mode. system None: the template's own default (`default_system`); "": a
    system message with nothing in it (as near to none as a template that always writes one allows)."""

    turns: tuple[Turn, ...] = ()
    system: str | None = None
    thinking_budget: int | None = None  # tokens of thinking before the closing marker is inserted (None: no bound)
    extra: dict = field(default_factory=dict, compare=False)  # room for what later versions add (kept, not read)

    def messages(self) -> list[dict]:
        """The messages a chat template reads (the system message first where there is one)."""
        head = [] if self.system is None else [{"role": "system", "content": self.system}]
        return head + [turn.to_dict() for turn in self.turns]

    def with_turn(self, role: str, content: str, name: str = "") -> "Conversation":
        return replace(self, turns=(*self.turns, checked_turn(Turn(role, content, name), len(self.turns))))

    def edited(self, index: int, content: str) -> "Conversation":
        """The conversation up to this turn, its text changed, and nothing after it (a branch: the turns after
        it stay in the tree of the session they were written in)."""
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self.turns):
            raise ValueError(f"a turn index is an int from 0 to {len(self.turns) - 1}, not {index!r:.40}")
        turn = checked_turn(replace(self.turns[index], content=content), index)
        return replace(self, turns=(*self.turns[:index], turn))

    def to_dict(self) -> dict:
        return {"system": self.system, "turns": [turn.to_dict() for turn in self.turns],
                "thinking_budget": self.thinking_budget}  # fmt: skip

    @classmethod
    def from_dict(cls, data) -> "Conversation":
        """Inverse of to_dict, checked (a trace or a session file is read from disk): ValueError naming what is
        wrong."""
        if not isinstance(data, dict) or not isinstance(data.get("turns"), list):
            raise ValueError("a conversation is an object with a list of turns")
        system, budget = data.get("system"), data.get("thinking_budget")
        if system is not None and (not isinstance(system, str) or len(system) > MAX_TURN_CHARS):
            raise ValueError(f"a conversation's system prompt is text of at most {MAX_TURN_CHARS:,} characters or null")
        if len(data["turns"]) > MAX_TURNS:
            raise ValueError(f"a conversation holds at most {MAX_TURNS:,} turns")
        turns = []
        for i, turn in enumerate(data["turns"]):
            if not isinstance(turn, dict) or set(turn) - {"role", "content", "name"}:
                raise ValueError(f"turn {i + 1} must be an object with role, content and an optional name")
            turns.append(checked_turn(Turn(turn.get("role"), turn.get("content"), turn.get("name", "")), i))
        return cls(tuple(turns), system, checked_budget(budget))


def checked_turn(turn: Turn, index: int) -> Turn:
    if turn.role not in ROLES:
        raise ValueError(f"turn {index + 1}'s role must be one of {', '.join(ROLES)}, not {turn.role!r:.40}")
    if not isinstance(turn.content, str) or len(turn.content) > MAX_TURN_CHARS:
        raise ValueError(f"turn {index + 1}'s content must be text of at most {MAX_TURN_CHARS:,} characters")
    if not isinstance(turn.name, str) or len(turn.name) > 256:
        raise ValueError(f"turn {index + 1}'s name must be text of at most 256 characters")
    return turn


def checked_budget(budget) -> int | None:
    if budget is None:
        return None
    if not isinstance(budget, int) or isinstance(budget, bool) or not 0 <= budget <= 1 << 20:
        raise ValueError(f"a thinking budget is a number of tokens from 0 to {1 << 20:,}, or none; got {budget!r:.40}")
    return budget


def has_template(model) -> bool:
    """Whether the model has a chat template the engine renders (a server that keeps its own: no)."""
    return model.has_chat_template()


def chat_prompt(model, conversation: Conversation) -> str:
    """The text the model reads: the conversation through its chat template, the assistant's turn next.
    ValueError where the model has no template (plain mode is what is left) or the template refuses it."""
    render = getattr(model.tokenizer, "messages_prompt", None)
    if render is None or not has_template(model):
        raise ValueError(f"{model.name} has no chat template: use the plain prompt")
    return render(conversation.messages())


def default_system(model) -> str | None:
    """The system text the template writes where a conversation gives none (None: it writes none). Found by
    rendering one user turn with and without a system message and taking what stands where the system's would."""
    if not has_template(model) or not hasattr(model.tokenizer, "messages_prompt"):
        return None
    render = model.tokenizer.messages_prompt
    alone = render([{"role": "user", "content": PROBE_USER}])
    given = render([{"role": "system", "content": PROBE_SYSTEM}, {"role": "user", "content": PROBE_USER}])
    if PROBE_SYSTEM not in given:
        return None
    before, after = given.split(PROBE_SYSTEM, 1)
    if not (alone.startswith(before) and alone.endswith(after) and len(alone) > len(before) + len(after)):
        return None
    return alone[len(before) : len(alone) - len(after)] or None


def thinking_markers(model) -> tuple[str, str] | None:
    """The tags a reasoning model writes its thinking between, where its template writes them or its vocabulary
    holds them as tokens of their own; None: not a reasoning model (as far as the file tells)."""
    template = getattr(model.tokenizer, "chat_template", None) or ""
    encode = model.tokenizer.encode
    for opening, closing in THINKING:
        if opening in template and closing in template:
            return opening, closing
        try:
            if len(encode(opening)) == 1 and len(encode(closing)) == 1:
                return opening, closing
        except ValueError:  # a tokenizer that cannot spell it: not this model's
            continue
    return None


def continuation(model, text: str, conversation: Conversation) -> str | None:
    """What to insert after a session's text so that it reads as the conversation's prompt (the next turns in the
    template's own words), or None where the template does not write the conversation as that text continued
    (one that rewrites earlier turns): the chat then starts a session of its own. A chat kept in one session
    keeps every reply in its tree: an edited turn is a branch at that turn."""
    prompt = chat_prompt(model, conversation)
    return prompt[len(text) :] if prompt.startswith(text) and len(prompt) > len(text) else None
