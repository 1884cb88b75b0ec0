"""The sampler chain run on a raw server's top 20 (engine/backends/remote/stages.py), checked against the same
chain on the whole vocabulary: SmolLM2 on llama.cpp, its real next-token distribution. A server says only its top
20, as raw probabilities; the chain runs on them as if they were the vocabulary. Where a truncation keeps only tokens
among them, what follows is exact; a stage before it that renormalizes (temperature, first in this chain) keeps the
tokens' ratios but not their sum (the mass outside the top 20 is left out)."""

import pytest

from engine import Session
from engine.backends.remote.stages import with_stages
from engine.core.steps import Candidates

PROMPT = "The capital of France is"


def as_a_server_says(candidates: Candidates) -> Candidates:
    """What a raw server reports of a distribution: its top 20 tokens and raw probabilities, no stages."""
    return Candidates(candidates.token_ids[:20], candidates.tokens[:20], candidates.raw[:20])


@pytest.mark.parametrize("settings", [{"temperature": 0.8, "top_k": 5}, {"temperature": 1.0, "min_p": 0.05},
                                      {"temperature": 0.0, "top_k": 3}], ids=["top-k 5", "min-p 0.05", "greedy"])  # fmt: skip
def test_after_a_truncation_inside_the_top_20_the_stages_are_the_whole_chains(smollm2_llamacpp, settings):
    session = Session(smollm2_llamacpp, PROMPT, **settings)
    whole = session.peek()
    assert sum(whole.raw[:20]) < 0.99  # the top 20 leave some probability out
    served = with_stages(as_a_server_says(whole), session.settings, session.ids)
    assert served.stage_names == whole.stage_names
    truncation = "top_k" if "top_k" in settings else "min_p"
    after = served.stage_names[served.stage_names.index(truncation) :]
    for name in after:
        assert served.stage(name) == pytest.approx(whole.stage(name)[:20], abs=2e-6), name
    assert served.removed_by == whole.removed_by[:20]
    assert sum(p > 0 for p in served.stage(truncation)) < 20  # the truncation ended inside the top 20


def test_temperature_before_a_truncation_keeps_the_ratios_not_the_sum(smollm2_llamacpp):
    session = Session(smollm2_llamacpp, PROMPT, temperature=0.7)
    whole = session.peek()
    served = with_stages(as_a_server_says(whole), session.settings, session.ids)
    here, there = served.stage("temperature"), whole.stage("temperature")[:20]
    assert sum(here) == pytest.approx(1, abs=1e-5) and sum(there) < sum(here)  # the rest of the vocabulary left out
    assert [p / here[0] for p in here] == pytest.approx([p / there[0] for p in there], rel=1e-4)


def test_penalties_act_on_the_tokens_of_the_text_among_the_top_20(smollm2_llamacpp):
    """A presence penalty lowers the tokens the text already holds, by id, as the whole chain does."""
    session = Session(
        smollm2_llamacpp, "Paris, Paris, Paris, Paris and", temperature=1.0, presence_penalty=1.5, top_k=8
    )
    whole = session.peek()
    served = with_stages(as_a_server_says(whole), session.settings, session.ids)
    assert any(token_id in session.ids for token_id in whole.token_ids[:8])  # the penalty has something to do
    assert served.stage("top_k") == pytest.approx(whole.stage("top_k")[:20], abs=2e-6)
