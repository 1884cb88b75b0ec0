"""GBNF grammars as a stage on the llama.cpp backend (llama.cpp's own grammar sampler), on SmolLM2: the text
follows the grammar, the step records what the model wanted against what the grammar allowed, a grammar that
does not parse is llama.cpp's message (nothing on the terminal), a forced token the grammar refuses neither
crashes llama.cpp nor lets the grammar go on, rewind and replay repeat it, other backends refuse grammars."""

import json

import pytest

import engine

pytest.importorskip("llama_cpp")

YES_NO = 'root ::= ("yes" | "no") "."'
JSON = r"""root   ::= "{" ws pair ("," ws pair)* "}"
pair   ::= string ":" ws value ws
value  ::= string | [0-9]+
string ::= "\"" [a-zA-Z ]* "\""
ws     ::= [ ]?"""


@pytest.fixture(scope="module")
def model(smollm2_llamacpp):
    return smollm2_llamacpp


def test_the_text_follows_the_grammar_and_steps_show_what_it_removed(model):
    prompt = model.chat_prompt("Is the sky blue? Answer yes or no.")
    plain = engine.Session(model, prompt, max_new_tokens=4)
    plain.run()
    assert not plain.generated_text.startswith(("yes", "no"))  # the model alone says "Yes" / "The sky..."
    session = engine.Session(model, prompt, max_new_tokens=6, grammar=YES_NO)
    session.run()
    assert session.generated_text in ("yes.<|im_end|>", "no.<|im_end|>") and session.stopped == "end of text"
    first = session.steps[0]
    assert first.candidates.stage_names[0] == "grammar"
    assert first.candidates.removed_by[0] == "grammar" and first.candidates.token_ids[0] == plain.steps[0].token_id
    assert dict(first.stage_ranks)["grammar"] == 1 and first.model_rank > 1


def test_a_json_grammar_gives_json(model):
    session = engine.Session(model, model.chat_prompt("Describe a cat as JSON with a name and an age."),
                             max_new_tokens=40, temperature=0.7, seed=3, grammar=JSON)  # fmt: skip
    session.run()
    text = session.generated_text.removesuffix("<|im_end|>")
    assert isinstance(json.loads(text), dict), text
    assert engine.replay(session.trace(), model).identical


def test_a_grammar_that_does_not_parse_is_llama_cpps_message(model, capfd):
    capfd.readouterr()
    for bad, message in (("root ::= (", r"expecting '\)'"), ("rot ::= [a-z]", "root")):
        with pytest.raises(ValueError, match=f"the grammar does not parse: .*{message}"):
            engine.Session(model, "Hi", grammar=bad)
    session = engine.Session(model, "Hi", max_new_tokens=3)
    with pytest.raises(ValueError, match="the grammar does not parse"):
        session.update_settings(grammar="root ::= (")
    assert session.settings.grammar is None and session.actions == []
    assert capfd.readouterr() == ("", "")  # llama.cpp's own stderr lines went into the message, not the terminal
    for bad in ("", "   ", 7):
        with pytest.raises(ValueError, match="grammar must be GBNF text"):
            engine.Settings(grammar=bad)


def test_a_forced_token_the_grammar_refuses_ends_its_say(model):
    prompt = model.chat_prompt("Is the sky blue? Answer yes or no.")
    session = engine.Session(model, prompt, max_new_tokens=6, grammar=YES_NO)
    session.force_token(model.tokenizer.encode("Maybe")[-1])  # llama.cpp would abort on accepting it
    session.step()
    step = session.step()
    assert "grammar" not in step.candidates.stage_names  # it has no say after a token it refused
    session.rewind(2)  # back before the forced token: the grammar is back
    assert session.peek().stage_names[0] == "grammar"
    again = session.step()
    assert again.token in ("yes", "no") or again.token.startswith(("yes", "no"))


def test_other_backends_refuse_grammars(story_model):
    with pytest.raises(ValueError, match="grammars need the llama.cpp backend"):
        engine.Session(story_model, "mia has", grammar=YES_NO)
    numpy_model = engine.load_model("smollm2", backend="numpy")
    assert not numpy_model.capabilities.grammar
    with pytest.raises(ValueError, match="grammars need the llama.cpp backend"):
        engine.Session(numpy_model, "Hi", grammar=YES_NO)


def test_tokens_the_grammar_allows_join_the_candidates_from_outside_the_raw_top_20(model):
    """ "{" is nowhere near the model's top 20 after "Describe a cat.": the record shows the model's best, all
    removed by the grammar, and the tokens the grammar allowed in the last places ("{" and '{"': greedy takes
    the first and removes the other)."""
    grammar = r"""root ::= "{" ws "\"name\"" ":" ws "\"" [a-zA-Z ]* "\"" "}"
ws ::= [ ]?"""
    plain = engine.Session(model, model.chat_prompt("Describe a cat."), max_new_tokens=1).step()
    step = engine.Session(model, model.chat_prompt("Describe a cat."), max_new_tokens=3, grammar=grammar).step()
    cands = step.candidates
    assert step.token == "{" and step.token_id not in plain.candidates.token_ids
    assert cands.token_ids[:18] == plain.candidates.token_ids[:18] and cands.token_ids[-2] == step.token_id
    assert cands.removed_by[:18] == ("grammar",) * 18 and cands.removed_by[-2:] == (None, "greedy")
    assert cands.tokens[-1] == '{"' and 0 < cands.stage("grammar")[-1] < cands.stage("grammar")[-2]
    assert cands.final[-2] == 1.0 and cands.raw[-2] < cands.raw[17]
