"""Issue 10, the window's items: each test drives the real window offscreen and checks what a person sees."""

import json
import logging
import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QLabel, QPushButton
from test_window import WAIT, child, click_bar, generate, step, token_point, type_prompt

import engine
from playground import MainWindow


def press(qtbot, win, name):
    qtbot.mouseClick(child(win, QPushButton, name), Qt.MouseButton.LeftButton)


def export_open_replay(qtbot, win, path):
    win.export_trace(path)
    win.controller.reset()
    win.open_trace(path)
    with qtbot.waitSignal(win.controller.message, timeout=WAIT) as blocker:
        win.replay_action.trigger()
    return blocker.args[0]


def wait_for_stop_chart(qtbot, win):
    qtbot.waitUntil(lambda: win.chart.flush() or win.chart.title.text().startswith("Stopped"), timeout=WAIT)


# --- 1: a trace with a settings change replays; a replay that differs says how ----------------------------
def test_steps_then_a_new_temperature_then_generate_replays_identically(qtbot, window, tmp_path):
    for _ in range(4):
        step(qtbot, window)
    window.controls.temperature.setValue(1.0)
    window.controls.seed.setValue(5)
    generate(qtbot, window)
    text = window.token_view.text()
    assert export_open_replay(qtbot, window, tmp_path / "run.json").startswith("identical")
    assert window.token_view.text() == text
    assert child(window, QLabel, "stopReasonLabel").text() == "Replayed: end of story"
    assert "identical" in window.message_label.text()


def test_continue_from_here_at_another_temperature_replays_identically(qtbot, window, tmp_path):
    generate(qtbot, window)
    view = window.token_view
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=token_point(view, 5))
    window.controls.temperature.setValue(1.3)
    with qtbot.waitSignal(window.controller.runFinished, timeout=WAIT):
        qtbot.mouseClick(window.continue_button, Qt.MouseButton.LeftButton)
    assert export_open_replay(qtbot, window, tmp_path / "run.json").startswith("identical")


def test_a_replay_that_differs_names_the_numbers_and_says_what_the_view_shows(qtbot, window, tmp_path):
    window.controls.temperature.setValue(1.0)
    generate(qtbot, window)
    path = tmp_path / "run.json"
    window.export_trace(path)
    trace = json.loads(path.read_text())
    replayed_p = trace["steps"][2]["probability"]
    trace["steps"][2]["probability"] = 0.125  # as if another machine had computed it
    path.write_text(json.dumps(trace))
    window.controller.reset()
    window.open_trace(path)
    with qtbot.waitSignal(window.controller.message, timeout=WAIT):
        window.replay_action.trigger()
    status = window.message_label.text()
    assert "differs at step 2" in status and "probability" in status
    assert "recorded 0.125" in status and f"replayed {replayed_p:.17g}" in status
    assert "The view now shows the replayed run" in status
    assert child(window, QLabel, "stopReasonLabel").text().startswith("Replayed")


# --- 4: rules changed during a session ---------------------------------------------------------------------
def test_a_rule_added_after_a_step_fires_and_is_replayed(qtbot, window, tmp_path):
    step(qtbot, window)
    window.rules_panel.add_rule(" goes to the", "insert", " barn")
    generate(qtbot, window)
    assert "goes to the barn. at the barn," in window.token_view.text()
    assert any(s.source == "rule" and s.token == " barn" for s in window.token_view.steps())
    actions = window.session().actions
    assert {"kind": "rules", "rules": [{"when": " goes to the", "regex": False, "action": "insert",
                                        "insert": " barn"}]} in actions  # fmt: skip
    assert export_open_replay(qtbot, window, tmp_path / "run.json").startswith("identical")


def test_only_a_change_of_rules_is_announced(qtbot, window):
    step(qtbot, window)
    window.rules_panel.add_rule(" goes to the", "insert", " barn")
    qtbot.waitUntil(lambda: window.message_label.text().startswith("Rules changed: 1"), timeout=WAIT)
    step(qtbot, window)
    window.controller.status("")  # Step sends the panel's rules again: unchanged, they say nothing
    step(qtbot, window)
    qtbot.wait(50)
    assert "Rules changed" not in window.message_label.text()


def test_a_rule_removed_mid_session_no_longer_fires(qtbot, window):
    window.rules_panel.add_rule(" goes to the", "insert", " barn")
    step(qtbot, window)
    window.rules_panel.table.selectRow(0)
    qtbot.mouseClick(window.rules_panel.remove_button, Qt.MouseButton.LeftButton)
    generate(qtbot, window)
    assert all(s.source == "model" for s in window.token_view.steps())
    assert window.session().rules == ()


