"""A conversation as a chat model reads it (engine/core/chat.py, issue 44's engine part) and the thinking budget
(Session.set_thinking_budget): on SmolLM2's own template, the story model (no template) and hostile input."""

import json

import pytest

import engine
from engine.core.chat import Conversation, Turn, chat_prompt, default_system, resume_at, thinking_markers

THINKING = "<|im_start|>user\nWhy is the sky blue? Think first.<|im_end|>\n<|im_start|>assistant\n<think>"


@pytest.fixture(scope="module")
def smollm2():
    return engine.load_model("smollm2", backend="numpy")


def test_the_prompt_is_the_templates_and_its_default_system_text_is_found_by_rendering(smollm2, story_model):
    talk = Conversation().with_turn("user", "Name a colour.").with_turn("assistant", "Blue.").with_turn("user", "More?")
    assert chat_prompt(smollm2, talk) == smollm2.tokenizer.messages_prompt(talk.messages())
    default = default_system(smollm2)
    assert default == "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    assert chat_prompt(smollm2, talk).count(default) == 1  # None: the template's own default
    assert default not in chat_prompt(smollm2, Conversation(talk.turns, system=""))  # "": none
    assert "You are brief." in chat_prompt(smollm2, Conversation(talk.turns, system="You are brief."))
    with pytest.raises(ValueError, match="has no chat template: use the plain prompt"):
        chat_prompt(story_model, talk)
    assert default_system(story_model) is None and thinking_markers(story_model) is None
    assert thinking_markers(smollm2) is None  # SmolLM2 does not reason


def test_editing_a_turn_drops_what_followed_and_the_round_trip_is_exact():
    talk = Conversation(system="Be brief.", thinking_budget=32).with_turn("user", "hi").with_turn("assistant", "yo")
    edited = talk.edited(0, "hello")
    assert edited.turns == (Turn("user", "hello"),) and talk.turns[1].content == "yo"  # the old one is untouched
    assert Conversation.from_dict(json.loads(json.dumps(talk.to_dict()))) == talk


@pytest.mark.parametrize("data, message", [
    ([], "an object with a list of turns"),
    ({"turns": [{"role": "wizard", "content": "x"}]}, "role must be one of user, assistant, tool"),
    ({"turns": [{"role": "user", "content": 3}]}, "content must be text"),
    ({"turns": [{"role": "user", "content": "x", "extra": 1}]}, "role, content and an optional name"),
    ({"turns": [], "system": 5}, "system prompt is text"),
    ({"turns": [], "thinking_budget": -1}, "a thinking budget is a number of tokens"),
    ({"turns": [], "thinking_budget": True}, "a thinking budget is a number of tokens"),
])  # fmt: skip
def test_a_conversation_read_from_a_file_is_checked(data, message):
    with pytest.raises(ValueError, match=message):
        Conversation.from_dict(data)


def test_the_thinking_budget_inserts_the_closing_marker_and_replays(smollm2):
    """Once 5 tokens follow the opening marker, `</think>` is inserted as a rule's steps; the model goes on after
    it; the trace replays bit for bit; a budget set again to none stops it."""
    session = engine.Session(smollm2, THINKING, max_new_tokens=20)
    session.set_thinking_budget("<think>", "</think>", 5)
    session.run()
    sources = [step.source for step in session.steps]
    assert sources[:5] == ["model"] * 5 and sources[5:8] == ["rule"] * 3
    assert "".join(step.token for step in session.steps[5:8]) == "</think>"
    assert session.generated_text.count("</think>") == 1  # once: the thinking is closed
    assert engine.replay(session.trace(), smollm2).identical
    healing = engine.Session(smollm2, THINKING, max_new_tokens=12, heal=True)  # the marker is taken whole
    healing.set_thinking_budget("<think>", "</think>", 5)
    healing.run()
    at = [step.source for step in healing.steps].index("rule")
    assert "".join(step.token for step in healing.steps[at : at + 3]) == "</think>"
    inserts = [action for action in healing.trace()["actions"] if action["kind"] == "insert"]
    assert [action.get("heal") for action in inserts] == [False]  # replay heals no marker (it once cut its ">")
    assert engine.replay(healing.trace(), smollm2).identical
    unbounded = engine.Session(smollm2, THINKING, max_new_tokens=8)
    unbounded.set_thinking_budget("<think>", "</think>", 5)
    unbounded.set_thinking_budget(None, None, None)
    unbounded.run()
    assert all(step.source == "model" for step in unbounded.steps)
    for bad in ((None, "</think>", 4), ("<think>", "", 4), ("<think>", "</think>", -1)):
        with pytest.raises(ValueError):
            unbounded.set_thinking_budget(*bad)


def test_a_conversation_grows_in_one_session_through_the_templates_own_words(smollm2):
    """The next turn is inserted after the reply in the template's own words (resume_at), so one session holds the
    chat and its tree every reply; an edited turn rewinds to where it began; another system prompt (the session's
    prompt no longer its start) gets None: a session of its own."""
    first = Conversation(system="Be brief.").with_turn("user", "Name a colour.")
    session = engine.Session(smollm2, chat_prompt(smollm2, first), max_new_tokens=6)
    session.run()
    reply = session.generated_text.removesuffix("<|im_end|>")
    talk = first.with_turn("assistant", reply).with_turn("user", "Another one?")
    pieces = [step.token for step in session.steps]
    keep, added = resume_at(session.prompt_text, pieces, chat_prompt(smollm2, talk))
    assert keep == len(pieces) and added.endswith("<|im_start|>user\nAnother one?<|im_end|>\n<|im_start|>assistant\n")
    session.insert_text(added)
    assert session.text == chat_prompt(smollm2, talk)
    pieces = [step.token for step in session.steps]
    edited = first.with_turn("assistant", reply).with_turn("user", "And a fruit?")
    keep, added = resume_at(session.prompt_text, pieces, chat_prompt(smollm2, edited))
    assert 0 < keep < len(pieces) and "".join(pieces[:keep]).endswith("user\n") and added.startswith("And")
    assert resume_at(session.prompt_text, pieces, session.text) == (len(pieces), "")
    assert resume_at(session.prompt_text, pieces, chat_prompt(smollm2, Conversation(system="Be long."))) is None
