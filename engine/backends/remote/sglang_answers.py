"""SGLang's native answers, checked field by field before any of it is used (as answers.py checks the OpenAI
forms): /get_model_info, and /generate's meta_info (python/sglang/srt/managers/tokenizer_manager.py).

A /generate answer is {"text", "output_ids", "meta_info"}; with return_logprob its meta_info holds, per position,
[logprob, token id, text] triples (text null unless return_text_in_logprobs):

    output_token_logprobs      one triple per generated token: the token drawn and its log-probability
    output_top_logprobs        per generated token, a list of triples (top_logprobs_num of them)
    input_token_logprobs       one triple per prompt token from logprob_start_len on: the token and its
                               log-probability after the tokens before it; the first entry's is null
    input_top_logprobs         per prompt token from logprob_start_len on, the top list it was drawn from
                               (null first)
    input_token_ids_logprobs   the same for the ids named in token_ids_logprob (null first)
    finish_reason              null while generating, then {"type": "stop", "matched": id or text},
                               {"type": "length", "length": n} or {"type": "abort", "message": ...}
    completion_tokens          the tokens generated so far (a stream's chunks repeat the lists cumulatively by
                               default; --incremental-streaming-output sends only each chunk's new ones)

orjson writes -inf as null: a null log-probability in a list is a token the server gives no chance.
"""

from dataclasses import dataclass

from engine.backends.remote.answers import (
    MISSING,
    Token,
    TopN,
    _at,
    _is_count,
    _list,
    _logprob,
    _Malformed,
    _object,
    _string,
    _token_id,
)

FINISH_TYPES = ("stop", "length")  # an "abort" is the server's failure
NO_CHANCE = -float("inf")


@dataclass(frozen=True)
class Generated:
    """One /generate answer (or one streamed chunk): the prompt's entries from logprob_start_len on (a Token per
    prompt token: its log-probability and the top N it was drawn from; the first has neither), the generated
    tokens, how many tokens the server has generated in all, and why it stopped (None: not yet)."""

    prompt: list[Token]
    output: list[Token]
    completion_tokens: int
    finish: dict | None


def model_info(answer: dict) -> str:
    """/get_model_info: {"model_path": ..., "is_generation": true, ...} -> the model's path (SGLang's own)."""
    if not isinstance(_at(answer, "is_generation"), bool):
        raise _Malformed("is_generation", _at(answer, "is_generation"), "true or false (SGLang's /get_model_info)")
    return _string(_at(answer, "model_path"), "model_path")


def generated(answer: dict, limit: int) -> Generated:
    """A /generate answer's meta_info, checked: the entries asked for, each a [logprob, id, text] triple."""
    if "error" in answer:  # a stream's last chunk when the request failed
        error = _object(answer["error"], "error")
        raise _Malformed("error", error.get("message", error), "no error")
    meta = _object(_at(answer, "meta_info"), "meta_info", "the answer's meta_info (an object)")
    finish = meta.get("finish_reason")
    if finish is not None:
        _object(finish, "meta_info.finish_reason", "null or an object with its type")
        if finish.get("type") not in FINISH_TYPES:
            raise _Malformed("meta_info.finish_reason", finish, "type stop or length (the server aborted the request)")
    count = meta.get("completion_tokens", MISSING)
    if not (count == 0 and type(count) is int or _is_count(count)):
        raise _Malformed("meta_info.completion_tokens", count, "the count of tokens generated")
    output = _triples(meta.get("output_token_logprobs", MISSING), "meta_info.output_token_logprobs", limit)
    output_tops = _tops(meta.get("output_top_logprobs", []), "meta_info.output_top_logprobs", len(output), limit)
    prompt = _triples(meta.get("input_token_logprobs", []), "meta_info.input_token_logprobs", limit, first_null=True)
    prompt_tops = _tops(meta.get("input_top_logprobs", []), "meta_info.input_top_logprobs", len(prompt), limit)
    named = _tops(meta.get("input_token_ids_logprobs", []), "meta_info.input_token_ids_logprobs", len(prompt), limit)
    if any(lp is None for lp, _, _ in output):
        raise _Malformed("meta_info.output_token_logprobs", output, "a log-probability for every generated token")
    return Generated(
        prompt=[_token(entry, top, extra) for entry, top, extra in zip(prompt, prompt_tops, named)],
        output=[_token(entry, top, []) for entry, top in zip(output, output_tops)],
        completion_tokens=count,
        finish=finish,
    )


def _triples(value, field: str, limit: int, first_null: bool = False) -> list[tuple]:
    """[logprob, id, text] entries (text "" where the server sent null: asked for by id later)."""
    out = []
    for i, entry in enumerate(_list(value, field, "a list of [logprob, token id, text] entries")):
        at = f"{field}[{i}]"
        if not isinstance(entry, list) or len(entry) != 3:
            raise _Malformed(at, entry, "a [logprob, token id, text] entry")
        logprob, token_id, text = entry
        if logprob is None:  # the prompt's first token has none; elsewhere it is orjson's -inf: no chance
            logprob = None if first_null and i == 0 else NO_CHANCE
        else:
            logprob = _logprob(logprob, f"{at}[0]")
        out.append((logprob, _token_id(token_id, f"{at}[1]", limit), "" if text is None else _string(text, f"{at}[2]")))
    return out


def _tops(value, field: str, count: int, limit: int) -> list[list[tuple]]:
    """Per position, a list of triples (null where the server has none: a prompt's first), `count` positions
    (none at all where the request did not ask for them)."""
    positions = _list(value, field, "a list with a list of [logprob, id, text] entries per position")
    if not positions:
        return [[] for _ in range(count)]
    if len(positions) != count:
        raise _Malformed(field, f"{len(positions)} positions", f"one per token ({count})")
    return [[] if entries is None else _triples(entries, f"{field}[{i}]", limit) for i, entries in enumerate(positions)]


def _token(entry: tuple, top: list[tuple], named: list[tuple]) -> Token:
    """A Token from its triple and its position's top N (ids named too: token_ids_logprob), by id."""
    logprob, token_id, text = entry
    known = {i: (t, lp) for lp, i, t in (*named, *top) if lp is not None and lp > NO_CHANCE}
    alternatives = TopN((t, lp, i) for i, (t, lp) in known.items())
    return Token(text, None if logprob == NO_CHANCE else logprob, alternatives, id=token_id)  # (no surprisal: inf)
