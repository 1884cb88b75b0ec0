"""Issue 24, "keep the user's work" across models: a switch keeps the typed prompt, each model keeps its own
settings, and reloading a model with new settings asks first and puts the session back on it."""

import shutil

import pytest
from conftest import answer_questions
from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QMessageBox, QPushButton
from test_window import child, generate, type_prompt
from test_window_models import WAIT, answer_settings_dialog, labels, open_window, pick, set_spin, wait_for_entry

import engine

pytest.importorskip("llama_cpp")


@pytest.fixture
def smollm2_file(tmp_path, cache_dir, prefs):
    """A copy of SmolLM2 opened once by hand (so it is a recent file the picker lists), with one thread."""
    from playground.models.prefs import ModelPrefs

    path = tmp_path / "models" / "smol.gguf"
    path.parent.mkdir()
    shutil.copyfile(engine.smollm2_path(), path)
    ModelPrefs(prefs).remember(str(path), {"backend": "llama.cpp", "threads": 1, "context_length": 512})
    ModelPrefs(prefs).opened(str(path))
    return path


def open_smollm2(qtbot, win) -> None:
    pick(qtbot, win, wait_for_entry(qtbot, win, "smol.gguf — llama.cpp"))


def test_a_model_switch_keeps_the_typed_prompt_and_only_swaps_an_untouched_example(
    qtbot, prefs, story_model, smollm2_file
):
    win = open_window(qtbot, prefs, story_model)
    win.resize(1024, 700)
    qtbot.waitUntil(lambda: win.size() == QSize(1024, 700))
    assert win.controls.prompt.toPlainText() == "mia has a red ball."  # the story model's example, untouched
    open_smollm2(qtbot, win)
    qtbot.wait(50)
    assert win.size() == QSize(1024, 700)  # another model's controls never make the window taller
    assert win.controls.prompt.toPlainText() == "What is the capital of France?"  # SmolLM2's own example
    type_prompt(qtbot, win, "Write a haiku about rain.")
    pick(qtbot, win, labels(win).index("Story model (built in)"))
    assert win.controls.prompt.toPlainText() == "Write a haiku about rain."  # typed: kept (the story model flags it)
    assert win.controls.prompt_error.isVisible()


def test_each_model_keeps_its_own_settings(qtbot, prefs, story_model, smollm2_file):
    win = open_window(qtbot, prefs, story_model)
    win.controls.temperature.setValue(0.7)
    open_smollm2(qtbot, win)
    win.controls.max_tokens.setValue(200)
    win.controls.temperature.setValue(1.3)
    pick(qtbot, win, labels(win).index("Story model (built in)"))
    assert win.controls.max_tokens.value() <= 64 and win.controls.temperature.value() == 0.7  # its own again
    open_smollm2(qtbot, win)
    assert win.controls.max_tokens.value() == 200 and win.controls.temperature.value() == 1.3


def test_reloading_with_new_settings_asks_first_and_puts_the_session_back(
    qtbot, prefs, story_model, smollm2_file, monkeypatch
):
    win = open_window(qtbot, prefs, story_model)
    open_smollm2(qtbot, win)
    win.controls.max_tokens.setValue(6)
    generate(qtbot, win)
    text, steps = win.token_view.text(), win.token_view.step_count()
    asked = []

    def answer(result):
        def question(parent, title, text, *args, **kwargs):
            asked.append(text)
            return result

        return question

    # Cancel: the model and the session stay as they are
    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.Cancel))
    answer_settings_dialog(lambda dialog: set_spin(dialog, "contextSize", 256))
    qtbot.mouseClick(child(win, QPushButton, "modelSettingsButton"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(asked) == 1, timeout=WAIT)
    assert "replayed" in asked[0] and not win.controller.models.loading and win.model.context_length == 512
    assert win.token_view.text() == text

    # OK: the model reloads with the new context, and the session is back, replayed bit for bit
    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.Ok))
    answer_settings_dialog(lambda dialog: set_spin(dialog, "contextSize", 256))
    with qtbot.waitSignal(win.controller.message, timeout=WAIT) as blocker:
        qtbot.mouseClick(child(win, QPushButton, "modelSettingsButton"), Qt.MouseButton.LeftButton)
    assert blocker.args[0].startswith("identical")
    assert win.model.context_length == 256
    assert win.token_view.text() == text and win.token_view.step_count() == steps
    assert "the session is back" in win.message_label.text()
    assert len(win.session().steps) == steps and win.session().text == text


def test_another_model_over_a_session_asks_first(qtbot, prefs, story_model, smollm2_file, monkeypatch):
    win = open_window(qtbot, prefs, story_model)
    generate(qtbot, win)
    text = win.token_view.text()
    asked = answer_questions(monkeypatch, ok=False)
    win.controller.models.open_model({"source": str(smollm2_file), "backend": "llama.cpp", "threads": 1})
    assert "closes" in asked[0] and "Save session" in asked[0]
    assert not win.controller.models.loading and win.model is story_model and win.token_view.text() == text
    answer_questions(monkeypatch)
    open_smollm2(qtbot, win)
    assert win.model.source == str(smollm2_file)


def test_the_same_file_with_another_engine_gets_the_session_back(qtbot, prefs, story_model, smollm2_file, monkeypatch):
    win = open_window(qtbot, prefs, story_model)
    open_smollm2(qtbot, win)
    win.controls.max_tokens.setValue(5)
    generate(qtbot, win)
    steps = win.token_view.step_count()
    asked = answer_questions(monkeypatch)
    with qtbot.waitSignal(win.controller.message, timeout=WAIT):
        win.controller.models.open_model({"source": str(smollm2_file), "backend": "numpy", "context_length": 512})
    assert "with numpy" in asked[0] and "put back" in asked[0]
    assert "backend" not in win.model.describe()  # the numpy engine now
    assert win.token_view.step_count() == steps == len(win.session().steps)
    assert "the session is back" in win.message_label.text()
