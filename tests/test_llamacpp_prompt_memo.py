"""llama.cpp's last prompt kept for the next context given the same one (engine/backends/llamacpp/prompt_memo.py):
a session that takes it writes what a session that read the prompt itself writes, bit for bit, and its trace
replays identically; a different prompt, or a steered context, reads its prompt itself."""

import pytest

import engine

pytest.importorskip("llama_cpp")

from engine.backends.llamacpp.prompt_memo import PromptMemo  # noqa: E402

PROMPT = "The old lighthouse keeper opened the door and"


def steps_of(session) -> list[dict]:
    return [step.to_dict() for step in session.steps]


def test_a_session_given_the_last_prompt_takes_its_memory_and_writes_the_same_bit_for_bit(smollm2_llamacpp):
    model = smollm2_llamacpp
    model.prompt_memo = PromptMemo()  # nothing kept: the first session reads its prompt itself
    read = engine.Session(model, PROMPT, max_new_tokens=24, temperature=0.9, seed=7)
    read.run()
    assert model.prompt_memo.taken == 0
    taken = engine.Session(model, PROMPT, max_new_tokens=24, temperature=0.9, seed=7)
    taken.run()
    assert model.prompt_memo.taken == 1
    assert steps_of(taken) == steps_of(read)
    taken.rewind(10)  # the kept memory is the taker's own: rewinding it leaves the memo whole
    taken.run()
    again = engine.Session(model, PROMPT, max_new_tokens=24, temperature=0.9, seed=7)
    again.run()
    assert model.prompt_memo.taken == 2
    assert steps_of(taken) == steps_of(read) == steps_of(again)
    assert engine.replay(taken.trace(), model).identical


def test_another_prompt_or_a_steered_context_reads_its_prompt_itself(smollm2_llamacpp):
    model = smollm2_llamacpp
    model.prompt_memo = PromptMemo()
    engine.Session(model, PROMPT, max_new_tokens=2, temperature=0).run()
    longer = engine.Session(model, PROMPT + " saw", max_new_tokens=2, temperature=0)  # the same beginning
    longer.run()
    assert model.prompt_memo.taken == 0
    steered = engine.Session(model, PROMPT + " saw", max_new_tokens=2, temperature=0)
    steered.steer_heads([(1, 0, 0.5)])
    steered.run()
    assert model.prompt_memo.taken == 0
    plain = engine.Session(model, PROMPT + " saw", max_new_tokens=2, temperature=0)
    plain.run()  # the steered read was not kept: this one takes the unsteered prompt's memory
    assert model.prompt_memo.taken == 1 and steps_of(plain) == steps_of(longer) != steps_of(steered)
