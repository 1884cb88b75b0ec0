"""Issue 25, items 3 and 5: nothing the preferences file holds stops the window starting or kills the app. A value
the window cannot show starts from its default, and the status bar says which preference was reset and why."""

import json
import os
import subprocess
import sys

import pytest
from PySide6.QtCore import QSettings
from test_window import step

import engine
from playground import MainWindow
from playground.remembered import MAX_REMEMBERED_PROMPT

GRAMMAR = 'root ::= ("yes" | "no") "."'

# `python -m playground`'s own start (playground.app.main, its QSettings in $XDG_CONFIG_HOME), in a child process: a
# start that fails kills that process (Qt aborts on the worker thread left running: exit 134), not the test run.
# Once the window is shown, the child prints its status bar and closes it.
START_AND_CLOSE = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from playground.app import main
from playground.main_window import MainWindow

app = QApplication(sys.argv)

def report_and_close():
    (window,) = [w for w in app.topLevelWidgets() if isinstance(w, MainWindow)]
    print("STATUS:", window.message_label.text(), flush=True)
    window.close()

QTimer.singleShot(0, report_and_close)
sys.exit(main())
"""


def start_app(tmp_path, **remembered) -> subprocess.CompletedProcess:
    """Start the app as `python -m playground` would, its preferences file holding these values."""
    config = tmp_path / "config"
    prefs = QSettings(str(config / "TokenPlayground" / "Token Playground.conf"), QSettings.Format.IniFormat)
    for key, value in remembered.items():
        prefs.setValue(key.replace("__", "/"), value)
    prefs.sync()
    env = dict(os.environ, XDG_CONFIG_HOME=str(config), QT_QPA_PLATFORM="offscreen")
    return subprocess.run([sys.executable, "-c", START_AND_CLOSE], capture_output=True, text=True, env=env,
                          timeout=120)  # fmt: skip


def test_a_grammar_remembered_from_a_llamacpp_model_does_not_stop_the_app_starting_on_the_story_model(tmp_path):
    started = start_app(tmp_path, settings=json.dumps({"temperature": 0.5, "grammar": GRAMMAR}))
    assert started.returncode == 0, started.stderr[-3000:]  # was 134: KeyError 'grammar' in MainWindow.__init__
    status = started.stdout.split("STATUS:", 1)[1]
    assert "Preferences reset (the window cannot show them as remembered): " in status and "grammar 'root ::=" in status
    assert "shown as off" in status


def test_a_trace_recorded_with_a_grammar_opens_on_the_story_model_and_says_the_grammar_is_not_shown(
    qtbot, window, tmp_path
):
    for _ in range(2):
        step(qtbot, window)
    path = tmp_path / "trace.json"
    window.export_trace(path)
    trace = json.loads(path.read_text())
    for key in ("settings", "settings_at_end"):
        trace[key]["grammar"] = GRAMMAR  # as SmolLM2 on llama.cpp records it
    path.write_text(json.dumps(trace))
    window.controller.reset()
    window.open_trace(path)  # raised KeyError: 'grammar' (and Open trace catches only ValueError, OSError)
    status = window.message_label.text()
    assert "The controls cannot show all of its settings" in status
    assert f"grammar {GRAMMAR!r} ({len(GRAMMAR)} characters) shown as off" in status
    assert window.controls.settings()["grammar"] is None and window.token_view.step_count() == 2


def test_a_long_remembered_prompt_is_cut_and_the_status_bar_says_so(qtbot, story_model, prefs, data_dir):
    prefs.setValue(f"prompt/{story_model.name}", "a" * 2_000_000)  # 2 MB: the window took 295 s to start
    win = MainWindow(model=story_model, settings=prefs)
    qtbot.addWidget(win)
    assert win.controls.prompt.toPlainText() == "a" * MAX_REMEMBERED_PROMPT
    assert f"the prompt was cut to its first {MAX_REMEMBERED_PROMPT:,} characters" in win.message_label.text()
    win.controls.prompt.setPlainText("b" * (MAX_REMEMBERED_PROMPT + 500))  # typed: longer than is remembered
    win.close()  # one character past the cap is remembered, so that the next start knows it was cut
    assert len(prefs.value(f"prompt/{story_model.name}")) == MAX_REMEMBERED_PROMPT + 1
    for autosave in (data_dir / "sessions").glob("autosave*.json"):  # the preferences alone (no hot exit)
        autosave.unlink()
    again = MainWindow(model=story_model, settings=prefs)
    qtbot.addWidget(again)
    assert again.controls.prompt.toPlainText() == "b" * MAX_REMEMBERED_PROMPT
    assert "the prompt was cut" in again.message_label.text()
    again.close()


def test_a_prompt_within_the_cap_is_remembered_whole_and_not_noted(qtbot, story_model, prefs):
    prompt = "mia has a red ball. " * (MAX_REMEMBERED_PROMPT // 20)
    prefs.setValue(f"prompt/{story_model.name}", prompt)
    win = MainWindow(model=story_model, settings=prefs)
    qtbot.addWidget(win)
    assert win.controls.prompt.toPlainText() == prompt and win.message_label.text() == ""
    win.close()


def test_each_preference_the_window_cannot_show_starts_from_its_default_and_is_named(qtbot, story_model, prefs):
    bad = {"windowState": "²", "stage": "nowhere", "colourBy": ["a", "b"], "leastConfidentBy": "gut feeling",
           f"prompt/{story_model.name}": 12, "settings": json.dumps({"temperature": -3, "seed": 7, "nonsense": 1})}  # fmt: skip
    for key, value in bad.items():
        prefs.setValue(key, value)
    win = MainWindow(model=story_model, settings=prefs)  # (a side tab "²" once raised ValueError: int("²"))
    qtbot.addWidget(win)
    status = win.message_label.text()
    assert status.startswith("Preferences reset (the window cannot show them as remembered): ")
    for named in ("layout '²' (not a layout of these docks)", "chart stage 'nowhere'", "colour by ['a', 'b'] (not text)",
                  "least confident by 'gut feeling'", "prompt 12 (not text)", "setting 'temperature' = -3 (temperature",
                  "setting 'nonsense' = 1 (not a setting)"):  # fmt: skip
        assert named in status
    assert win.panel_shown(win.rules_panel) and win.chart.stage() == "final"
    assert win.colour_by.currentText() == "drawn probability"
    assert win.controls.prompt.toPlainText() == "mia has a red ball."
    assert win.controls.settings()["seed"] == 7 and win.controls.settings()["temperature"] == 0.0  # the good one kept
    qtbot.wait(300)  # the worker's first answers (the prompt checked) leave the note in place
    assert win.message_label.text() == status
    win.close()


def test_good_preferences_are_shown_without_a_note(qtbot, story_model, prefs):
    good = {"stage": "raw", "colourBy": "entropy", "leastConfidentBy": "entropy"}
    for key, value in good.items():
        prefs.setValue(key, value)
    win = MainWindow(model=story_model, settings=prefs)
    qtbot.addWidget(win)
    assert win.message_label.text() == ""
    assert win.chart.stage() == "raw" and win.colour_by.currentText() == "entropy"
    assert win.uncertainty_strip.rank_by.currentText() == "entropy"
    win.close()


def test_cpu_threads_remembered_beyond_the_cpus_open_smollm2_with_the_default_and_say_so(qtbot, window, prefs):
    pytest.importorskip("llama_cpp")
    path = str(engine.smollm2_path())
    remembered = {"backend": "llama.cpp", "threads": 100_000, "context_length": 256}  # 100,000: SIGSEGV at a step
    prefs.setValue("model_settings", json.dumps({path: remembered}))
    request = window.controller.models.picker.request(path, "llama.cpp")  # what picking the file in the list asks
    assert request == {"source": path, "backend": "llama.cpp", "context_length": 256}  # no threads: the default
    with qtbot.waitSignal(window.controller.modelChanged, timeout=60_000):
        window.controller.models.open_model(request)
    assert window.model.threads == engine.default_threads()
    status = window.message_label.text()
    assert "remembered for it but refused, the defaults used: CPU threads 100000 (threads must be a whole number " \
           f"from 1 to {engine.max_threads()}" in status  # fmt: skip
    step(qtbot, window)  # and it runs
    assert window.token_view.step_count() == 1


def test_the_settings_dialog_offers_the_threads_the_engine_takes(qtbot, prefs):
    from playground.models.settings_dialog import ModelSettingsDialog

    pytest.importorskip("llama_cpp")
    dialog = ModelSettingsDialog(engine.FoundModel.at(engine.smollm2_path()), {"threads": 100_000})
    qtbot.addWidget(dialog)
    assert dialog.threads.maximum() == engine.max_threads()  # was 512 on a 2-core machine
    assert dialog.threads.value() == engine.max_threads()  # a value past it is shown as the most it takes


def test_deeply_nested_model_preferences_start_with_none_remembered(qtbot, story_model, prefs):
    from playground.models.prefs import ModelPrefs

    prefs.setValue("recent_models", "[" * 100_000)  # raised RecursionError in MainWindow.__init__
    prefs.setValue("model_settings", '{"a":' * 100_000)
    win = MainWindow(model=story_model, settings=prefs)
    qtbot.addWidget(win)
    assert ModelPrefs(prefs).recent() == [] and ModelPrefs(prefs).options("a") == {}
    win.close()
