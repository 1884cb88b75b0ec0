"""The Steer panel (playground/steer/): a person types two lists of texts, makes a direction, sees the next token
before and after it, steers the session with it and saves it, in the real window on the story model (offscreen)."""

import numpy as np
import pytest
from test_window import generate, type_prompt
from test_window_inside import select

import engine

WAIT = 60000


def make_direction(qtbot, window, positive, negative):
    panel = window.steer_panel
    panel.positive.setPlainText("\n".join(positive))
    panel.negative.setPlainText("\n".join(negative))
    panel.make_button.click()
    qtbot.waitUntil(panel.steer_button.isEnabled, timeout=WAIT)


def test_a_direction_steers_the_next_token_and_is_saved(qtbot, window, tmp_path):
    panel = window.steer_panel
    window.docks.by_name["steerDock"].raise_()
    layers = window.model.residual_shape[0]
    assert panel.last_layer.maximum() == layers and not panel.steer_button.isEnabled()  # no direction yet
    type_prompt(qtbot, window, "mia has a red ball. ben goes to the park. ben has")
    window.controls.max_tokens.setValue(1)
    generate(qtbot, window)  # the next token: a colour
    make_direction(qtbot, window, ["mia has a red ball.", "ben has a red cup."],
                   ["mia has a blue ball.", "ben has a blue cup."])  # fmt: skip
    assert "made from 2 + 2 texts" in panel.status.text()
    panel.strength.setValue(40)  # +4.0
    session = window.session()
    before, after = engine.steering_preview(window.model, session.ids, window.controller.worker.steer.vector,
                                            panel.layers(), 4.0)  # fmt: skip
    top = after.argsort()[::-1][:10]
    expected = [(round(float(before[i]), 6), round(float(after[i]), 6)) for i in top]
    qtbot.waitUntil(lambda: [(round(b, 6), round(a, 6)) for _, b, a in panel.shown()] == expected, timeout=WAIT)
    assert max(abs(b - a) for b, a in expected) > 0.02  # a person sees what the direction does

    assert not panel.stop_button.isEnabled()  # nothing to stop yet (issue 43, item 8)
    panel.steer_button.click()
    qtbot.waitUntil(lambda: "Steering with strength +4.0" in panel.status.text(), timeout=WAIT)
    assert window.session().vector_steering is not None and panel.stop_button.isEnabled()
    assert window.session().actions[-1]["kind"] == "vector"
    # the Inside tab reads the stream under the direction: its lens ends with the steered next token's distribution
    with qtbot.waitSignal(window.controller.inside.shown, timeout=WAIT) as done:
        window.show_panel(window.inside_panel)
    session = window.session()
    steered = engine.inside_view(window.model, session.ids, residual_add=session.residual_table)
    assert np.array_equal(done.args[0].view.probs, steered.probs)
    assert np.allclose(done.args[0].view.probs[-1][list(top)], after[top], atol=1e-6)

    # the story model has one layer; llama.cpp's control-vector format has no slot for layer 0: said, nothing written
    path = tmp_path / "direction.gguf"
    with qtbot.waitSignal(window.controller.message, timeout=WAIT) as blocker:
        window.controller.steering.save_to(str(path))
    assert "could not save the direction" in blocker.args[0] and "layers 1 and up" in blocker.args[0]
    assert not path.exists()

    panel.stop_button.click()
    qtbot.waitUntil(lambda: panel.status.text().startswith("Not steering"), timeout=WAIT)
    assert window.session().vector_steering is None and not panel.stop_button.isEnabled()


def test_bad_prompts_say_what_was_wrong(qtbot, window):
    with qtbot.waitSignal(window.controller.message, timeout=WAIT) as blocker:
        window.steer_panel.make_button.click()  # both lists empty
    assert "could not make the direction" in blocker.args[0]
    assert not window.steer_panel.steer_button.isEnabled()


def test_no_control_or_sentence_is_cut_at_1024_by_700(qtbot, window):
    """Issue 43, item 5: the Steer tab's status text was cut top and bottom in a short dock; the column scrolls
    now, each line at its whole height, every button its whole width."""
    from PySide6.QtWidgets import QScrollArea

    window.resize(1024, 700)
    window.docks.by_name["steerDock"].raise_()
    panel = window.steer_panel
    make_direction(qtbot, window, ["mia has a red ball.", "ben has a red cup."],
                   ["mia has a blue ball.", "ben has a blue cup."])  # fmt: skip
    qtbot.wait(50)  # the layout settles
    status = panel.status
    assert status.height() >= status.heightForWidth(status.width()) and "made from 2 + 2 texts" in status.text()
    scroll = panel.findChild(QScrollArea, "steerControlsScroll")
    for button in (panel.make_button, panel.steer_button, panel.stop_button):
        assert button.geometry().right() <= scroll.viewport().width()  # not clipped on the right