def test_a_bad_rule_mid_session_is_named_and_changes_nothing(qtbot, window):
    window.rules_panel.add_rule(" goes to the", "insert", " barn")
    step(qtbot, window)
    window.rules_panel.add_rule(" to", "choose", " a|")
    assert "rule 2" in window.message_label.text() and "unchanged" in window.message_label.text()
    press(qtbot, window, "generateButton")  # refused while a rule is wrong: the rule is named
    assert "rule 2" in window.message_label.text() and window.token_view.step_count() == 1
    window.rules_panel.table.selectRow(1)
    qtbot.mouseClick(window.rules_panel.remove_button, Qt.MouseButton.LeftButton)
    generate(qtbot, window)
    assert "goes to the barn." in window.token_view.text()
    assert [a for a in window.session().actions if a["kind"] == "rules"] == []


# --- 6: greedy shows the model's distribution ----------------------------------------------------------------
def test_the_greedy_chart_shows_the_raw_distribution_with_the_choice_marked(qtbot, window):
    assert window.controls.settings()["temperature"] == 0 and window.chart.stage() == "final"
    for _ in range(4):  # "mia has a red ball. mia goes to the": which place comes next?
        step(qtbot, window)
    window.chart.flush()
    shown = window.chart.shown()
    assert sum(p > 0.001 for _token, p in shown) >= 2  # not one bar at 1.000 and 19 at 0
    assert shown[0][1] < 1.0
    assert window.chart.marked() == [0]  # the token greedy takes
    assert window.chart.stage_note.isVisible() and "greedy" in window.chart.stage_note.text()
    window.controls.temperature.setValue(1.0)  # a real spread at the final stage: no note
    window.controller.reset()
    step(qtbot, window)
    window.chart.flush()
    assert not window.chart.stage_note.isVisible()


# --- 7: after a stop ---------------------------------------------------------------------------------------
def test_after_the_end_of_the_story_the_chart_shows_the_last_step_and_a_click_takes_it_there(qtbot, window):
    assert generate(qtbot, window) == "end of story"
    wait_for_stop_chart(qtbot, window)
    view, chart = window.token_view, window.chart
    count, last = view.step_count(), view.steps()[-1]
    assert chart.title.text().startswith(f"Stopped (end of story). The last step, {count}:")
    assert "take that token there instead" in chart.title.text()
    assert [chart.shown()[row][0] for row in chart.marked()] == [last.token]
    wanted = chart.shown()[1][0]
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        click_bar(qtbot, window, 1)
    window.controller.flush()
    assert view.step_count() == count and view.steps()[-1].token == wanted
    assert view.steps()[-1].source == "forced"


def test_step_and_generate_after_the_end_of_the_story_say_why_they_cannot(qtbot, window):
    generate(qtbot, window)
    count = window.token_view.step_count()
    for button in ("stepButton", "generateButton"):
        window.message_label.setText("")
        press(qtbot, window, button)
        qtbot.waitUntil(lambda: "ended the text (end of story)" in window.message_label.text(), timeout=WAIT)
        assert "Insert text" in window.message_label.text() and "Reset" in window.message_label.text()
        qtbot.waitUntil(lambda: child(window, QPushButton, "generateButton").isEnabled(), timeout=WAIT)
        assert window.token_view.step_count() == count


def test_after_max_new_tokens_generate_and_step_go_on_without_changing_the_draws(qtbot, window, story_model):
    window.controls.temperature.setValue(1.0)
    window.controls.seed.setValue(3)
    window.controls.max_tokens.setValue(5)
    assert generate(qtbot, window) == "max_new_tokens"
    assert child(window, QLabel, "stopReasonLabel").text() == "Stopped: max new tokens"
    assert generate(qtbot, window) == "max_new_tokens"  # another 5
    assert window.token_view.step_count() == 10
    step(qtbot, window)  # and one more
    assert window.token_view.step_count() == 11
    expected = engine.generate(story_model, "mia has a red ball.", temperature=1.0, seed=3, max_new_tokens=11)
    assert window.token_view.text() == expected.text


# --- 8: token boundaries ------------------------------------------------------------------------------------
def test_neighbouring_tokens_are_told_apart(qtbot, window):
    generate(qtbot, window)  # greedy: most tokens have probability close to 1, the same color
    view = window.token_view
    backgrounds = [view.format_at(i).background().color().rgba() for i in range(view.step_count())]
    assert all(a != b for a, b in zip(backgrounds, backgrounds[1:]))


# --- 9: a character whose bytes span tokens ------------------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2():
    return engine.load_model("smollm2", backend="numpy")


