"""Sessions are documents (issue 41): a clean quit keeps the session and the next start opens it as it was (hot
exit); File > New, Open, Save, Save as and Recent sessions; the rules and the prompt box are part of what is kept
(autosaved within a second of an edit); the title names the session and marks unsaved changes; discarding unsaved
work asks first; opening a session never runs a command. Real windows on the story model, offscreen, in a data
folder and preferences file of each test's own."""

import json

import pytest
from PySide6.QtWidgets import QMessageBox
from test_window import WAIT, generate, step, type_prompt

import engine
from playground.documents.recovery import LONGEST_WAIT_MS

PROMPT = "mia has a red ball."


def shown_title(win) -> str:
    """The title as the window shows it: Qt writes [*] as * while there are unsaved changes."""
    return win.windowTitle().replace("[*]", "*" if win.isWindowModified() else "")


def answer(monkeypatch, button) -> list[str]:
    """Answer the window's questions with this button; their texts are kept."""
    asked = []
    monkeypatch.setattr(QMessageBox, "question", lambda parent, title, text, *rest: asked.append(text) or button)
    return asked


def reopened(qtbot, story_model, prefs):
    """A new window on the same data folder and preferences (the next start), once the last session is back."""
    from conftest import shown_window

    win = shown_window(qtbot, story_model, prefs)
    qtbot.waitUntil(lambda: not win.controller.documents.busy, timeout=WAIT)
    win.controller.flush()
    return win


def a_session(qtbot, win) -> None:
    """A rule, a prompt, a run, a branch from the 4th token: something a person built."""
    win.rules_panel.add_rule(" park", "insert", " with a kite")
    type_prompt(qtbot, win, PROMPT)
    win.controls.temperature.setValue(1.0)
    win.controls.seed.setValue(3)
    win.controls.max_tokens.setValue(30)
    generate(qtbot, win)
    assert "with a kite" in win.token_view.whole_text()  # the rule acted
    win.token_view.click_step(3)
    other = win.token_view.step(3).candidates.token_ids[1]
    with qtbot.waitSignal(win.controller.idle, timeout=WAIT):
        win.controller.bar_clicked(other)  # another token there: a second branch
    generate(qtbot, win)


def rules_shown(win) -> list[dict]:
    return engine.rules_to_json(win.rules_panel.all_rules())


def test_a_clean_quit_keeps_the_session_and_the_next_start_opens_it_as_it_was(qtbot, story_model, prefs, data_dir):
    from conftest import shown_window

    first = shown_window(qtbot, story_model, prefs)
    a_session(qtbot, first)
    text, nodes, rules = first.token_view.whole_text(), len(first.tree_panel.nodes), rules_shown(first)
    assert nodes > first.token_view.step_count() + 1  # two branches
    first.close()  # Ctrl+Q: no question (the conftest fails a test that leaves one unanswered)

    second = reopened(qtbot, story_model, prefs)
    assert second.token_view.whole_text() == text
    qtbot.waitUntil(lambda: len(second.tree_panel.nodes) == nodes, timeout=WAIT)  # every branch of the tree
    assert rules_shown(second) == rules and rules[0] == {"when": " park", "insert": " with a kite"}
    assert not second.recovery_banner.isVisible()  # a clean quit: nothing to offer, the session is simply there
    assert second.message_label.text().startswith("Reopened your last session (Untitled): identical: ")
    assert shown_title(second) == "Untitled* — story model — Token Playground"  # never saved: still unsaved
    step(qtbot, second)  # it carries on from where it was
    assert second.token_view.whole_text().startswith(text)
    second.close()
    third = reopened(qtbot, story_model, prefs)  # and again: the old one is never replaced by an empty session
    assert third.token_view.whole_text().startswith(text) and rules_shown(third) == rules
    third.close()


def test_a_prompt_typed_and_not_run_is_autosaved_within_a_second(qtbot, window, data_dir):
    assert LONGEST_WAIT_MS <= 1000
    writer = window.controller.recovery.writer
    before = writer.submitted
    type_prompt(qtbot, window, "ben has a blue cup.")
    window.rules_panel.add_rule(" cup", "choose", " and| or")

    def saved():
        writer.wait()
        try:
            document = engine.load_session_file(data_dir / "sessions" / "autosave.json")
        except ValueError:  # not written yet
            return False
        return document["window"]["prompt"] == "ben has a blue cup." and document["rules"] != []

    qtbot.waitUntil(saved, timeout=WAIT)
    assert writer.submitted > before and not window.controller.known.exists  # saved with no run at all


