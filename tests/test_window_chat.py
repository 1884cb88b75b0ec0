"""Chat mode in the window (issue 44, the window's first part): the prompt box's message joins a conversation
kept in the Chat tab, rendered through SmolLM2's own template; Keep the reply, the next message, Edit turn and the
system prompt, on the real window (offscreen) with SmolLM2 in the numpy engine."""

import sys

import pytest
from conftest import shown_window
from test_window import generate, step, type_prompt

import engine
from engine.core.chat import Conversation, chat_prompt


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2 in the numpy engine, loaded once for the module (540 MB of float32 weights: one a test, held by the
    windows until they are collected, took a test worker past 5 GB)."""
    return engine.load_model("smollm2", backend="numpy")


@pytest.fixture
def chat_window(qtbot, prefs, smollm2):
    win = shown_window(qtbot, smollm2, prefs)
    win.controls.chat_format.setChecked(True)
    win.controls.max_tokens.setValue(6)
    win.show_panel(win.chat_panel)
    yield win
    win.close()


def test_a_conversation_in_turns_with_the_templates_own_words(qtbot, chat_window):
    """The whole chat is one session: each next message is inserted in the template's own words after the text, so
    the Tree holds every turn; an edited turn branches where it began (the reply to the old one stays in the tree);
    another system prompt starts a session of its own."""
    win, panel = chat_window, chat_window.chat_panel
    model = win.model
    assert panel.system.placeholderText().startswith("You are a helpful AI assistant named SmolLM")
    assert not panel.keep_button.isEnabled() and panel.turns.count() == 0
    type_prompt(qtbot, win, "Name a colour.")
    generate(qtbot, win)
    first = Conversation().with_turn("user", "Name a colour.")
    session = win.session()
    assert session.prompt == chat_prompt(model, first)  # the template's default system text, the message
    reply = session.text[len(chat_prompt(model, first)) :].removesuffix("<|im_end|>")
    assert reply and panel.keep_button.isEnabled()
    panel.keep_button.click()
    assert [panel.turns.item(i).text().split(":")[0] for i in range(panel.turns.count())] == ["user", "assistant"]
    assert win.controls.prompt.toPlainText() == "" and not panel.keep_button.isEnabled()
    type_prompt(qtbot, win, "Another one?")
    generate(qtbot, win)
    talk = first.with_turn("assistant", reply).with_turn("user", "Another one?")
    assert win.session() is session and session.text.startswith(chat_prompt(model, talk))
    assert panel.keep_button.isEnabled()  # the reply to the second message
    second_path = list(session.path)
    panel.keep_button.click()
    # edit the second message: a branch where it began, the first reply and the old branch kept
    panel.turns.setCurrentRow(2)
    panel.edit_button.click()
    assert panel.turns.count() == 2 and win.controls.prompt.toPlainText() == "Another one?"
    type_prompt(qtbot, win, "And a fruit?")
    generate(qtbot, win)
    edited = first.with_turn("assistant", reply).with_turn("user", "And a fruit?")
    assert win.session() is session and session.text.startswith(chat_prompt(model, edited))
    assert session.path[: len(second_path)] != second_path and not set(second_path) & session.tree.deleted
    shared = next(i for i, (a, b) in enumerate(zip(second_path, session.path)) if a != b)
    kept = "".join(session.tree.nodes[n].step.token for n in second_path[:shared])
    assert kept.endswith("user\n") and (session.prompt + kept).startswith(chat_prompt(model, first) + reply)
    # a system prompt of one's own: a session of its own
    panel.default_system.setChecked(False)
    panel.system.setPlainText("Answer in one word.")
    generate(qtbot, win)
    assert win.session() is not session
    assert win.session().text.startswith(chat_prompt(model, Conversation(edited.turns, system="Answer in one word.")))
    # Edit turn: the first message back in the box, the turns after it gone
    panel.turns.setCurrentRow(0)
    panel.edit_button.click()
    assert panel.turns.count() == 0 and win.controls.prompt.toPlainText() == "Name a colour."


def test_a_chat_trace_carries_its_conversation_and_replays_bit_for_bit(qtbot, chat_window):
    win, panel = chat_window, chat_window.chat_panel
    type_prompt(qtbot, win, "Name a colour.")
    generate(qtbot, win)
    panel.keep_button.click()
    type_prompt(qtbot, win, "Another one?")
    generate(qtbot, win)
    trace = win.controller.traces.trace()
    assert trace["conversation"] == win.controller.chatting.now().to_dict()
    assert [turn["role"] for turn in trace["conversation"]["turns"]] == ["user", "assistant"]
    kinds = [action["kind"] for action in trace["actions"]]
    assert kinds.count("insert") == 1  # the second message, in the template's words (the first is the prompt)
    session, report = engine.replay_session(trace, win.model)
    assert report.identical and session.conversation == trace["conversation"]
    assert engine.Conversation.from_dict(trace["conversation"]).turns[0].content == "Name a colour."


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
    assert session.text.startswith(win.controller.chatting.prompt_for(win.model, "Name a colour."))


def insert(qtbot, win, text):
    win.insert_edit.setText(text)
    with qtbot.waitSignal(win.controller.idle, timeout=60000):
        win.insert_button.click()
    win.controller.flush()


def test_the_replys_thinking_is_shown_apart_and_the_budget_closes_it(qtbot, chat_window):
    """SmolLM2 names no reasoning markers, so the usual <think> tags are used; the thinking is opened by an insert
    (a small model does not think on its own), and a budget of 3 tokens inserts the closing marker (a rule's
    steps) after exactly 3 tokens of thinking; the Chat tab shows the thinking folded, coloured and counted, and the
    chat trace replays bit for bit."""
    win, panel = chat_window, chat_window.chat_panel
    assert panel.markers.text() == "between <think> and </think> (the usual tags: this model's template names none)"
    panel.budget.setValue(3)
    win.controls.max_tokens.setValue(10)
    type_prompt(qtbot, win, "Name a colour.")
    step(qtbot, win)
    assert panel.thinking_toggle.isHidden()
    insert(qtbot, win, "<think>")  # token healing (on in the window) leaves ">" for the next step to spell
    step(qtbot, win)
    assert not panel.thinking_toggle.isHidden() and "still thinking" in panel.thinking_toggle.text()
    generate(qtbot, win)
    session = win.session()
    reply = win.controller.chatting.reply_steps()
    where = engine.split_thinking([s.token for s in reply], "<think>", "</think>")
    assert where is not None and where[2] == 3  # three tokens of thinking, then the closing marker
    closing = reply[where[1] - 1]
    assert closing.source == "rule" and "".join(s.token for s in reply[: where[1]]).endswith("</think>")
    assert session.thinking == ("<think>", "</think>", 3)
    assert panel.thinking_toggle.text() == "Thinking: 3 tokens" and panel.thinking.isHidden()
    panel.thinking_toggle.click()  # unfold
    assert panel.thinking.isVisible() and "italic" in panel.thinking.styleSheet()
    thought = "".join(s.token for s in reply).split("<think>")[1].split("</think>")[0]
    assert panel.thinking.toPlainText() == thought and "<think>" not in panel.answer.text()
    trace = win.controller.traces.trace()
    assert trace["conversation"]["thinking_budget"] == 3
    _replayed, report = engine.replay_session(trace, win.model)
    assert report.identical


def test_a_tools_output_becomes_a_tool_turn_and_the_chat_goes_on(qtbot, chat_window):
    """A command rule writes its output into the reply; Tool output as a tool turn makes the reply up to it the
    assistant's turn and the output a tool turn, and the model answers after it in the same session (the Tree keeps
    the reply with the output inline as a branch)."""
    win, panel = chat_window, chat_window.chat_panel
    win.rules_panel.allow_commands.setChecked(True)
    win.rules_panel.add_rule("Result:", "command", f"{sys.executable} -c 'print(5)'")
    type_prompt(qtbot, win, "What is 2+3?")
    step(qtbot, win)
    insert(qtbot, win, " Result:")
    generate(qtbot, win)
    session = win.session()
    inline = list(session.path)
    assert any(s.source == "tool" for s in win.controller.chatting.reply_steps())
    assert panel.tool_button.isVisible()
    said = "".join(s.token for s in win.controller.chatting.reply_steps()).split("Result:")[0] + "Result:"
    with qtbot.waitSignal(win.controller.runFinished, timeout=60000):
        panel.tool_button.click()
    win.controller.flush()
    turns = win.controller.chatting.conversation.turns
    assert [t.role for t in turns] == ["user", "assistant", "tool"] and turns[1].content == said
    assert turns[2].content.strip() == "5" and win.controls.prompt.toPlainText() == ""
    assert win.session() is session
    assert session.text.startswith(chat_prompt(win.model, Conversation(turns)))  # the model answers the tool
    assert session.path != inline and not set(inline) & session.tree.deleted  # the inline output: a branch


def test_the_prompt_is_shown_as_the_model_reads_it_token_by_token(qtbot, chat_window):
    win, panel = chat_window, chat_window.chat_panel
    type_prompt(qtbot, win, "Name a colour.")
    assert panel.rendered.isHidden()
    panel.rendered_toggle.click()
    assert not panel.rendered.isHidden()
    prompt = chat_prompt(win.model, Conversation().with_turn("user", "Name a colour."))
    ids = win.model.tokenizer.encode(prompt)
    specials = sum(i in win.model.tokenizer.special_ids for i in ids)
    shown = panel.rendered.toPlainText()
    assert shown.startswith(f"{len(ids)} tokens, {specials} of them special") and specials == 5
    assert "<|im_start|>assistant" in shown and "Name a colour." in shown
    assert panel.rendered.toHtml().count("font-weight:700") + panel.rendered.toHtml().count("font-weight:bold") >= 1
    type_prompt(qtbot, win, "Hi")  # follows the box
    assert "Hi<|im_end|>" in panel.rendered.toPlainText().replace("\u21b5", "")
    win.controls.chat_format.setChecked(False)
    assert "sent as it is" in panel.rendered.toPlainText()


def test_a_reply_edited_in_place_or_a_turn_deleted_branches_the_chat_there(qtbot, chat_window, monkeypatch):
    from PySide6.QtWidgets import QInputDialog

    win, panel = chat_window, chat_window.chat_panel
    type_prompt(qtbot, win, "Name a colour.")
    generate(qtbot, win)
    panel.keep_button.click()
    session, kept = win.session(), list(win.session().path)
    monkeypatch.setattr(QInputDialog, "getMultiLineText", lambda *args: ("Blue.", True))
    panel.turns.setCurrentRow(1)  # the model's reply, changed in place
    panel.edit_button.click()
    turns = win.controller.chatting.conversation.turns
    assert [(t.role, t.content) for t in turns] == [("user", "Name a colour."), ("assistant", "Blue.")]
    type_prompt(qtbot, win, "Another one?")
    generate(qtbot, win)
    edited = Conversation(turns).with_turn("user", "Another one?")
    assert win.session() is session and session.text.startswith(chat_prompt(win.model, edited))
    assert session.path[: len(kept)] != kept and not set(kept) & session.tree.deleted  # the model's reply: a branch
    panel.keep_button.click()
    panel.turns.setCurrentRow(2)
    panel.delete_button.click()  # the second message goes, the reply after it stays
    roles = [t.role for t in win.controller.chatting.conversation.turns]
    assert roles == ["user", "assistant", "assistant"] and panel.turns.count() == 3
    type_prompt(qtbot, win, "And a fruit?")
    generate(qtbot, win)
    assert win.session() is session
    assert session.text.startswith(
        chat_prompt(win.model, win.controller.chatting.now().with_turn("user", "And a fruit?"))
    )
