"""Issue 14 in the window: the Samplers panel (every stage's settings and their order), what the chart and the
token view say of each stage. The real window on the story model, offscreen, driven as a person would."""

import json
import math

import pytest
from PySide6.QtCore import QPoint, QPointF, QSettings, Qt
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QDoubleSpinBox,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QSpinBox,
    QWidget,
)  # fmt: skip
from test_window import WAIT, child, click_bar, generate, step

import engine
from playground import MainWindow
from playground.samplers.parse import bias_text, breakers_text, parse_bias, parse_breakers

SPIN_NAMES = {"repeat_penalty": "repeatPenaltyBox", "presence_penalty": "presencePenaltyBox",
              "frequency_penalty": "frequencyPenaltyBox", "repeat_last_n": "repeatLastNBox",
              "dry_multiplier": "dryMultiplierBox", "dry_base": "dryBaseBox",
              "dry_allowed_length": "dryAllowedLengthBox", "dry_last_n": "dryLastNBox",
              "xtc_probability": "xtcProbabilityBox", "xtc_threshold": "xtcThresholdBox",
              "typical_p": "typicalPBox", "top_n_sigma": "topNSigmaBox"}  # fmt: skip


def spin(win, setting):
    name = SPIN_NAMES[setting]
    box = win.findChild(QDoubleSpinBox, name) or win.findChild(QSpinBox, name)
    assert box is not None, name
    return box


def press(qtbot, win, name):
    qtbot.mouseClick(child(win, QPushButton, name), Qt.MouseButton.LeftButton)


def order_list(win) -> QListWidget:
    return child(win, QListWidget, "samplerOrder")


def order(win) -> list[str]:
    items = order_list(win)
    return [items.item(row).data(Qt.ItemDataRole.UserRole) for row in range(items.count())]


def select_stage(win, name):
    order_list(win).setCurrentRow(order(win).index(name))