def test_a_character_split_over_tokens_shows_once_complete(qtbot, smollm2, prefs):
    win = MainWindow(model=smollm2, settings=prefs)
    qtbot.addWidget(win)
    win.show()
    win.controls.samplers.heal.setChecked(False)  # on by default for a GGUF file: it would leave "!" to the model
    type_prompt(qtbot, win, "Name a food.")
    with qtbot.waitSignal(win.controller.idle, timeout=60000):
        win.insert_edit.setText(" pizza 🍕!")  # QTest cannot type a character outside the BMP
        qtbot.mouseClick(win.insert_button, Qt.MouseButton.LeftButton)
    win.controller.flush()
    view = win.token_view
    ids = [s.token_id for s in view.steps()]
    assert ids == smollm2.tokenizer.encode(" pizza 🍕!")  # the ids stay exact
    assert view.toPlainText().endswith(" pizza 🍕!") and "\ufffd" not in view.toPlainText()
    first = next(i for i, s in enumerate(view.steps()) if "\ufffd" in s.token)
    assert "🍕" in view.tooltip_html(first) and "\ufffd" not in view.tooltip_html(first)
    view.select(first + 2)  # the token that completes the character: its candidates finish it too
    win.controller.token_selected(first + 2)
    win.chart.flush()
    assert "🍕" in win.chart.title.text() or "‹" in win.chart.title.text()
    assert not any("\ufffd" in label for label in win.chart.labels())
    assert any(len(label) == 1 and ord(label) > 0x2000 for label in win.chart.labels())  # whole characters
    win.close()


def test_a_character_shows_bytes_until_complete():
    from playground.token_text import split_chars

    pizza = "🍕".encode()
    assert split_chars([b" " + pizza[:2], pizza[2:3]]) == ([" ‹f0 9f›", "‹8d›"], 0)
    assert split_chars([b" " + pizza[:2], pizza[2:3], pizza[3:], b"!"]) == ([" 🍕", "", "", "!"], None)
    assert split_chars([b"\x80a"]) == (["\ufffda"], None)


# --- 10: layout and readability --------------------------------------------------------------------------
def test_the_window_fits_in_1024_pixels_even_with_an_insert_error(qtbot, window):
    window.resize(1024, 700)
    qtbot.waitUntil(lambda: window.width() <= 1024, timeout=WAIT)
    qtbot.keyClicks(window.insert_edit, " Bob has a Very Long Name that the story model cannot spell at all")
    assert window.insert_error.isVisible()
    assert window.minimumSizeHint().width() <= 1024
    assert window.width() <= 1024


def test_the_rules_table_header_and_leading_spaces_are_readable(qtbot, window):
    window.resize(1024, 700)
    panel = window.rules_panel
    panel.add_rule(" goes to the", "insert", " barn")
    header = panel.table.horizontalHeader()
    for column in range(4):
        text = panel.table.horizontalHeaderItem(column).text()
        assert header.sectionSize(column) >= header.fontMetrics().horizontalAdvance(text) + 12, text
    delegate = panel.table.itemDelegateForColumn(0)
    assert delegate.displayText(panel.table.item(0, 0).text(), panel.locale()) == "·goes to the"
    assert delegate.displayText(" passed| failed", panel.locale()) == "·passed|·failed"


def _luminance(color: QColor) -> float:
    def channel(c):
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(color.red()) + 0.7152 * channel(color.green()) + 0.0722 * channel(color.blue())


def _over(top: QColor, base: QColor) -> QColor:
    a = top.alphaF()
    return QColor(*(round(a * t + (1 - a) * b) for t, b in zip(top.getRgb()[:3], base.getRgb()[:3])))


def test_forced_tokens_on_a_red_background_are_readable(qtbot, window):
    step(qtbot, window)
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        click_bar(qtbot, window, 19)  # the least likely candidate: a red background
    window.controller.flush()
    view = window.token_view
    fmt = view.format_at(1)
    assert view.steps()[1].source == "forced" and fmt.fontUnderline()
    palette = view.palette()
    text = (
        fmt.foreground().color()
        if fmt.hasProperty(fmt.Property.ForegroundBrush)
        else palette.color(QPalette.ColorRole.Text)
    )
    background = _over(fmt.background().color(), palette.color(QPalette.ColorRole.Base))
    light, dark = sorted((_luminance(text), _luminance(background)), reverse=True)
    assert (light + 0.05) / (dark + 0.05) >= 4.5  # WCAG AA for normal text


def test_the_token_view_and_the_chart_show_a_hint_while_empty(qtbot, window):
    assert window.token_view.toPlainText() == "" and "Generate" in window.token_view.placeholderText()
    window.chart.flush()
    assert window.chart.empty_hint.isVisible() and "Step" in window.chart.empty_hint.textItem.toPlainText()
    step(qtbot, window)
    window.chart.flush()
    assert not window.chart.empty_hint.isVisible()
    window.controller.reset()
    window.chart.flush()
    assert window.chart.empty_hint.isVisible()


