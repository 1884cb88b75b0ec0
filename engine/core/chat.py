"""A conversation as a chat model reads it: a system prompt and turns (user, assistant, tool), rendered through
the model's own chat template (the GGUF file's, in the engine's jinja2 sandbox) with the assistant's turn next.

The window's chat mode and a chat trace hold a Conversation; the text a Session starts from is `chat_prompt` of
it, so a chat generation is a generation like any other: every token visible, steerable and replayed bit for bit.

What a template does on its own is found by rendering it, never by reading its source: `default_system` is the
system text a template writes where a conversation gives none (SmolLM2's "You are a helpful AI assistant named
SmolLM..."), `thinking_markers` the tags a reasoning model writes its thinking between.
"""

import codecs
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


def resume_at(prompt: str, pieces, target: str) -> tuple[int, str] | None:
    """How a chat kept in one session goes on to read as `target` (the conversation's next prompt): (how many of
    the session's steps to keep, the text to insert after them), or None where the session's prompt is not the
    start of target (the chat then starts a session of its own). pieces: the steps' texts in order. The steps
    kept are those the target spells as they are: a next turn is inserted after the whole reply, an edited turn
    rewinds to where it began (the tree keeps the turns after it as a branch). A session that already reads as
    the target gives (all its steps, "")."""
    if not target.startswith(prompt):
        return None
    end, keep = len(prompt), 0
    for piece in pieces:
        if not piece or not target.startswith(piece, end):
            break
        end, keep = end + len(piece), keep + 1
    return keep, target[end:]


def reasoning_markers(model) -> tuple[str, str, bool]:
    """(opening, closing, whether they are the model's own): thinking_markers, or else the usual <think> tags (a
    model that names none may still write them: the window shows such text apart and a budget bounds it)."""
    own = thinking_markers(model)
    return (*own, True) if own else (*THINKING[0], False)


def split_thinking(pieces, opening: str, closing: str) -> tuple[int, int, int] | None:
    """Where a reply's thinking is, by its steps' texts: (the step that opens it, the first step after the one that
    closes it, or len(pieces) while it goes on; how many steps lie between the markers), or None: no thinking."""
    text, ends = "", []
    for piece in pieces:
        text += piece
        ends.append(len(text))
    start = text.find(opening)
    if start < 0:
        return None
    close = text.find(closing, start + len(opening))
    first = next(i for i, end in enumerate(ends) if end > start)
    inside = next((i for i, end in enumerate(ends) if end >= start + len(opening)), len(pieces)) + 1
    if close < 0:
        return first, len(pieces), len(pieces) - inside
    last = next(i for i, end in enumerate(ends) if end >= close + len(closing)) + 1
    closed_at = next(i for i, end in enumerate(ends) if end > close)
    return first, last, max(closed_at - inside, 0)


def prompt_tokens(model, text: str) -> list[tuple[str, bool]]:
    """The text as the model reads it, token by token: (the token's text, whether it is a special token such as
    <|im_start|>). A character split across tokens shows with the token that completes it."""
    tokenizer = model.tokenizer
    special = getattr(tokenizer, "special_ids", frozenset())
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    token_bytes = getattr(tokenizer, "token_bytes", None)
    pieces = []
    for token_id in tokenizer.encode(text):
        piece = decoder.decode(token_bytes(token_id)) if token_bytes else tokenizer.decode([token_id])
        pieces.append((piece, token_id in special))
    return pieces
