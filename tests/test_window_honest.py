"""Issue 24, "the window never misleads": each test drives the real window offscreen on the story model and checks
what a person sees."""

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QPushButton
from test_window import WAIT, child, click_bar, generate, step, type_prompt
from test_window_defects import wait_for_stop_chart


def wait_idle_after(qtbot, win, action) -> None:
    with qtbot.waitSignal(win.controller.idle, timeout=WAIT):
        action()
    win.controller.flush()


# --- the stop label says how the session is now ------------------------------------------------------------
def test_the_stop_label_forgets_the_end_once_another_token_is_taken_there(qtbot, window):
    assert generate(qtbot, window) == "end of story"
    assert window.stop_reason.text() == "Stopped: end of story"
    wait_for_stop_chart(qtbot, window)
    wait_idle_after(qtbot, window, lambda: click_bar(qtbot, window, 1))  # the last step taken another way
    assert window.session().stopped is None
    qtbot.waitUntil(lambda: window.stop_reason.text() == "", timeout=WAIT)


def test_a_failed_run_does_not_leave_generating_on_the_stop_label(qtbot, window, monkeypatch):
    step(qtbot, window)
    session = window.session()

    def broken(stream=False):
        raise ValueError("the disk went away")

    monkeypatch.setattr(session, "step", broken)
    with qtbot.waitSignal(window.controller.message, timeout=WAIT) as blocker:
        qtbot.mouseClick(child(window, QPushButton, "generateButton"), Qt.MouseButton.LeftButton)
    assert "the disk went away" in blocker.args[0]
    qtbot.waitUntil(lambda: child(window, QPushButton, "generateButton").isEnabled(), timeout=WAIT)
    assert window.stop_reason.text() != "Generating..."
    assert "the disk went away" in window.message_label.text()


def test_steering_a_head_then_branching_from_an_earlier_token_goes_on(qtbot, window):
    """The wedge of issue 24 as a person met it: Ablate a head, Step, click an earlier token, Continue from here."""
    for _ in range(4):
        step(qtbot, window)
    wait_idle_after(qtbot, window, lambda: window.controller.inside.steer([(0, 3, 0.0)]))
    step(qtbot, window)
    window.token_view.click_step(1)
    assert window.continue_button.isEnabled()
    with qtbot.waitSignal(window.controller.runFinished, timeout=WAIT) as blocker:
        qtbot.mouseClick(window.continue_button, Qt.MouseButton.LeftButton)
    assert blocker.args[0] == "end of story", window.message_label.text()
    assert window.stop_reason.text() == "Stopped: end of story"


# --- the window never resizes itself -------------------------------------------------------------------------
def test_the_window_keeps_its_size_whatever_it_shows(qtbot, window):
    window.resize(1024, 700)
    qtbot.waitUntil(lambda: window.size() == QSize(1024, 700), timeout=WAIT)
    type_prompt(qtbot, window, "mia has a red ball. ")  # a trailing space: a warning under the prompt
    assert window.controls.prompt_error.isVisible()
    assert window.size() == QSize(1024, 700)
    qtbot.wait(50)
    controls = window.controls  # the column scrolls if it must: nothing in it is squashed below its size
    for field in (controls.temperature, controls.top_k, controls.top_p, controls.min_p, controls.max_tokens,
                  controls.seed, controls.prompt_error):  # fmt: skip
        assert field.height() >= field.minimumSizeHint().height(), field.objectName()
    type_prompt(qtbot, window, "mia has a red ball.")
    generate(qtbot, window)
    for panel in (window.rules_panel, window.sampler_scroll, window.seeds_panel, window.tree_panel,
                  window.inside_panel):  # every tab, the Inside tab's tall panel too  # fmt: skip
        window.show_panel(panel)
        qtbot.wait(20)
        assert window.size() == QSize(1024, 700), panel.objectName()
    window.show_panel(window.seeds_panel)
    window.token_view.click_step(3)  # the story has ended: seeds from an earlier token
    with qtbot.waitSignal(window.controller.seeding.shown, timeout=WAIT):
        window.controller.seeding.run_seeds(8)
    qtbot.wait(50)
    assert window.size() == QSize(1024, 700)


