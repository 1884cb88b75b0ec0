"""Greedy generation with the KV cache (the sampling contract comes in sampling.py and session.py)."""

import numpy as np


def greedy_continue(model, prompt: str, max_new_tokens: int = 60) -> tuple[str, str]:
    """-> (prompt plus generated text, stop reason)."""
    ids = model.tokenizer.encode(prompt)
    cache = model.new_cache()
    scores = model.decode(ids, cache)[-1]
    generated = []
    while True:
        if len(generated) == max_new_tokens:
            return prompt + model.tokenizer.decode(generated), "max_new_tokens"
        token = int(np.argmax(scores))
        generated.append(token)
        if token == model.end_token_id:
            return prompt + model.tokenizer.decode(generated), "end of story"
        if cache.length == model.context_length:
            return prompt + model.tokenizer.decode(generated), "context full"
        scores = model.decode([token], cache)[-1]
