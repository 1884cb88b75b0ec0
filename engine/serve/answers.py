"""How answers are written: a streamed chunk's choice, the log-probabilities in OpenAI's two shapes, and a chat
answer that may be tool calls (engine/serve/tools.py)."""


def choice_chunk(kind: str, piece, first: bool, finish: str | None, index: int = 0) -> dict:
    if kind == "chat.completion":
        delta = {"role": "assistant", "content": piece.text} if first else {"content": piece.text}
        logprobs = {"content": chat_logprobs(piece.tokens)} if piece.tokens else None
        return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    logprobs = completion_logprobs(piece.tokens) if piece.tokens else None
    return {"index": index, "text": piece.text, "logprobs": logprobs, "finish_reason": finish}


def whole_choice(run, kind: str) -> dict:
    """One choice of an answer that is not streamed."""
    text, tokens = run.content(), run.tokens
    if kind == "chat.completion":
        message, finish = whole_message(run, text)
        return {"index": run.index, "message": message, "finish_reason": finish,
                "logprobs": None if run.top_logprobs is None else {"content": chat_logprobs(tokens)}}  # fmt: skip
    return {"index": run.index, "text": run.echo_text + text, "finish_reason": run.finish_reason,
            "logprobs": None if run.top_logprobs is None else completion_logprobs(run.echo_tokens + tokens)}  # fmt: skip


def chat_logprobs(tokens: list[dict]) -> list[dict]:
    def entry(t):
        return {"token": t["token"], "logprob": t["logprob"], "bytes": t["bytes"]}

    return [dict(entry(t), top_logprobs=[entry(o) for o in t["top_logprobs"]]) for t in tokens]


def completion_logprobs(tokens: list[dict]) -> dict:
    return {"tokens": [t["token"] for t in tokens], "token_logprobs": [t["logprob"] for t in tokens],
            "top_logprobs": [None if t["top_logprobs"] is None else {o["token"]: o["logprob"] for o in t["top_logprobs"]}
                             for t in tokens],  # fmt: skip (None: an echoed prompt's first token)
            "text_offset": [t["offset"] for t in tokens]}  # fmt: skip


def whole_message(run, text: str) -> tuple[dict, str]:
    """A chat answer's message and finish reason: the text, or the tool calls the JSON form holds."""
    if run.tools is None:
        return {"role": "assistant", "content": text}, run.finish_reason
    content, calls = run.tools.answer(text)
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return message, "tool_calls" if calls and run.finish_reason == "stop" else run.finish_reason


def tool_chunk(run) -> dict:
    """A streamed request with tools: the whole answer in one delta once the run ends (the JSON form is read
    whole), each call with its index as OpenAI's deltas carry it."""
    message, finish = whole_message(run, run.content())
    delta = {"role": "assistant", "content": message["content"]}
    if "tool_calls" in message:
        delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(message["tool_calls"])]
    return {"index": run.index, "delta": delta, "logprobs": None, "finish_reason": finish}