# --- 11: opening a model -------------------------------------------------------------------------------
def test_an_unsupported_gguf_is_refused_from_its_header(qtbot, window, tmp_path):
    import tiny_gguf

    path = tiny_gguf.write(tmp_path / "gemma.gguf", tiny_gguf.random_weights(), arch="gemma3")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])  # the tensors are never read: cutting them changes nothing
    progress = []
    window.controller.worker.models.loadProgress.connect(lambda done, total: progress.append(done))
    started = time.perf_counter()
    with qtbot.waitSignal(window.controller.message, timeout=WAIT) as blocker:
        window.controller.models.open_model(str(path), backend="numpy")
    assert time.perf_counter() - started < 2
    message = blocker.args[0]
    assert "architecture 'gemma3' is not supported" in message
    assert message.count(str(path)) == 1
    assert progress == [] and not window.controls.load_progress.isVisible()
    assert "story model" in window.windowTitle()


def test_stop_cancels_a_model_load(qtbot, window, monkeypatch, story_model):
    def slow_load(source, progress=None, **_):
        for done in range(200):
            time.sleep(0.01)
            progress(done, 200)
        return story_model

    monkeypatch.setattr(engine, "load_model", slow_load)
    with qtbot.waitSignal(window.controller.worker.models.loadProgress, timeout=WAIT):
        window.controller.models.open_model("/somewhere/big.gguf")
    assert child(window, QPushButton, "stopButton").isEnabled()
    with qtbot.waitSignal(window.controller.message, timeout=WAIT) as blocker:
        press(qtbot, window, "stopButton")
    assert blocker.args[0].startswith("loading cancelled")
    assert not window.controls.load_progress.isVisible() and not child(window, QPushButton, "stopButton").isEnabled()
    assert child(window, QPushButton, "generateButton").isEnabled()
    assert generate(qtbot, window) == "end of story"


# --- 12: stale or odd labels -------------------------------------------------------------------------------
def test_reset_clears_the_speed(qtbot, window):
    generate(qtbot, window)
    assert "tokens/s" in window.speed_label.text()
    press(qtbot, window, "resetButton")
    assert window.speed_label.text() == ""


def test_a_late_replay_result_does_not_land_on_a_new_run(qtbot, window, tmp_path):
    generate(qtbot, window)
    window.export_trace(tmp_path / "run.json")
    window.controller.reset()
    window.open_trace(tmp_path / "run.json")
    with qtbot.waitSignal(window.controller.worker.replayed, timeout=WAIT):
        window.replay_action.trigger()
        window.controller.reset()  # before the replay's result comes back
    qtbot.wait(100)
    assert window.token_view.toPlainText() == "" and "Replay" not in window.message_label.text()
    assert child(window, QLabel, "stopReasonLabel").text() == ""


def test_speeds_and_the_legend_read_right(window):
    from playground.run_speed import SpeedFigures, rate_text

    assert rate_text(1.0) == "1.0 tokens/s" and rate_text(17.4) == "17 tokens/s" and rate_text(2600) == "2,600 tokens/s"
    window.controller._on_speed(SpeedFigures(steps=3, first_token_seconds=0.5, prompt_tokens=6, prompt_seconds=0.01,
                                             generation_rate=1.0))  # fmt: skip
    assert window.speed_label.text() == "1.0 tokens/s · first token 0.50 s · prompt 600 tokens/s"
    legend = child(window, QLabel, "legendLabel").text()
    assert "0.25" in legend and "0.75" in legend


# --- 13: a prompt ending in a space -------------------------------------------------------------------------
def test_a_prompt_ending_in_a_space_is_warned_about(qtbot, window):
    type_prompt(qtbot, window, "mia has a red ball. ")
    warning = child(window, QLabel, "promptError")
    assert warning.isVisible() and "ends in a space" in warning.text()
    marks = window.controls.prompt.extraSelections()
    assert len(marks) == 1 and marks[0].cursor.selectionStart() == 19
    assert child(window, QPushButton, "generateButton").isEnabled()  # a warning: it may be meant
    type_prompt(qtbot, window, "mia has a red ball.")
    assert not warning.isVisible()


# --- 14: an exception in a slot --------------------------------------------------------------------------
@pytest.mark.qt_no_exception_capture
@pytest.mark.shows_unexpected_error
def test_an_exception_in_a_slot_reaches_the_status_bar_and_the_log(qtbot, window, caplog, data_dir):
    def broken_slot():
        raise ZeroDivisionError("a slot that raises")

    window.insert_button.clicked.connect(broken_slot)
    with caplog.at_level(logging.ERROR, logger="playground"):
        qtbot.mouseClick(window.insert_button, Qt.MouseButton.LeftButton)
    assert "ZeroDivisionError: a slot that raises" in window.message_label.text()
    assert window.message_label.text().endswith(f"The details are in {data_dir / 'logs' / 'playground.log'}")
    assert any(record.exc_info and record.exc_info[0] is ZeroDivisionError for record in caplog.records)
