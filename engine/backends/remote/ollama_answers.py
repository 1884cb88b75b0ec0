"""What Ollama's native API answered, checked field by field before any of it is used (api/types.go:
GenerateResponse, Logprob, TokenLogprob, ListResponse). A field that is not what was expected raises
_Malformed, which ServerConnection.checked turns into a ValueError naming the server and the request.

Ollama names no token ids: each token comes as its text and its bytes ("bytes" is left out where the text
is ""), and is mapped here to an id of the local GGUF file's vocabulary by its bytes (OllamaTokenizer.id_for).
"""

from engine.backends.remote.answers import MISSING, Token, TopN, _at, _list, _logprob, _Malformed, _object, _string

OLLAMA_END_REASONS = ("stop", "length")  # done_reason of a generation ("" where the connection was closed)


def _version(answer: dict) -> str:
    """/api/version: {"version": "0.13.0"}."""
    return _string(_at(answer, "version"), "version")


def _tags(answer: dict) -> list[dict]:
    """/api/tags: models, a list of {"name", "model", "digest" (the manifest's sha256, hex), ...}, newest first."""
    models = _list(_at(answer, "models"), "models", "a list of the models Ollama has")
    for i, entry in enumerate(models):
        entry = _object(entry, f"models[{i}]", "a model: an object with its name and digest")
        _string(_at(entry, "name"), f"models[{i}].name")
        _string(_at(entry, "digest"), f"models[{i}].digest")
    return models


def _chunk(answer: dict, vocab) -> tuple[list[Token], str | None]:
    """One line of /api/generate's stream: its tokens (their ids from the local vocabulary) and, on the last
    line (done), why the server stopped. A line with text must carry its tokens' logprobs (they were asked)."""
    done = _at(answer, "done")
    if not isinstance(done, bool):
        raise _Malformed("done", done, "true or false")
    text = _string(_at(answer, "response"), "response")
    entries = answer.get("logprobs")
    if entries is None and text:
        raise _Malformed("logprobs", entries, f"the log-probabilities of {text!r:.40} (the request asks for them)")
    tokens = [
        _token(entry, f"logprobs[{i}]", vocab) for i, entry in enumerate(_list(entries or [], "logprobs", "a list"))
    ]
    if not done:
        return tokens, None
    reason = answer.get("done_reason", MISSING)
    if reason not in OLLAMA_END_REASONS:
        raise _Malformed("done_reason", reason, f"why the text ended: {' or '.join(OLLAMA_END_REASONS)}")
    return tokens, reason


def _token(entry, field: str, vocab) -> Token:
    """A Logprob: {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}."""
    text, logprob, token_id = _alternative(entry, field, vocab)
    tops = _list(_object(entry, field).get("top_logprobs") or [], f"{field}.top_logprobs", "a list")
    top = TopN(_alternative(alternative, f"{field}.top_logprobs[{j}]", vocab) for j, alternative in enumerate(tops))
    return Token(text, logprob, top, id=token_id)


def _alternative(entry, field: str, vocab) -> tuple[str, float, int]:
    """(text, logprob, id) of a TokenLogprob: the id of the local vocabulary's token with these bytes, and that
    token's own text (as a local model shows it); bytes no token has mean the local file is not the model
    served. An id Ollama's bytes cannot tell (tokens that share them) is -1."""
    entry = _object(entry, field)
    text = _string(entry.get("token", MISSING), f"{field}.token")
    raw = entry.get("bytes")
    if raw is None:
        data = text.encode("utf-8")
    elif not isinstance(raw, list) or not all(type(b) is int and 0 <= b < 256 for b in raw):  # (not bool)
        raise _Malformed(f"{field}.bytes", raw, "a list of byte values 0 to 255")
    else:
        data = bytes(raw)
    logprob = _logprob(entry.get("logprob", MISSING), f"{field}.logprob")
    if logprob is None:
        raise _Malformed(f"{field}.logprob", None, "a log-probability: a finite number <= 0")
    token_id = vocab.id_for(data)
    if token_id is None:
        raise _Malformed(f"{field}.bytes", list(data), f"the bytes of a token of {vocab.name}'s vocabulary "
                         "(is the local GGUF file the model Ollama serves?)")  # fmt: skip
    return (vocab.piece(token_id) if token_id >= 0 else data.decode("utf-8", "replace")), logprob, token_id
