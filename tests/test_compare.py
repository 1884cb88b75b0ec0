"""engine.compare (issue 15, two models token by token): the text's tokenizations aligned by byte offsets,
each common span's probability under both models, its log-ratio per token of the first model, and the
spans where they disagree most; a model that cannot read the text is named."""

import numpy as np
import pytest

import engine

TEXT = "mia has a red ball. mia goes to the park. at the park, mia gives the ball to ben."


@pytest.fixture(scope="module")
def smollm2():
    return engine.load_model("smollm2", backend="numpy")


def test_a_model_against_itself_agrees_everywhere(story_model):
    comparison = engine.compare(story_model, story_model, TEXT)
    ids = story_model.tokenizer.encode(TEXT)
    assert len(comparison.spans) == len(ids) - 1  # every token its own span; the first is read, not scored
    assert all(span.log_ratio == 0 for span in comparison.spans)
    assert comparison.per_token[0] is None and all(v == 0 for v in comparison.per_token[1:])


def test_different_tokenizers_are_compared_over_common_spans(story_model, smollm2):
    comparison = engine.compare(story_model, smollm2, TEXT)
    data = TEXT.encode()
    story_ids = story_model.tokenizer.encode(TEXT)
    ends, offset = [], 0
    for token_id in story_ids:
        offset += len(story_model.tokenizer.token_bytes(token_id))
        ends.append(offset)
    for span in comparison.spans:
        assert data[span.start : span.end].decode() == span.text and span.start in [0, *ends] and span.end in ends
        inside = [i for i, end in enumerate(ends) if span.start < end <= span.end]
        expected = sum(-comparison.first.steps[i - 1].surprisal for i in inside)
        assert span.first_log_p == pytest.approx(expected, abs=1e-9)
        assert all(comparison.per_token[i] == span.log_ratio for i in inside)
    assert [s.start for s in comparison.spans] == sorted(s.start for s in comparison.spans)
    worst = comparison.disagreements(3)
    assert [abs(s.log_ratio) for s in worst] == sorted((abs(s.log_ratio) for s in comparison.spans), reverse=True)[:3]
    assert worst[0].text == " mia" and worst[0].log_ratio > 5  # the story model knows its own names


def test_the_same_file_on_two_engines_agrees_token_by_token(smollm2):
    pytest.importorskip("llama_cpp")
    text = "The capital of France is Paris. It is a large city."
    other = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=256)
    try:
        comparison = engine.compare(smollm2, other, text)
    finally:
        other.close()
    assert len(comparison.spans) == len(comparison.per_token) - 1  # one tokenizer: every token its own span
    assert max(abs(span.log_ratio) for span in comparison.spans) < 0.5  # llama.cpp's quantized activations


def test_a_model_that_cannot_read_the_text_is_named(story_model, smollm2):
    with pytest.raises(ValueError, match=r"story model cannot read this text: 'M' at position 0"):
        engine.compare(smollm2, story_model, "Mia has a ball.")


def test_one_tokenizer_compares_each_token_by_rank_and_divergence(story_model):
    """The same model twice: every token has both ranks equal and a KL divergence of 0."""
    comparison = engine.compare(story_model, story_model, TEXT)
    assert comparison.note == ""
    assert comparison.ranks[0] is None and comparison.divergence[0] is None  # the first token is read
    assert all(a == b for a, b in comparison.ranks[1:])
    assert max(comparison.divergence[1:]) < 1e-6


def test_divergence_follows_its_definition_across_score_chunks(smollm2):
    """SmolLM2 in numpy against llama.cpp, over a text longer than one scoring chunk (128 positions): each
    token's divergence is KL(first || second) of the rows each backend gives for it, written out in float64,
    and the ranks are each model's own rank of the token."""
    pytest.importorskip("llama_cpp")
    text = "The history of computing is longer than the history of computing hardware. " * 12
    other = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=512)
    try:
        comparison = engine.compare(smollm2, other, text)
        ids = smollm2.tokenizer.encode(text)
        assert len(ids) > 128 and comparison.note == ""
        rows = [model.forward_cached(ids[:-1], model.new_cache()).astype(np.float64) for model in (smollm2, other)]
    finally:
        other.close()
    for position in (1, 5, 127, 128, 129, len(ids) - 1):
        p, q = (row[position - 1] - row[position - 1].max() for row in rows)
        log_p, log_q = p - np.log(np.exp(p).sum()), q - np.log(np.exp(q).sum())
        expected = float((np.exp(log_p) * (log_p - log_q)).sum())
        assert comparison.divergence[position] == pytest.approx(expected, abs=2e-4, rel=1e-2)
        assert comparison.ranks[position] == (comparison.first.steps[position - 1].model_rank,
                                              comparison.second.steps[position - 1].model_rank)  # fmt: skip
    assert 0 < max(comparison.divergence[1:]) < 0.5  # one file; llama.cpp's quantized activations differ a little
    agree = sum(a == b for a, b in comparison.ranks[1:]) / (len(ids) - 1)
    assert agree > 0.8


def test_different_tokenizers_have_no_token_comparison(story_model, smollm2):
    comparison = engine.compare(story_model, smollm2, TEXT)
    assert comparison.ranks is None and comparison.divergence is None
    assert "different tokens" in comparison.note


def test_a_server_sharing_the_tokenizer_gives_ranks_but_no_divergence():
    from fake_backend import FakeBackend, FakeStreamingBackend

    local, server = FakeBackend(), FakeStreamingBackend()
    text = "".join(local.tokenizer.decode([i]) for i in (1, 2, 3, 4))
    comparison = engine.compare(local, server, text)
    assert comparison.ranks is not None and comparison.divergence is None
    assert "top tokens only" in comparison.note