def test_save_as_writes_a_session_file_and_open_puts_it_back_in_another_window(qtbot, window, story_model, prefs,
                                                                                tmp_path):  # fmt: skip
    from conftest import shown_window

    a_session(qtbot, window)
    window.rules_panel.add_rule(" the", "command", "python -c 'print(1)'")
    assert shown_title(window) == "Untitled* — story model — Token Playground"
    path = tmp_path / "my session.json"
    assert window.controller.documents.save_to(path)
    assert shown_title(window) == "my session.json — story model — Token Playground"  # saved: unmarked
    document = engine.load_session_file(path)
    assert document["trace"]["text"] == window.token_view.whole_text()
    assert len(document["trace"]["tree"]["nodes"]) == len(window.tree_panel.nodes)
    assert document["rules"][1]["command"] == ["python", "-c", "print(1)"]  # the rules are in the file
    assert document["model"]["name"] == "story model" and document["model"]["load"] == {"source": None}
    assert document["window"]["prompt"] == PROMPT and document["window"]["settings"]["seed"] == 3

    other = shown_window(qtbot, story_model, prefs)
    other.rules_panel.allow_commands.setChecked(True)
    with qtbot.waitSignal(other.controller.documents.opened, timeout=WAIT) as opened:
        assert other.controller.documents.open_file(path)
    assert opened.args == [True, "opened"]
    other.controller.flush()
    assert other.token_view.whole_text() == window.token_view.whole_text()
    assert rules_shown(other) == document["rules"]
    assert not other.rules_panel.allow_commands.isChecked()  # opening a session never runs a command
    assert other.controls.settings() == window.controls.settings()
    assert shown_title(other) == "my session.json — story model — Token Playground"
    assert other.message_label.text().startswith("Opened my session.json: identical: ")
    assert [p.name for p in other.controller.documents.recent.paths()] == ["my session.json"]
    other.close()


def test_new_session_asks_before_discarding_unsaved_work(qtbot, window, monkeypatch):
    a_session(qtbot, window)
    text = window.token_view.whole_text()
    asked = answer(monkeypatch, QMessageBox.StandardButton.Cancel)
    assert not window.controller.documents.new()
    assert asked == ["Untitled has changes that are not saved. Save them first?"]
    assert window.token_view.whole_text() == text and rules_shown(window)  # Cancel: nothing is lost
    answer(monkeypatch, QMessageBox.StandardButton.Discard)
    assert window.controller.documents.new()
    assert window.token_view.whole_text() == "" and rules_shown(window) == [] and len(window.tree_panel.nodes) <= 1
    assert shown_title(window) == "Untitled — story model — Token Playground"
    asked = answer(monkeypatch, QMessageBox.StandardButton.Cancel)
    assert window.controller.documents.new() and asked == []  # nothing unsaved: no question


def test_open_over_unsaved_work_can_save_it_first(qtbot, window, tmp_path, monkeypatch):
    type_prompt(qtbot, window, "ben has a blue cup.")
    generate(qtbot, window)
    saved_here = tmp_path / "first.json"
    assert window.controller.documents.save_to(saved_here)
    type_prompt(qtbot, window, PROMPT)
    generate(qtbot, window)  # unsaved changes to first.json
    other = tmp_path / "other.json"
    engine.save_session_file(engine.load_session_file(saved_here), other)
    answer(monkeypatch, QMessageBox.StandardButton.Save)
    with qtbot.waitSignal(window.controller.documents.opened, timeout=WAIT):
        assert window.controller.documents.open_file(other)
    assert engine.load_session_file(saved_here)["trace"]["prompt"] == PROMPT  # saved before it was replaced
    assert window.controls.prompt.toPlainText() == "ben has a blue cup."


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.update(schema="token-playground/trace/5"), "'schema' is 'token-playground/session/1'"),
        (lambda d: d["rules"].append({"when": "", "insert": "x"}), "session field 'rules': rule 1: 'when'"),
        (lambda d: d["window"].update(settings={"temperature": -1}), "session field 'window.settings'"),
        (lambda d: d["trace"].update(text="not the text"), "session field 'trace': trace field 'text'"),
        (lambda d: d["model"]["load"].update(source=3), "session field 'model.load.source'"),
    ],
)
def test_a_bad_session_file_is_refused_and_changes_nothing(qtbot, window, tmp_path, monkeypatch, change, message):
    type_prompt(qtbot, window, PROMPT)
    generate(qtbot, window)
    path = tmp_path / "session.json"
    assert window.controller.documents.save_to(path)
    document = json.loads(path.read_text())
    change(document)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    warned = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text: warned.append(text))
    text = window.token_view.whole_text()
    assert not window.controller.documents.open_file(bad)
    assert len(warned) == 1 and message in warned[0], warned
    assert window.token_view.whole_text() == text and window.controller.documents.path == path


