"""What a server answered, checked field by field before any of it is used: TopN and Token (a token as a
server reports it), and one checker per answer's shape. A field that is not what was expected raises
_Malformed, which ServerConnection.checked turns into a ValueError naming the server and the request.

Servers answer logprobs in two forms, both read here: the legacy completions form (tokens, token_logprobs,
top_logprobs as text -> logprob) and llama-server's list form (content[i] with id, token, bytes, logprob and
top_logprobs as a list with ids); where a server names token ids, they are kept.
"""

import math
from dataclasses import dataclass, replace

MAX_TOKEN_ID = 2**31 - 1  # above any vocabulary: the bound for ids where the server does not say its size
END_REASONS = ("stop", "length", "eos", "eos_token", "stop_sequence")  # finish reasons that end a text


class TopN(dict):
    """The server's top N at one position. As a dict: text -> logprob (the likelier where two tokens share a
    text). `entries`: every alternative as (text, logprob, id), most likely first, id -1 where the server
    named text only (llama-server names ids, and its control tokens all have the text "")."""

    def __init__(self, entries=()):
        super().__init__()
        self.entries = tuple(sorted(entries, key=lambda entry: -entry[1]))
        for text, logprob, _ in self.entries:
            self.setdefault(text, logprob)

    def logprob(self, token_id: int, text: str) -> float | None:
        """A token's log-probability here: by id where the server named ids, else by text; None outside."""
        if any(i >= 0 for _, _, i in getattr(self, "entries", ())):  # (a plain dict: by text)
            return next((lp for _, lp, i in self.entries if i == token_id), None)
        return self.get(text)


@dataclass(frozen=True)
class Token:
    """One token as a server reports it: its text, log-probability and the top alternatives."""

    text: str
    logprob: float | None
    top: dict  # a TopN: text -> logprob, the server's top N at this position
    finish: str | None = None  # "stop" (end of text) or "length" on the last token of a request
    id: int | None = None  # when the server names it (or the token was forced)


class _Malformed(Exception):
    """A field of an answer that is not what was expected; the request turns it into a ValueError that
    names the server and the request."""

    def __init__(self, field: str, value, expected: str):
        super().__init__(f"{field} = {value!r:.80}, expected {expected}")


class _Missing:
    def __repr__(self):
        return "nothing"


MISSING = _Missing()


def _at(answer, key: str):
    return answer.get(key, MISSING) if isinstance(answer, dict) else MISSING


def _object(value, field: str, expected: str = "a JSON object") -> dict:
    if not isinstance(value, dict):
        raise _Malformed(field, value, expected)
    return value


def _list(value, field: str, expected: str) -> list:
    if not isinstance(value, list):
        raise _Malformed(field, value, expected)
    return value


def _string(value, field: str) -> str:
    if not isinstance(value, str):
        raise _Malformed(field, value, "a string")
    return value


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_TOKEN_ID + 1