# --- token healing and its warnings agree -------------------------------------------------------------------
def test_with_healing_on_a_trailing_space_is_not_warned_about(qtbot, window):
    type_prompt(qtbot, window, "mia has a red ball. ")
    assert window.controls.prompt_error.isVisible() and "Remove the space" in window.controls.prompt_error.text()
    assert "Heal the token boundary" in window.controls.prompt_error.text()  # the way out, named
    window.controls.samplers.heal.setChecked(True)
    assert not window.controls.prompt_error.isVisible()
    window.controls.samplers.heal.setChecked(False)
    assert "Remove the space" in window.controls.prompt_error.text()


def test_an_inserted_text_cut_back_by_healing_says_so_under_the_view(qtbot, window):
    window.controls.samplers.heal.setChecked(True)
    step(qtbot, window)
    note = window.healing_note
    assert not note.isVisible()
    window.insert_edit.setText(" mia goes")
    wait_idle_after(qtbot, window, window.insert_button.click)
    assert window.token_view.text().endswith(" mia")  # ' goes' is left for the model to spell
    qtbot.waitUntil(note.isVisible, timeout=WAIT)
    assert "' goes'" in note.text() and "next token must start with it" in note.text()
    step(qtbot, window)  # the model spells it: the note goes
    assert window.token_view.text().endswith(" mia goes")
    qtbot.waitUntil(lambda: not note.isVisible(), timeout=WAIT)


def test_a_prompt_cut_back_by_healing_says_so_before_the_first_step(qtbot, window):
    window.controls.samplers.heal.setChecked(True)
    window.controller.seeding.run_seeds(1)  # starts the session from the prompt, then says seeds wait for the healing
    qtbot.waitUntil(window.healing_note.isVisible, timeout=WAIT)
    assert "'.'" in window.healing_note.text() and "the prompt" in window.healing_note.text()


def test_the_first_size_keeps_within_a_laptop_screen():
    from playground.main_window import default_size

    class Screen:  # a 1366x768 laptop, its panel taking 32 px
        def availableGeometry(self):
            from PySide6.QtCore import QRect

            return QRect(0, 0, 1366, 736)

    size = default_size(Screen())
    assert size.width() <= 1366 and size.height() <= 736 - 40  # room for the window's own frame
    assert default_size(None) == QSize(1360, 820)


def test_a_long_status_message_stays_on_one_line(qtbot, window):
    window.resize(1024, 700)
    qtbot.waitUntil(lambda: window.size() == QSize(1024, 700), timeout=WAIT)
    bar, hint = window.statusBar().height(), window.minimumSizeHint()
    long = "could not compare the text: " + "a reason that goes on and on " * 30
    window.controller.show_error(long)
    qtbot.wait(50)
    label = window.message_label
    assert label.text() == long and label.toolTip() == long  # the whole message, on hover
    assert window.statusBar().height() == bar and window.minimumSizeHint() == hint
    assert window.size() == QSize(1024, 700)
    assert label.width() <= window.width()


def test_the_chart_heading_reads_small_and_greedy_probabilities_right(qtbot, window):
    step(qtbot, window)  # greedy: the heading gives the probability greedy chose from, not 1.000
    window.token_view.click_step(0)
    qtbot.waitUntil(lambda: window.chart.flush() or window.chart.title.text().startswith("Step 1"), timeout=WAIT)
    title = window.chart.title.text()
    shown = window.token_view.step(0)
    before = shown.candidates.stages[-2][1][shown.candidates.token_ids.index(shown.token_id)]
    assert f"greedy, p {before:.3f} before it" in title and "p 1.000" not in title
    window.controller.reset()
    window.controls.temperature.setValue(1.0)
    step(qtbot, window)
    window.token_view.select(-1)
    qtbot.waitUntil(lambda: window.chart.flush() or bool(window.chart.shown()), timeout=WAIT)
    rare = window.chart.shown()[-1]  # the least likely bar: click it, then read the step's heading
    wait_idle_after(qtbot, window, lambda: click_bar(qtbot, window, len(window.chart.shown()) - 1))
    window.token_view.click_step(1)
    qtbot.waitUntil(lambda: window.chart.flush() or window.chart.title.text().startswith("Step 2"), timeout=WAIT)
    assert rare[1] < 0.001 and "p 0.000" not in window.chart.title.text(), window.chart.title.text()


def test_a_new_run_clears_what_the_last_command_said(qtbot, window, tmp_path):
    step(qtbot, window)
    window.export_trace(tmp_path / "t.json")
    assert window.message_label.text().startswith("Exported")
    generate(qtbot, window)
    assert not window.message_label.text().startswith("Exported")
