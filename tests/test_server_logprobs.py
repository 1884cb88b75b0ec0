"""What a server's log-probabilities are (engine/backends/remote/server.py logprobs_kind), told from one position's
top 20 at temperature 1 and 0.5: here on the story model's real next-token distribution, as a server that reports
raw log-probabilities (vLLM's default, llama-server, llama-cpp-python) and one that reports the distribution it
samples from (vLLM's processed_logprobs, SGLang) would answer. The real servers' answers: test_remote.py,
test_llama_server.py, test_vllm.py."""

import numpy as np

import engine
from engine.backends.remote.answers import TopN
from engine.backends.remote.server import logprobs_kind


def log_softmax(scores: np.ndarray) -> np.ndarray:
    shifted = scores - scores.max()
    return shifted - np.log(np.exp(shifted).sum())


def top20(logprobs: np.ndarray, names) -> TopN:
    """What a server says: its top 20 as (text, logprob, id -1), by text."""
    best = np.argsort(-logprobs)[:20]
    return TopN((names[i], float(logprobs[i]), -1) for i in best)


def real_scores(story_model) -> tuple[np.ndarray, list[str]]:
    """The story model's next-token scores after a prompt (float64 here: the server's own arithmetic)."""
    result = engine.score(story_model, "mia has a red ball. mia goes to the park.")
    names = [story_model.tokenizer.decode([i]) for i in range(story_model.vocab_size)]
    position = 6  # a step with several likely tokens
    logprobs = np.log(np.maximum(np.asarray(result.steps[position].candidates.raw, dtype=np.float64), 1e-300))
    ids = result.steps[position].candidates.token_ids
    scores = np.full(story_model.vocab_size, -50.0)
    scores[list(ids)] = logprobs
    return scores, names


def test_raw_log_probabilities_do_not_move_with_temperature(story_model):
    scores, names = real_scores(story_model)
    at_one = top20(log_softmax(scores), names)
    assert logprobs_kind(at_one, top20(log_softmax(scores), names)) == "raw"


def test_processed_log_probabilities_sharpen_at_half_the_temperature(story_model):
    scores, names = real_scores(story_model)
    assert logprobs_kind(top20(log_softmax(scores), names), top20(log_softmax(scores / 0.5), names)) == "processed"


def test_numbers_that_fit_neither_are_unknown(story_model):
    scores, names = real_scores(story_model)
    at_one = top20(log_softmax(scores), names)
    assert logprobs_kind(at_one, top20(log_softmax(scores / 0.2), names)) == "unknown"  # another temperature
    assert logprobs_kind(at_one, TopN()) == "unknown"  # nothing said
    assert logprobs_kind(TopN([("a", -0.1, -1)]), TopN([("a", -0.1, -1)])) == "unknown"  # one alternative