def test_the_inside_tab_reads_a_step_as_it_was_drawn(qtbot, window):
    """Issue 43, item 1: steer at +8, Generate, Stop steering, select a step: Inside's last row is the distribution
    the step was drawn from (the chart's numbers), and its title says it was read through the steering then."""
    panel = window.steer_panel
    window.docks.by_name["steerDock"].raise_()
    type_prompt(qtbot, window, "mia has a red ball. ben goes to the park. ben has")
    window.controls.max_tokens.setValue(1)
    generate(qtbot, window)
    make_direction(qtbot, window, ["mia has a red ball.", "ben has a red cup."],
                   ["mia has a blue ball.", "ben has a blue cup."])  # fmt: skip
    panel.strength.setValue(80)  # +8.0
    panel.steer_button.click()
    qtbot.waitUntil(lambda: "Steering with strength +8.0" in panel.status.text(), timeout=WAIT)
    window.controls.max_tokens.setValue(8)
    generate(qtbot, window)
    panel.stop_button.click()
    qtbot.waitUntil(lambda: panel.status.text().startswith("Not steering"), timeout=WAIT)
    session = window.session()
    assert session.vector_steering is None and len(session.steps) == 9

    window.show_panel(window.inside_panel)
    for index in (1, 5):  # drawn under the direction
        step = session.steps[index]
        with qtbot.waitSignal(window.controller.inside.shown, timeout=WAIT,
                              check_params_cb=lambda shown, at=index: shown.key[1] == at) as done:  # fmt: skip
            select(window, index)
        shown = done.args[0]
        assert shown.view.probs[-1][step.token_id] == pytest.approx(step.model_probability, abs=1e-5)
        assert "read through the steering vector in force when it was drawn" in shown.title
        plain = engine.inside_view(window.model, session.ids[: len(session.prompt_ids) + index])
        assert abs(plain.probs[-1][step.token_id] - step.model_probability) > 0.01  # the steering did change it
    with qtbot.waitSignal(window.controller.inside.shown, timeout=WAIT,
                          check_params_cb=lambda shown: shown.key[1] == 0) as done:  # fmt: skip
        select(window, 0)  # drawn before the steering began: read as trained, and said so by saying nothing
    assert "read through" not in done.args[0].title
    assert done.args[0].view.probs[-1][session.steps[0].token_id] == pytest.approx(
        session.steps[0].model_probability, abs=1e-5
    )


@pytest.mark.parametrize("size", [(1024, 700), (1366, 768)])
def test_the_before_after_chart_fits_its_bars_wherever_it_was_drawn(qtbot, window, size):
    """Issue 43, item 5: the chart kept a 0-0.04 axis (the range of no bars) while its bars reached 0.27, and a key
    drawn over the plot hid the short bars: the axes fit the bars whenever the chart is drawn or shown (here the
    preview comes while the Steer tab is behind another), and the key sits above the plot, whole."""
    import pyqtgraph as pg
    from PySide6.QtWidgets import QLabel

    window.resize(*size)
    window.docks.by_name["steerDock"].raise_()
    panel = window.steer_panel
    assert panel.chart.viewRange()[0][1] < 0.06  # no bars yet
    make_direction(qtbot, window, ["mia has a red ball.", "ben has a red cup."],
                   ["mia has a blue ball.", "ben has a blue cup."])  # fmt: skip
    window.docks.by_name["rulesDock"].raise_()  # the Steer tab behind another while the bars come
    type_prompt(qtbot, window, "mia has a red ball. ben goes to the park. ben has")
    window.controls.max_tokens.setValue(1)
    generate(qtbot, window)
    qtbot.waitUntil(lambda: len(panel.shown()) == 10, timeout=WAIT)
    window.docks.by_name["steerDock"].raise_()
    qtbot.wait(50)
    longest = max(max(before, after) for _, before, after in panel.shown())
    assert longest > 0.2
    (left, right), (top, bottom) = panel.chart.viewRange()
    assert left == 0 and longest < right < longest * 1.25 and top <= -0.4 and bottom >= 9.4
    box = panel.chart.getPlotItem().vb.sceneBoundingRect().adjusted(-1, -1, 1, 1)
    for bars in (panel.before, panel.after):
        assert box.contains(bars.mapRectToScene(bars.boundingRect())), "a bar is cut"
    assert not [item for item in panel.chart.getPlotItem().items if isinstance(item, pg.LegendItem)]
    key = panel.findChild(QLabel, "steerChartKey")
    assert key.isVisible() and key.heightForWidth(key.width()) <= key.height()