def test_a_session_file_replays_on_the_command_line(qtbot, window, tmp_path, capsys):
    from engine.__main__ import main

    a_session(qtbot, window)
    path = tmp_path / "session.json"
    assert window.controller.documents.save_to(path)
    assert main(["replay", str(path)]) == 0
    assert capsys.readouterr().out.startswith("identical: ")


def test_a_prompt_box_too_long_to_lay_out_opens_cut_and_said(qtbot, window, tmp_path):
    """A long line takes the window minutes to lay out (remembered.py): a session file whose prompt box holds
    more than MAX_REMEMBERED_PROMPT characters opens with it cut, and the status bar says so."""
    from playground.remembered import MAX_REMEMBERED_PROMPT

    path = tmp_path / "long.json"
    assert window.controller.documents.save_to(path)
    document = engine.load_session_file(path)
    document["window"]["prompt"] = "a" * (MAX_REMEMBERED_PROMPT * 50)  # 1 MB
    engine.save_session_file(document, path)
    with qtbot.waitSignal(window.controller.documents.opened, timeout=WAIT):
        assert window.controller.documents.open_file(path)
    assert window.controls.prompt.toPlainText() == "a" * MAX_REMEMBERED_PROMPT
    assert window.message_label.text() == (f"Opened long.json. The prompt box held {MAX_REMEMBERED_PROMPT * 50:,} characters: it shows "
                                           f"the first {MAX_REMEMBERED_PROMPT:,}")  # fmt: skip


def test_recent_sessions_lists_the_last_files_and_opens_one(qtbot, window, tmp_path, monkeypatch):
    paths = [tmp_path / f"s{n}.json" for n in range(12)]
    for path in paths:
        assert window.controller.documents.save_to(path)
    paths[3].unlink()  # a file gone since is left out
    menu = window.session_menu.recent
    window.session_menu.fill_recent()
    shown = [action.toolTip() for action in menu.actions()]
    assert shown == [str(p.resolve()) for p in reversed(paths[2:]) if p != paths[3]]  # the last 10, the latest first
    type_prompt(qtbot, window, "ben has a blue cup.")  # an unsaved change to s11.json: Open asks
    asked = answer(monkeypatch, QMessageBox.StandardButton.Discard)
    with qtbot.waitSignal(window.controller.documents.opened, timeout=WAIT):
        menu.actions()[1].trigger()
    assert asked == ["s11.json has changes that are not saved. Save them first?"]
    assert window.controller.documents.path == paths[10].resolve()
    assert shown_title(window) == "s10.json — story model — Token Playground"


def test_the_next_start_reopens_the_session_with_its_own_model(qtbot, story_model, prefs, tmp_path, cache_dir):
    """Quit on a GGUF file, start on the story model: the session comes back on the file it was made on."""
    import tiny_gguf
    from conftest import shown_window

    path = tiny_gguf.write(tmp_path / "tiny.gguf", tiny_gguf.random_weights(seed=3))
    first = shown_window(qtbot, engine.load_model(str(path), backend="numpy"), prefs)
    first.controls.max_tokens.setValue(6)
    generate(qtbot, first)
    text = first.token_view.whole_text()
    first.close()
    second = reopened(qtbot, story_model, prefs)
    assert second.model.source == str(path) and " — tiny — " in second.windowTitle()
    assert second.token_view.whole_text() == text
    assert second.message_label.text().startswith("Reopened your last session (Untitled): identical: all 6 steps")