def drag_stage(qtbot, win, name, onto):
    """Drop stage `name` on the upper half of stage `onto`'s row, as the list's own drag ends (offscreen Qt runs
    no real drag: the drop goes to the view as Qt's drag would hand it over, with the drag's possible actions)."""
    items = order_list(win)
    dragged = items.item(order(win).index(name))
    rect = items.visualItemRect(items.item(order(win).index(onto)))
    actions = Qt.DropAction.CopyAction | Qt.DropAction.MoveAction  # what the list's startDrag offers
    mime = items.model().mimeData([items.indexFromItem(dragged)])  # as the drag makes it (Qt owns it then)
    event = QDropEvent(QPointF(rect.center() - QPoint(0, rect.height() // 4)), actions, mime,
                       Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)  # fmt: skip
    items.viewportEvent(event)
    accepted, action = event.isAccepted(), event.dropAction()
    mime.deleteLater()
    return accepted, action


def test_the_samplers_panel_has_every_setting_and_the_order(qtbot, window):
    window.show_samplers()
    panel = child(window, QWidget, "samplerPanel")
    assert panel.isVisible()
    for name in [*SPIN_NAMES.values(), "dryBreakersEdit", "logitBiasEdit", "samplerOrder", "samplerUp",
                 "samplerDown", "llamaCppOrderButton", "defaultOrderButton"]:  # fmt: skip
        widget = window.findChild(QWidget, name)
        assert widget is not None and widget.isVisibleTo(window), name
    assert order(window) == list(engine.SAMPLERS)
    # the engine's defaults, the neutral ones as "off"
    assert spin(window, "repeat_penalty").text() == "off" and spin(window, "presence_penalty").text() == "off"
    assert spin(window, "dry_last_n").text() == "all" and spin(window, "dry_base").value() == 1.75
    assert child(window, QLineEdit, "dryBreakersEdit").text() == '\\n, :, ", *'
    defaults = engine.Settings().to_dict()
    assert {k: v for k, v in window.controls.settings().items() if k in SPIN_NAMES} == {
        k: defaults[k] for k in SPIN_NAMES
    }
    assert window.controls.settings()["samplers"] == list(engine.SAMPLERS)


def test_off_stages_are_greyed_in_the_order(qtbot, window):
    items = order_list(window)

    def off():
        return [items.item(row).data(Qt.ItemDataRole.UserRole) for row in range(items.count())
                if "(off)" in items.item(row).text()]  # fmt: skip

    assert off() == ["logit_bias", "penalties", "dry", "top_k", "top_p", "min_p", "top_n_sigma", "typical_p", "xtc"]
    grey = items.item(order(window).index("dry")).foreground().color()
    assert grey != items.item(order(window).index("temperature")).foreground().color()
    spin(window, "dry_multiplier").setValue(0.8)
    window.controls.top_k.setValue(5)
    spin(window, "xtc_probability").setValue(0.5)
    spin(window, "xtc_threshold").setValue(0.6)  # above 0.5 XTC never acts: still off
    assert "dry" not in off() and "top_k" not in off() and "xtc" in off()
    assert "penalties" in off()
    spin(window, "repeat_penalty").setValue(1.2)
    assert "penalties" not in off()
    spin(window, "repeat_last_n").setValue(0)  # looking at no tokens: off again
    assert spin(window, "repeat_last_n").text() == "off" and "penalties" in off()


def test_penalties_and_the_order_reach_the_session(qtbot, window, story_model):
    window.show_samplers()
    window.controls.temperature.setValue(0.9)
    window.controls.top_k.setValue(20)
    window.controls.seed.setValue(3)
    spin(window, "repeat_penalty").setValue(1.3)
    spin(window, "presence_penalty").setValue(0.4)
    spin(window, "dry_multiplier").setValue(0.8)
    qtbot.keyClicks(child(window, QLineEdit, "logitBiasEdit"), "5:-1.5, 7:ban")
    press(qtbot, window, "llamaCppOrderButton")
    assert order(window) == list(engine.LLAMA_CPP_ORDER)
    generate(qtbot, window)
    trace = window.controller.traces.trace()
    settings = trace["settings"]
    assert settings["repeat_penalty"] == 1.3 and settings["presence_penalty"] == 0.4
    assert settings["dry_multiplier"] == 0.8 and settings["logit_bias"] == [[5, -1.5], [7, None]]
    assert settings["samplers"] == list(engine.LLAMA_CPP_ORDER)
    expected_stages = ["logit_bias", "penalties", "dry", "top_k", "top_p", "min_p", "temperature"]  # those that run
    assert all(list(s["candidates"]["stages"]) == expected_stages for s in trace["steps"])
    assert all(s["token_id"] != 7 for s in trace["steps"])  # banned
    # what the window wrote is what the engine writes with those settings
    ran = engine.generate(story_model, "mia has a red ball.", **{k: v for k, v in settings.items()})
    assert window.token_view.text() == ran.text


def test_a_change_in_the_panel_mid_session_is_a_logged_settings_change(qtbot, window):
    step(qtbot, window)
    spin(window, "frequency_penalty").setValue(0.5)
    order_list(window).setCurrentRow(order(window).index("xtc"))
    press(qtbot, window, "samplerUp")
    step(qtbot, window)
    changes = [a for a in window.session().actions if a["kind"] == "settings"]
    assert len(changes) == 1
    assert changes[0]["settings"]["frequency_penalty"] == 0.5
    assert changes[0]["settings"]["samplers"][-2:] == ["xtc", "typical_p"]
    assert window.token_view.steps()[-1].candidates.stage_names[0] == "penalties"


def test_reorder_with_up_down_drag_and_the_presets(qtbot, window):
    window.show_samplers()
    up, down = child(window, QPushButton, "samplerUp"), child(window, QPushButton, "samplerDown")
    select_stage(window, "temperature")
    press(qtbot, window, "samplerUp")
    press(qtbot, window, "samplerUp")
    assert order(window)[:4] == ["logit_bias", "temperature", "penalties", "dry"]
    press(qtbot, window, "samplerDown")
    assert order(window)[:4] == ["logit_bias", "penalties", "temperature", "dry"]
    select_stage(window, "logit_bias")
    assert not up.isEnabled() and down.isEnabled()
    select_stage(window, "xtc")
    assert up.isEnabled() and not down.isEnabled()

    accepted, action = drag_stage(qtbot, window, "xtc", onto="logit_bias")  # drag XTC to the top
    assert accepted and action == Qt.DropAction.CopyAction  # moved already: the view must not remove the row
    assert order(window)[:2] == ["xtc", "logit_bias"] and len(order(window)) == len(engine.SAMPLERS)
    drag_stage(qtbot, window, "logit_bias", onto="min_p")
    assert order(window).index("logit_bias") == order(window).index("min_p") - 1
    assert window.controls.settings()["samplers"] == order(window)

    press(qtbot, window, "llamaCppOrderButton")
    assert window.controls.settings()["samplers"] == list(engine.LLAMA_CPP_ORDER)
    assert order_list(window).item(0).text().startswith("1. logit bias")
    press(qtbot, window, "defaultOrderButton")
    assert window.controls.settings()["samplers"] == list(engine.SAMPLERS)


def test_a_bad_logit_bias_shows_the_engines_message_and_keeps_generate_off(qtbot, window):
    field = child(window, QLineEdit, "logitBiasEdit")
    error = child(window, QLabel, "logitBiasError")
    generate_button = child(window, QPushButton, "generateButton")
    qtbot.keyClicks(field, "5:lots")
    assert error.isVisible() and "logit_bias for token 5 must be a finite number" in error.text()
    assert not generate_button.isEnabled() and not child(window, QPushButton, "stepButton").isEnabled()
    samplers = window.findChild(QDockWidget, "samplersDock")
    assert samplers.windowTitle() == "Samplers ⚠" and window.panel_shown(window.sampler_scroll)
    qtbot.keyClick(window.controls.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)  # no run
    qtbot.wait(50)
    assert window.token_view.step_count() == 0 and not window.controller.running
    window.controls.prompt.setPlainText("mia has a red cup.")  # a prompt check does not turn Generate back on
    assert not generate_button.isEnabled()

    field.setText("500:1")
    assert "logit_bias names token id 500, outside the vocabulary (0 to 95)" in error.text()
    field.setText("12")
    assert "is not id:bias" in error.text() and not generate_button.isEnabled()
    field.setText("12:-3, 20:-inf")
    assert not error.isVisible() and generate_button.isEnabled()
    assert samplers.windowTitle() == "Samplers"
    assert window.controls.settings()["logit_bias"] == [[12, -3.0], [20, None]]


def test_a_bad_breaker_list_is_named_too(qtbot, window):
    field = child(window, QLineEdit, "dryBreakersEdit")
    field.setText("x" * 41)
    assert "dry_sequence_breakers must be" in child(window, QLabel, "dryBreakersError").text()
    assert not child(window, QPushButton, "generateButton").isEnabled()
    field.setText("\\n, \\s-\\s, \\,")
    assert child(window, QPushButton, "generateButton").isEnabled()
    assert window.controls.settings()["dry_sequence_breakers"] == ["\n", " - ", ","]


def test_the_text_forms_read_back_exactly():
    for breakers in (["\n", ":", '"', "*"], [" ", " a b ", "x,y", "back\\slash", "\t"]):
        assert parse_breakers(breakers_text(breakers)) == breakers
    assert parse_bias("15:-2.5, 42:ban; 7 : -inf\n3:+1") == [[15, -2.5], [42, None], [7, None], [3, 1.0]]
    assert (
        bias_text([[15, -2.5], [42, None], [3, 1.0], [4, 0.1], [5, -math.inf]]) == "15:-2.5, 42:ban, 3:1, 4:0.1, 5:ban"
    )


def test_the_panel_is_remembered(qtbot, story_model, prefs):
    first = MainWindow(model=story_model, settings=prefs)
    qtbot.addWidget(first)
    spin(first, "repeat_penalty").setValue(1.15)
    spin(first, "dry_multiplier").setValue(0.8)
    spin(first, "dry_last_n").setValue(128)
    spin(first, "xtc_probability").setValue(0.5)
    spin(first, "typical_p").setValue(0.9)
    spin(first, "top_n_sigma").setValue(1.5)
    child(first, QLineEdit, "logitBiasEdit").setText("3:2.5, 9:ban")
    child(first, QLineEdit, "dryBreakersEdit").setText("\\n, ###")
    press(qtbot, first, "llamaCppOrderButton")
    first.show_samplers()
    wanted = first.controls.settings()
    first.close()
    second = MainWindow(model=story_model, settings=prefs)
    qtbot.addWidget(second)
    assert second.controls.settings() == wanted
    assert wanted["logit_bias"] == [[3, 2.5], [9, None]] and wanted["dry_sequence_breakers"] == ["\n", "###"]
    second.show()
    qtbot.waitExposed(second)
    assert second.panel_shown(second.sampler_scroll) and not second.panel_shown(second.rules_panel)
    second.close()


@pytest.mark.parametrize(("saved", "kept"), [
    ('{"repeat_penalty": 1.2, "dry_base": 0.5, "samplers": ["xtc"]}', {}),
    ('{"repeat_penalty": 1.2, "future_setting": 3, "logit_bias": "5:ban", "dry_sequence_breakers": [""]}', {}),
    ('{"repeat_penalty": 1.2, "dry_multiplier": 1, "samplers": ["temperature", "top_k", "top_p", "min_p"]}',
     {"dry_multiplier": 1.0}),  # the two cannot be together: the first stays
    ('{"repeat_penalty": 1.2, "logit_bias": [[3, -1.5]], "samplers": ["temperature", "top_k", "top_p", "min_p", '
     '"logit_bias", "penalties"]}', {"logit_bias": [[3, -1.5]], "samplers": ["temperature", "top_k", "top_p",
                                    "min_p", "logit_bias", "penalties", "dry", "top_n_sigma", "typical_p", "xtc"]}),
])  # fmt: skip
def test_remembered_settings_keep_what_the_engine_takes(qtbot, story_model, tmp_path, saved, kept):
    prefs = QSettings(str(tmp_path / "prefs.ini"), QSettings.Format.IniFormat)
    prefs.setValue("settings", saved)
    prefs.sync()
    win = MainWindow(model=story_model, settings=prefs)
    qtbot.addWidget(win)
    settings = win.controls.settings()
    defaults = engine.Settings().to_dict()
    wanted = dict(defaults, repeat_penalty=1.2, **kept)  # the good values stay, the others are defaults
    assert settings == {name: wanted[name] for name in settings}
    assert win.controls.settings_problem() is None
    generate(qtbot, win)  # and the window works
    assert win.token_view.step_count() > 0
    win.close()


def test_an_opened_trace_shows_the_settings_its_last_steps_were_drawn_with(qtbot, window, tmp_path):
    """Issue 43, item 4: before, the controls showed the trace's starting settings (T 0) though the branch shown
    was drawn at T 1.00; and the chart's hint said "Press Step" under a title that said "click a token"."""
    window.controls.temperature.setValue(0.0)
    step(qtbot, window)
    window.controls.temperature.setValue(1.0)
    window.controls.seed.setValue(5)
    generate(qtbot, window)
    path = tmp_path / "run.json"
    window.export_trace(path)
    assert json.loads(path.read_text())["settings"]["temperature"] == 0.0
    window.controls.temperature.setValue(0.3)
    window.open_trace(path)
    assert window.controls.settings()["temperature"] == 1.0 and window.controls.seed.value() == 5
    window.chart.flush()
    assert window.chart.title.text().startswith("Trace: click a token")
    assert window.chart.empty_hint.textItem.toPlainText().startswith("Click a token in the text")


def test_opening_a_trace_shows_its_sampler_settings(qtbot, window, tmp_path):
    spin(window, "presence_penalty").setValue(0.5)
    spin(window, "dry_multiplier").setValue(0.8)
    child(window, QLineEdit, "logitBiasEdit").setText("4:ban")
    press(qtbot, window, "llamaCppOrderButton")
    generate(qtbot, window)
    path = tmp_path / "run.json"
    window.export_trace(path)
    wanted = window.controls.settings()
    window.controls.set_settings(engine.Settings().to_dict())
    assert window.controls.settings()["samplers"] == list(engine.SAMPLERS)
    window.open_trace(path)
    assert window.controls.settings() == wanted
    assert "cannot show" not in window.message_label.text()

    trace = json.loads(path.read_text())
    trace["settings_at_end"].update(presence_penalty=0.125, repeat_penalty=500.0, samplers=[
        "temperature", "top_k", "top_p", "min_p", "penalties", "dry", "logit_bias"])  # fmt: skip
    path.write_text(json.dumps(trace))
    window.open_trace(path)
    status = window.message_label.text()
    assert "presence penalty 0.125 shown as 0.13" in status and "repeat penalty 500 shown as 100" in status
    assert "order" not in status  # the stages it leaves out are off: the same chain
    assert order(window)[:7] == ["temperature", "top_k", "top_p", "min_p", "penalties", "dry", "logit_bias"]


def step_and_show(qtbot, window, stage: str):
    """One step with the controls as they are, its chart switched to this stage -> the chart."""
    step(qtbot, window)
    window.chart.set_stage(stage)
    window.chart.flush()
    return window.chart


def test_the_chart_says_which_stage_removed_a_candidate(qtbot, window):
    window.controls.temperature.setValue(1.0)
    window.controls.top_k.setValue(3)
    chart = step_and_show(qtbot, window, "final")
    assert chart.removed_rows() == list(range(3, 20))
    values = chart.value_texts()
    assert values[3] == "removed by top-k" and values[19] == "removed by top-k" and values[0] != "removed by top-k"
    assert chart._tokens[5].color != chart._tokens[0].color  # greyed
    hover = chart.hover_text(5)
    assert "removed by top-k" in hover and f"token id {chart._candidates.token_ids[5]}" in hover
    assert "after top-k" in hover and "kept by every stage" in chart.hover_text(0)
    chart.set_stage("temperature")  # before top-k: nothing is removed yet
    chart.flush()
    assert chart.removed_rows() == [] and "removed" not in " ".join(chart.value_texts())


def test_under_greedy_the_chart_shows_what_each_stage_did_and_what_greedy_chose_from(qtbot, window):
    """Temperature 0 (the default) with top-k 2: "final (greedy)" shows the distribution greedy chose from, the
    candidates top-k removed greyed as such, the one greedy left out with its probability and the token taken in
    orange; top-k's own stage shows its two tokens; the hover names the stage that removed each."""
    assert window.controls.settings()["temperature"] == 0
    window.controls.top_k.setValue(2)
    chart = step_and_show(qtbot, window, "final")
    assert chart.removed_rows() == list(range(2, 20))
    assert chart.stages() == ("raw", "temperature", "top_k", "top_p", "min_p", "final")
    assert chart.stage_buttons.button(5).text() == "final (greedy)"
    assert chart.value_texts()[2] == "removed by top-k" and chart.value_texts()[19] == "removed by top-k"
    assert chart.shown()[1][1] > 0 and not chart.value_texts()[1].startswith("removed")  # what greedy chose from
    assert chart.marked() == [0]
    note = chart.stage_note
    assert (
        note.isVisible() and note.text().startswith("Under greedy decoding (temperature 0)") and "min-p" in note.text()
    )
    assert "removed by greedy" in chart.hover_text(1) and "removed by top-k" in chart.hover_text(2)
    assert "final (greedy)" in chart.hover_text(0)
    chart.set_stage("top_k")  # top-k's own work: two tokens left, the others removed by it
    chart.flush()
    assert chart.removed_rows() == list(range(2, 20)) and not note.isVisible()
    assert [p > 0 for _token, p in chart.shown()[:3]] == [True, True, False]
    chart.set_stage("temperature")  # at 0 it leaves the scores as they are: the raw softmax, nothing removed
    chart.flush()
    assert chart.removed_rows() == [] and [p for _t, p in chart.shown()] == list(chart._candidates.raw)


def test_the_chart_names_every_stage_and_fits_them(qtbot, window):
    controls = window.controls
    controls.temperature.setValue(1.0)
    controls.top_k.setValue(40)
    controls.top_p.setValue(0.95)
    controls.min_p.setValue(0.01)
    for name, value in (("repeat_penalty", 1.1), ("dry_multiplier", 0.8), ("xtc_probability", 0.3),
                        ("typical_p", 0.95), ("top_n_sigma", 3.0)):  # fmt: skip
        spin(window, name).setValue(value)
    child(window, QLineEdit, "logitBiasEdit").setText("9:-1")
    step(qtbot, window)
    chart = window.chart
    chart.flush()
    assert chart.stages() == ("raw", *engine.SAMPLERS[:-1], "final")
    texts = [chart.stage_buttons.button(i).text() for i in range(len(chart.stages()))]
    assert texts == ["raw softmax", "after logit bias", "after penalties", "after DRY", "after temperature",
                     "after top-k", "after top-p", "after min-p", "after top-n-σ", "after typical-p", "final"]  # fmt: skip
    assert "after XTC" in chart.stage_buttons.button(len(texts) - 1).toolTip()
    window.resize(1024, 700)
    qtbot.waitUntil(lambda: window.width() <= 1024, timeout=WAIT)
    qtbot.wait(50)
    box = chart.stage_box
    for button in chart.stage_buttons.buttons():  # every button inside the chart, none on top of another
        assert box.rect().contains(button.geometry()), button.text()
    geometries = [b.geometry() for b in chart.stage_buttons.buttons()]
    assert not any(a.intersects(b) for i, a in enumerate(geometries) for b in geometries[i + 1 :])
    assert box.height() < chart.height() / 4 and chart.plot.height() > 250
    assert window.minimumSizeHint().width() <= 1024


def test_the_token_hover_lists_the_rank_at_every_stage(qtbot, window):
    window.controls.temperature.setValue(1.0)
    window.controls.top_k.setValue(3)
    step(qtbot, window)
    first = window.token_view.step(0)
    assert [name for name, _rank in first.stage_ranks] == ["temperature", "top_k", "top_p", "min_p"]
    t, k, p, m = (rank for _name, rank in first.stage_ranks)
    assert (f"rank by stage: raw {first.model_rank} → temperature {t} → top-k {k} → top-p {p} → final {m}"
            in window.token_view.tooltip_html(0))  # fmt: skip
    # a token forced from beyond the top 3: removed by top-k
    window.chart.set_stage("final")
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        click_bar(qtbot, window, 6)
    window.controller.flush()
    forced = window.token_view.step(1)
    assert forced.source == "forced"
    rank = forced.model_rank
    assert (f"rank by stage: raw {rank} → temperature {rank} → top-k removed → top-p removed → final removed"
            in window.token_view.tooltip_html(1))  # fmt: skip


def test_the_settings_read_follow_every_change_of_the_panel(qtbot, window):
    """The panel's fields are read once per change (the window asks for them several times a run): a value typed,
    a stage moved, a text field, healing switched off with the model; a dict handed out and changed changes
    nothing."""
    controls, panel = window.controls, window.controls.samplers
    before = controls.settings()
    before["samplers"].reverse(), before["logit_bias"].append([1, 2.0])  # the caller's own copy
    assert controls.settings()["samplers"] == list(engine.SAMPLERS) and controls.settings()["logit_bias"] == []
    box = spin(window, "repeat_penalty")
    box.lineEdit().selectAll()
    qtbot.keyClicks(box, "1.3")
    assert controls.settings()["repeat_penalty"] == before["repeat_penalty"]  # not taken until Return
    qtbot.keyClick(box, Qt.Key.Key_Return)
    assert controls.settings()["repeat_penalty"] == 1.3
    select_stage(window, "xtc")
    press(qtbot, window, "samplerUp")
    assert controls.settings()["samplers"] == order(window) != list(engine.SAMPLERS)
    child(window, QLineEdit, "logitBiasEdit").setText("7:-1")
    assert controls.settings()["logit_bias"] == [[7, -1.0]]
    panel.set_model(local_sampling=True, grammars=False, heal_by_default=True)
    assert controls.settings()["heal"] is True
    panel.heal.setEnabled(False)  # no signal: read each time
    assert controls.settings()["heal"] is False


def test_runs_back_to_back_read_the_panels_fields_only_after_a_change(qtbot, window):
    """The window asks for the settings several times a run (the prompt check, the request, the autosave): the
    panel's fields (a dozen spin boxes, the order list) are read again only after one of them changed."""
    from test_window_autosave import STORY_STARTS, runs_back_to_back

    stages = order_list(window)
    reads, order = [], stages.order
    stages.order = lambda: reads.append(1) or order()
    runs_back_to_back(qtbot, window, STORY_STARTS)
    assert reads == []  # before: 20 reads for 5 runs
    spin(window, "repeat_penalty").setValue(1.2)
    assert window.controls.settings()["repeat_penalty"] == 1.2 and len(reads) == 1