def _token_id(value, field: str, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        raise _Malformed(field, value, f"a token id, an int from 0 to {limit - 1}")
    return value


def _logprob(value, field: str) -> float | None:
    """A log-probability, or None where the server gave none (an echo's first entry)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -math.inf < value <= 1e-3:
        raise _Malformed(field, value, "a log-probability: a finite number <= 0")
    return float(value)


def _models(answer: dict) -> list[dict]:
    """/v1/models: data, a list of {"id": name, ...}."""
    data = _list(_at(answer, "data"), "data", "a list of the models served")
    for i, entry in enumerate(data):
        _string(_at(_object(entry, f"data[{i}]", "a model: an object with its id"), "id"), f"data[{i}].id")
    return data


def _choice(answer: dict) -> dict:
    """A completion's first choice, with its text and finish reason checked."""
    choices = _list(_at(answer, "choices"), "choices", "a list of completions")
    if not choices:
        raise _Malformed("choices", choices, "one completion")
    choice = _object(choices[0], "choices[0]")
    _string(choice.get("text", ""), "choices[0].text")
    finish = choice.get("finish_reason")
    if finish is not None and finish not in END_REASONS:
        raise _Malformed("choices[0].finish_reason", finish, f"null or one of {', '.join(END_REASONS)}")
    return choice


def _completion(answer: dict, limit: int, asked: int) -> list[Token]:
    """A completion's tokens: as many as asked, or fewer only where the server says why it stopped."""
    choice = _choice(answer)
    tokens = _tokens(choice, limit)
    if len(tokens) > asked:
        raise _Malformed("choices[0].logprobs", f"{len(tokens)} tokens", f"at most the {asked} asked for")
    if len(tokens) < asked and choice.get("finish_reason") is None:
        raise _Malformed("choices[0].finish_reason", None, f"why it sent {len(tokens)} of the {asked} tokens asked")
    return tokens


def _echoed(answer: dict, limit: int, asked: int | None) -> tuple[list[Token], int]:
    """An echo's entries and how many of them may be the completion's (usage.completion_tokens, 0 or 1).
    A prompt of `asked` token ids is echoed whole (a text prompt: the server's tokens, any number)."""
    tokens = _tokens(_choice(answer), limit)
    completion = _object(answer.get("usage") or {}, "usage").get("completion_tokens", 1)
    if isinstance(completion, bool) or not isinstance(completion, int) or completion not in (0, 1):
        raise _Malformed("usage.completion_tokens", completion, "the completion's token count, 0 or 1")
    if not tokens or asked is not None and not asked <= len(tokens) <= asked + completion:
        expected = f"the prompt's {asked} tokens, then up to {completion} more" if asked else "the prompt's tokens"
        raise _Malformed("choices[0].logprobs", f"{len(tokens)} entries", expected)
    return tokens, completion


def _streamed(answer: dict, limit: int) -> tuple[list[Token], str | None]:
    """A streamed chunk's tokens and finish reason; a chunk without text may carry no logprobs (the last)."""
    choice = _choice(answer)
    if choice.get("logprobs") is None and not choice.get("text"):
        return [], choice.get("finish_reason")
    tokens = _tokens(choice, limit)
    if not tokens and choice.get("text"):
        raise _Malformed("choices[0].logprobs", choice["logprobs"], f"an entry for its text {choice['text']!r:.40}")
    return tokens, choice.get("finish_reason")


def _tokens(choice: dict, limit: int) -> list[Token]:
    """A choice's tokens, from either logprobs form, the finish reason on the last."""
    logprobs = _object(choice.get("logprobs", MISSING), "choices[0].logprobs",
                       "the tokens' log-probabilities (the request asks for them)")  # fmt: skip
    if "content" in logprobs:
        out = _list_form(logprobs["content"], "choices[0].logprobs.content", limit)
    else:
        out = _completions_form(logprobs, "choices[0].logprobs")
    if out and choice.get("finish_reason"):
        out[-1] = replace(out[-1], finish=choice["finish_reason"])
    return _with_ids(out, choice.get("token_ids"), limit)


def _with_ids(tokens: list[Token], ids, limit: int) -> list[Token]:
    """vLLM's token_ids (return_token_ids): the completion's ids, which are the last entries (after an echo's)."""
    if ids is None:
        return tokens
    ids = _list(ids, "choices[0].token_ids", f"a list of the completion's token ids (at most {len(tokens)})")
    if len(ids) > len(tokens):
        raise _Malformed("choices[0].token_ids", ids, f"at most one id per token ({len(tokens)})")
    start = len(tokens) - len(ids)
    named = [_token_id(i, f"choices[0].token_ids[{k}]", limit) for k, i in enumerate(ids)]
    return tokens[:start] + [replace(t, id=i) for t, i in zip(tokens[start:], named)]


def _completions_form(logprobs: dict, field: str) -> list[Token]:
    """tokens[i], token_logprobs[i], top_logprobs[i] as text -> logprob (None for an echoed first entry)."""
    texts = _list(logprobs.get("tokens", MISSING), f"{field}.tokens", "a list of the tokens' texts")
    values, tops = (logprobs.get(key, MISSING) for key in ("token_logprobs", "top_logprobs"))
    for key, value in (("token_logprobs", values), ("top_logprobs", tops)):
        if not isinstance(value, list) or len(value) != len(texts):
            raise _Malformed(f"{field}.{key}", value, f"a list with one entry per token ({len(texts)})")
    out = []
    for i, (text, value, top) in enumerate(zip(texts, values, tops)):
        top = _object(top if top is not None else {}, f"{field}.top_logprobs[{i}]", "an object: text -> logprob")
        alternatives = [(t, _logprob(lp, f"{field}.top_logprobs[{i}][{t!r}]"), -1) for t, lp in top.items()]
        out.append(Token(_string(text, f"{field}.tokens[{i}]"), _logprob(value, f"{field}.token_logprobs[{i}]"),
                         TopN(a for a in alternatives if a[1] is not None)))  # fmt: skip
    return out


def _list_form(content, field: str, limit: int) -> list[Token]:
    """llama-server's content[i]: {id, token, bytes, logprob, top_logprobs: [{id, token, bytes, logprob}]}
    (the ids where given: OpenAI's chat form names text only)."""
    out = []
    for i, entry in enumerate(_list(content, field, "a list of the tokens' entries")):
        at = f"{field}[{i}]"
        entry = _object(entry, at)
        top = []
        for j, alternative in enumerate(_list(entry.get("top_logprobs") or [], f"{at}.top_logprobs", "a list")):
            alternative = _object(alternative, f"{at}.top_logprobs[{j}]")
            top.append(_entry(alternative, f"{at}.top_logprobs[{j}]", limit))
        text, logprob, token_id = _entry(entry, at, limit)
        top = TopN(a for a in top if a[1] is not None)
        out.append(Token(text, logprob, top, id=token_id if "id" in entry else None))
    return out


def _entry(entry: dict, field: str, limit: int) -> tuple[str, float | None, int]:
    """(text, logprob, id or -1) of a list-form entry. Its text comes from its bytes where given (its
    "token" drops the bytes of a partial UTF-8 character), decoded as a tokenizer decodes one token:
    invalid bytes become U+FFFD."""
    raw = entry.get("bytes")
    if raw is not None:
        if not isinstance(raw, list) or not all(type(b) is int and 0 <= b < 256 for b in raw):  # (not bool)
            raise _Malformed(f"{field}.bytes", raw, "a list of byte values 0 to 255")
        text = bytes(raw).decode("utf-8", "replace")
    else:
        text = _string(entry.get("token", MISSING), f"{field}.token")
    token_id = _token_id(entry["id"], f"{field}.id", limit) if "id" in entry else -1
    return text, _logprob(entry.get("logprob"), f"{field}.logprob"), token_id
