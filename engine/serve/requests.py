"""What a client may ask for: the OpenAI request bodies (/v1/completions, /v1/chat/completions) as pydantic
models, with llama.cpp's server fields for the engine's other samplers and a `steer` field of our own, and how
each maps onto a Session (`session_options`).

A field pydantic refuses (a wrong type, a value out of OpenAI's range, a field no one defines) and a value the
engine's Settings refuse both come back as 400 naming the field (app.py); nothing here runs the model.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.core.checks import MAX_INT
from engine.core.rules import Rule

MAX_TOP_LOGPROBS = 20  # OpenAI's limit, and the steps' own candidates (TOP_CANDIDATES)
COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
CHAT_MAX_TOKENS = 2048  # chat's, where a request gives none (the context's room where that is less)

MAX_CHOICES = 8  # `n`: the choices of one request, made one after another
MAX_TEXT = 1 << 20  # characters of one text a request gives beside its prompt (a steer's insert, an option)
# llama.cpp server's sampler names (its `samplers` field) -> the engine's stages; the engine's own names pass too
SAMPLER_ALIASES = {"typ_p": "typical_p", "typical": "typical_p", "top_n_sigma": "top_n_sigma", "penalties": "penalties",
                   "temp": "temperature", "logit_bias": "logit_bias"}  # fmt: skip


class Steer(BaseModel):
    """A client's own rule for its request: when the text ends with `at` (a regex with regex=true), insert
    text or choose among options, between two inference passes. Commands are the server's rules only."""

    model_config = ConfigDict(extra="forbid")
    at: str = Field(min_length=1, max_length=MAX_TEXT)
    regex: bool = False
    insert: str | None = Field(default=None, min_length=1, max_length=MAX_TEXT)
    choose: list[str] | None = Field(default=None, min_length=1, max_length=64)

    def rule(self) -> Rule:
        return Rule(self.at, insert=self.insert, choose=self.choose, regex=self.regex, client=True)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class Sampling(BaseModel):
    """The fields both endpoints share."""

    model_config = ConfigDict(extra="forbid")
    model: str
    max_tokens: int | None = Field(default=None, ge=0, le=MAX_INT)  # 0: the prompt's echo alone
    temperature: float = 1.0  # OpenAI's default; 0 is greedy
    top_p: float | None = None
    seed: int | None = None  # None: a seed drawn for the request, kept in its trace (so it replays)
    stop: str | list[str] | None = None
    logit_bias: dict[str, float] | None = Field(
        default=None, max_length=1024
    )  # token id (as text, as OpenAI sends it) -> added score
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)  # choices: a Session each, seeds seed, seed + 1, ...
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    user: str | None = None  # OpenAI's end-user id: accepted, not used
    # llama.cpp server's names for the engine's other samplers
    top_k: int | None = None
    min_p: float | None = None
    typical_p: float | None = None
    top_n_sigma: float | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    dry_multiplier: float | None = None
    dry_base: float | None = None
    dry_allowed_length: int | None = None
    dry_penalty_last_n: int | None = None
    dry_sequence_breakers: list[str] | None = None
    xtc_probability: float | None = None
    xtc_threshold: float | None = None
    samplers: list[str] | None = None
    grammar: str | None = None
    steer: list[Steer] = Field(default_factory=list, max_length=64)
    response_format: dict | None = None  # text, json_object, json_schema: a grammar (structured.py)
    # OpenAI's older names for tools: refused by name (unsupported()), not as fields no one defines
    functions: list | None = None
    function_call: str | dict | None = None

    def unsupported(self) -> tuple[str, str] | None:
        """(field, why) for an OpenAI field this server does not serve, or None."""
        for name in ("functions", "function_call"):
            if getattr(self, name) is not None:
                return name, f"{name}: OpenAI's older form of tools is not served: send `tools` and `tool_choice`"
        return None

    def stops(self) -> tuple[str, ...]:
        stops = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        if len(stops) > 4 or not all(stops):
            raise ValueError("stop must be a non-empty string or a list of up to 4 of them")
        return stops

    def session_options(self, default_max_tokens: int) -> dict:
        """Session(model, prompt, **options): the engine's Settings fields, named as it names them."""
        options = {
            "max_new_tokens": default_max_tokens if self.max_tokens is None else max(self.max_tokens, 1),
            "temperature": self.temperature,
            "top_p": None if self.top_p in (None, 1) else self.top_p,  # OpenAI's 1 is off
            "top_k": self.top_k,
            "min_p": self.min_p,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "logit_bias": _logit_bias(self.logit_bias),
        }
        renamed = {"dry_penalty_last_n": "dry_last_n"}
        for name in ("typical_p", "top_n_sigma", "repeat_penalty", "repeat_last_n", "dry_multiplier", "dry_base",
                     "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "xtc_probability",
                     "xtc_threshold", "grammar"):  # fmt: skip
            if getattr(self, name) is not None:
                options[renamed.get(name, name)] = getattr(self, name)
        if self.samplers is not None:
            options["samplers"] = tuple(SAMPLER_ALIASES.get(s, s) for s in self.samplers)
        return options

    def rules(self) -> tuple[Rule, ...]:
        made = []
        for i, steer in enumerate(self.steer):
            try:
                made.append(steer.rule())
            except ValueError as error:
                raise ValueError(f"steer[{i}]: {error}") from None
        return tuple(made)


