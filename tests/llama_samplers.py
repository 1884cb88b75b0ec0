"""llama.cpp's own samplers applied to any row of scores, for the exactness tests of the engine's chain.

llama.cpp samples from a candidates array (llama_token_data_array: id, logit, p per token). `apply` builds one
from a float32 row, lets the sampler accept a history first (penalties and DRY look at it), applies it, and
reads back what it kept: {token id: logit}. Probabilities are then the softmax of the kept logits, as
llama.cpp's final dist sampler computes them."""

import ctypes

import numpy as np

from engine.backends.llamacpp.library import llama


def candidates(scores):  # [V] float32 -> a llama_token_data_array over every token, and its backing array
    lib = llama()
    scores = np.asarray(scores, dtype=np.float32)
    data = (lib.llama_token_data * len(scores))()
    for token_id, score in enumerate(scores.tolist()):
        data[token_id].id, data[token_id].logit, data[token_id].p = token_id, score, 0.0
    array = lib.llama_token_data_array(data=data, size=len(scores), selected=-1, sorted=False)
    return array, data


def apply(sampler, scores, history=()) -> dict[int, float]:
    """Apply a llama_sampler (freed afterwards) to a row after accepting `history` -> {kept id: its logit}."""
    lib = llama()
    try:
        for token_id in history:
            lib.llama_sampler_accept(sampler, int(token_id))
        array, _data = candidates(scores)
        lib.llama_sampler_apply(sampler, ctypes.byref(array))
        kept = {}
        for i in range(array.size):
            item = array.data[i]
            if item.logit != -np.inf:  # some samplers mark a token removed by -inf instead of shrinking size
                kept[int(item.id)] = float(item.logit)
        return kept
    finally:
        lib.llama_sampler_free(sampler)


def chain(samplers, scores, history=()) -> dict[int, float]:
    """Several samplers in order (a llama_sampler_chain), as llama.cpp's common sampler builds one."""
    lib = llama()
    whole = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    for sampler in samplers:
        lib.llama_sampler_chain_add(whole, sampler)  # the chain owns and frees them
    return apply(whole, scores, history)


def probabilities(kept: dict[int, float], size: int) -> np.ndarray:  # -> [V] float64: softmax over the kept
    out = np.zeros(size)
    ids = np.fromiter(kept, dtype=np.int64, count=len(kept))
    logits = np.array([kept[i] for i in ids.tolist()], dtype=np.float64)
    e = np.exp(logits - logits.max())
    out[ids] = e / e.sum()
    return out
