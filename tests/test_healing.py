"""Token healing (engine/core/healing.py) on SmolLM2: a prompt ending in a lone space continues " Paris" with
healing and "21st-century" without (the issue's own example, on llama.cpp and the numpy engine); an
inserted text is healed too; a cut that splits a character backs off to its first byte; rewind, the trace
and replay repeat it; a server (it samples itself) refuses it."""

import numpy as np
import pytest

import engine
from engine.core.healing import healer_for

PROMPT = "The capital of France is "


@pytest.fixture(scope="module", params=["llama.cpp", "numpy"])
def model(request):
    if request.param == "llama.cpp":
        return request.getfixturevalue("smollm2_llamacpp")
    return engine.load_model("smollm2", backend="numpy", context_length=512)


def test_a_trailing_space_is_healed_into_the_next_word(model):
    plain = engine.Session(model, PROMPT, max_new_tokens=6)
    plain.run()
    assert plain.generated_text.startswith("21st-century")  # the lone space token, continued as it is
    healed = engine.Session(model, PROMPT, max_new_tokens=6, heal=True)
    assert healed.prompt_text == PROMPT[:-1] and healed.healing == " "
    assert healed.prompt_ids == plain.prompt_ids[:-1]
    healed.run()
    first = healed.steps[0]
    assert first.token == " Paris" and first.healing == " " and healed.healing is None
    assert healed.text.startswith("The capital of France is Paris")
    assert healed.steps[1].healing is None
    cands = first.candidates
    assert cands.stage_names[0] == "healing"
    for token_id, removed in zip(cands.token_ids, cands.removed_by):  # what the model wanted, against " "
        assert (removed == "healing") == (not model.tokenizer.token_bytes(token_id).startswith(b" "))
    assert dict(first.stage_ranks)["healing"] == 1


def test_inserted_text_is_healed_and_replays(model):
    session = engine.Session(model, "Name a fruit:", max_new_tokens=8, heal=True)
    session.step()
    inserted = session.insert_text(" I like pizza 🍕")
    pieces = [model.tokenizer.token_bytes(s.token_id) for s in inserted]
    assert b"".join(pieces) == b" I like pizza"  # the emoji's three byte tokens are left to the model
    assert session.healing == " 🍕"
    step = session.step()
    assert step.healing == " 🍕" and " 🍕".encode().startswith(model.tokenizer.token_bytes(step.token_id))
    assert step.candidates.removed_by[0] == "healing"  # what the model wanted most does not spell the emoji
    while session.healing is not None and session.step() is not None:
        pass
    written = b"".join(model.tokenizer.token_bytes(step.token_id) for step in session.steps)
    assert "pizza 🍕".encode() in written  # (Session.text shows a split character's bytes as U+FFFD each)
    trace = session.trace()
    assert trace["settings"]["heal"] is True and trace["steps"][1]["healing"] is None
    assert engine.replay(trace, model).identical
    session.rewind(len(session.steps) - len(inserted) - 1)  # back to just after the insertion
    assert session.healing == " 🍕"


def test_the_backoff_takes_whole_characters(model):
    healer = healer_for(model.tokenizer, model.vocab_size)
    ids = model.tokenizer.encode("I like pizza 🍕")
    cut = healer.backoff(ids)
    assert b"".join(healer.pieces[i] for i in ids[-cut:]) == " 🍕".encode() and cut == 3
    assert healer.backoff(model.tokenizer.encode(PROMPT)) == 1
    allowed = healer.allowed(b" \xf0\x9f")
    assert all(healer.pieces[i].startswith(b" \xf0\x9f") or b" \xf0\x9f".startswith(healer.pieces[i]) for i in allowed)
    assert model.tokenizer.encode(" ")[-1] in allowed and len(allowed) >= 2
    assert np.all(np.diff(allowed) > 0)


def test_healing_needs_a_backend_the_engine_samples_for():
    from fake_backend import FakeStreamingBackend

    server = FakeStreamingBackend()
    with pytest.raises(ValueError, match="token healing needs a backend the engine samples for"):
        engine.Session(server, "ab", heal=True)
    session = engine.Session(server, "ab")
    with pytest.raises(ValueError, match="token healing needs"):
        session.update_settings(heal=True)
    with pytest.raises(ValueError, match="heal must be true or false"):
        engine.Settings(heal="yes")


def test_a_rules_insertion_is_healed_too(model):
    """A rule inserting text that ends mid-word: the model spells the cut end (" Par": it writes " Paris" or
    another token that starts so). The prompt is healed first (its " France" is spelled again)."""
    rule = engine.Rule(when="France", insert=" is Par")
    session = engine.Session(model, "The capital of France", max_new_tokens=6, heal=True, rules=[rule])
    session.run()
    assert session.steps[0].healing == " France" and session.steps[0].source == "model"
    inserted = [step for step in session.steps if step.source == "rule"]
    written = "".join(step.token for step in inserted)
    assert written and " is Par".startswith(written) and written != " is Par"
    healed = session.steps[1 + len(inserted)]
    assert healed.source == "model" and healed.healing == " is Par"[len(written) :]
    assert healed.token.startswith(healed.healing)
    assert engine.replay(session.trace(), model).identical