class CompletionRequest(Sampling):
    prompt: str | list[int] | list[str] | list[list[int]]  # a list holds one prompt (lm-eval sends it so)
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)  # the top N per token (0: the token's own)
    echo: bool = False  # the answer starts with the prompt, its tokens' log-probabilities too (as vLLM gives them)
    best_of: Literal[1] | None = None

    def prompt_text(self, tokenizer, vocab_size: int | None) -> str:
        """The prompt as text (token ids are decoded: the session reads text, as the window does)."""
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
            if len(prompt) != 1:
                raise ValueError(
                    "prompt: one prompt per request (a list of several is a batch this server does not run)"
                )
            prompt = prompt[0]
        if isinstance(prompt, list):  # token ids
            if vocab_size is not None and not all(0 <= i < vocab_size for i in prompt):
                raise ValueError(f"prompt: token ids must be from 0 to {vocab_size - 1}")
            return tokenizer.decode(prompt) if prompt else ""
        return prompt


class ToolCall(BaseModel):
    """An assistant message's earlier tool call, as the client sends it back."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(default="", max_length=256)
    type: Literal["function"] = "function"
    function: dict

    def as_dict(self) -> dict:
        if not isinstance(self.function.get("name"), str):
            raise ValueError("messages: a tool call's function needs a name")
        return {"id": self.id, "type": "function", "function": dict(self.function)}


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None  # None: an assistant message that only calls tools
    name: str | None = None
    tool_calls: list[ToolCall] | None = Field(default=None, max_length=64)
    tool_call_id: str | None = Field(default=None, max_length=256)

    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class ChatRequest(Sampling):
    messages: list[ChatMessage] = Field(min_length=1, max_length=4096)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_INT)
    tools: list[dict] | None = Field(default=None, max_length=128)  # function tools (engine/serve/tools.py)
    tool_choice: Literal["none", "auto", "required"] | dict | None = None
    parallel_tool_calls: bool | None = None  # accepted: one call per answer in the JSON form

    def chat_messages(self) -> list[dict]:
        """The messages as a chat template reads them ("developer" is OpenAI's newer name for "system"), with an
        assistant's tool calls and a tool message's call id (engine/serve/tools.py writes them out)."""
        out = []
        for m in self.messages:
            message = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
            if m.tool_calls:
                message["tool_calls"] = [call.as_dict() for call in m.tool_calls]
            if m.tool_call_id is not None:
                message["tool_call_id"] = m.tool_call_id
            out.append(message)
        return out


def _logit_bias(bias: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    """OpenAI's {"token id": bias from -100 to 100} -> the engine's ((id, bias), ...)."""
    out = []
    for key, value in (bias or {}).items():
        if not key.strip().isdigit() or not -100 <= value <= 100:
            raise ValueError(
                f"logit_bias: each key must be a token id and each value from -100 to 100, got {key!r}: {value!r}"
            )
        out.append((int(key), float(value)))
    return tuple(out)
