"""Chat mode in the window (issue 44, the window's first part): the prompt box's message joins a conversation
kept in the Chat tab, rendered through SmolLM2's own template; Keep the reply, the next message, Edit turn and the
system prompt, on the real window (offscreen) with SmolLM2 in the numpy engine."""

import pytest
from conftest import shown_window
from test_window import generate, type_prompt

import engine
from engine.core.chat import Conversation, chat_prompt


@pytest.fixture
def chat_window(qtbot, prefs):
    win = shown_window(qtbot, engine.load_model("smollm2", backend="numpy"), prefs)
    win.controls.chat_format.setChecked(True)
    win.controls.max_tokens.setValue(6)
    win.show_panel(win.chat_panel)
    yield win
    win.close()


def test_a_conversation_in_turns_with_the_templates_own_words(qtbot, chat_window):
    win, panel = chat_window, chat_window.chat_panel
    model = win.model
    assert panel.system.placeholderText().startswith("You are a helpful AI assistant named SmolLM")
    assert not panel.keep_button.isEnabled() and panel.turns.count() == 0
    type_prompt(qtbot, win, "Name a colour.")
    generate(qtbot, win)
    first = Conversation().with_turn("user", "Name a colour.")
    assert win.session().prompt == chat_prompt(model, first)  # the template's default system text, the message
    reply = win.session().generated_text.removesuffix("<|im_end|>")
    assert reply and panel.keep_button.isEnabled()
    panel.keep_button.click()
    assert [panel.turns.item(i).text().split(":")[0] for i in range(panel.turns.count())] == ["user", "assistant"]
    assert win.controls.prompt.toPlainText() == "" and not panel.keep_button.isEnabled()
    type_prompt(qtbot, win, "Another one?")
    generate(qtbot, win)
    talk = first.with_turn("assistant", reply).with_turn("user", "Another one?")
    assert win.session().prompt == chat_prompt(model, talk)
    # a system prompt of one's own, then none
    panel.default_system.setChecked(False)
    panel.system.setPlainText("Answer in one word.")
    generate(qtbot, win)
    assert win.session().prompt == chat_prompt(model, Conversation(talk.turns, system="Answer in one word."))
    # Edit turn: the first message back in the box, the turns after it gone
    panel.turns.setCurrentRow(0)
    panel.edit_button.click()
    assert panel.turns.count() == 0 and win.controls.prompt.toPlainText() == "Name a colour."


def test_plain_mode_and_a_model_without_a_template_say_so(qtbot, chat_window, window):
    chat_window.controls.chat_format.setChecked(False)
    assert "Chat format is off" in chat_window.chat_panel.note.text()
    assert "has no chat template" in window.chat_panel.note.text()  # the story model


def test_a_clean_quit_keeps_the_conversation(qtbot, chat_window, prefs, data_dir):
    """Hot exit: the turns, the system prompt and the message being written come back after a restart (the
    autosave holds them: the test waits for it, as the window's close may find the worker still scoring)."""
    win, panel = chat_window, chat_window.chat_panel
    type_prompt(qtbot, win, "Name a colour.")
    generate(qtbot, win)
    panel.keep_button.click()
    panel.default_system.setChecked(False)
    panel.system.setPlainText("Answer in one word.")
    type_prompt(qtbot, win, "Another one?")
    kept = win.controller.chatting.now()
    model = win.model

    def autosaved():
        path = data_dir / "sessions" / "autosave.json"
        window = engine.load_session_file(path)["window"] if path.exists() else {}
        return window.get("prompt") == "Another one?" and window.get("conversation") == kept.to_dict()

    qtbot.waitUntil(autosaved, timeout=60000)
    win.close()
    again = shown_window(qtbot, model, prefs)
    assert again.controller.chatting.now() == kept
    assert again.chat_panel.turns.count() == 2 and not again.chat_panel.default_system.isChecked()
    assert again.controls.prompt.toPlainText() == "Another one?"
    again.close()


def test_regenerate_writes_another_reply_and_the_tree_keeps_the_first(qtbot, chat_window):
    win, panel = chat_window, chat_window.chat_panel
    win.controls.temperature.setValue(1.0)
    win.controls.seed.setValue(3)
    type_prompt(qtbot, win, "Name a colour.")
    generate(qtbot, win)
    session = win.session()
    first, first_path = session.generated_text, list(session.path)
    assert panel.regenerate_button.isEnabled()
    with qtbot.waitSignal(win.controller.idle, timeout=60000):
        panel.regenerate_button.click()
    win.controller.flush()
    assert win.controls.seed.value() == 4 and win.session() is session  # the same session, a new branch
    assert session.settings.seed == 4 and session.generated_text != first
    assert session.path != first_path and not set(first_path) & session.tree.deleted  # the first: a branch kept
    assert "".join(session.tree.nodes[n].step.token for n in first_path) == first
    assert session.prompt == win.controller.chatting.prompt_for(win.model, "Name a colour.")
