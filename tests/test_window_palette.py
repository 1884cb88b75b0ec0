"""The colour palette setting on the real window: a colour-blind-safe default, the old scale selectable from
View > Colour palette, remembered across launches, and cues that do not rely on colour."""

from conftest import shown_window
from PySide6.QtGui import QAction, QFont
from PySide6.QtWidgets import QLabel
from test_window import child, step

from playground.palette import colour
from playground.widgets.token_colours import COLOR_LEVELS, colour_level


def background(win, index):
    return win.token_view.format_at(index).background().color().getRgb()[:3]


def expected(win, index, palette):
    level = colour_level(win.token_view.steps()[index], "drawn probability")
    return colour(round(level * COLOR_LEVELS) / COLOR_LEVELS, palette)


def palette_action(win, name) -> QAction:
    found = win.findChild(QAction, f"palette:{name}")
    assert found is not None, name
    return found


def test_tokens_start_on_cividis_and_the_menu_switches_to_the_old_scale_remembered(qtbot, story_model, prefs):
    win = shown_window(qtbot, story_model, prefs)
    for _ in range(3):
        step(qtbot, win)
    assert [background(win, i) for i in range(3)] == [expected(win, i, "cividis") for i in range(3)]
    assert palette_action(win, "cividis").isChecked()
    legend = child(win, QLabel, "legendLabel").text()
    palette_action(win, "red to green").trigger()
    assert [background(win, i) for i in range(3)] == [expected(win, i, "red to green") for i in range(3)]
    assert palette_action(win, "red to green").isChecked() and not palette_action(win, "cividis").isChecked()
    assert child(win, QLabel, "legendLabel").text() != legend  # the legend's swatches follow
    win.close()
    again = shown_window(qtbot, story_model, prefs)
    assert again.token_view.palette_name == "red to green" and palette_action(again, "red to green").isChecked()
    assert again.inside_panel.lens.palette_name == "red to green"
    again.close()


def test_a_remembered_palette_the_window_does_not_know_starts_on_the_default(qtbot, story_model, prefs):
    prefs.setValue("palette", "purple")
    win = shown_window(qtbot, story_model, prefs)
    assert win.token_view.palette_name == "cividis"
    assert "colour palette" in win.message_label.toolTip() + win.message_label.text()
    win.close()


def test_a_forced_token_is_marked_by_weight_and_underline_not_colour_alone(qtbot, story_model, prefs):
    win = shown_window(qtbot, story_model, prefs)
    step(qtbot, win)
    win.chart.flush()
    win.chart.click_row(2)
    step(qtbot, win)
    forced = win.token_view.format_at(1)
    assert win.token_view.steps()[1].source == "forced"
    assert forced.fontWeight() == QFont.Weight.Bold and forced.fontUnderline()
    assert "probability" in win.token_view.tooltip_html(1)  # the number, not only its colour
    win.close()


def test_the_tokens_tooltip_gives_the_number_of_each_colour_mode(qtbot, story_model, prefs):
    win = shown_window(qtbot, story_model, prefs)
    step(qtbot, win)
    first = win.token_view.steps()[0]
    tip = win.token_view.tooltip_html(0)
    assert f"probability {first.probability:.4f}" in tip and f"rank {first.model_rank}" in tip
    assert f"surprisal {first.surprisal:.2f} nats" in tip and f"entropy {first.entropy:.2f} nats" in tip
    win.close()
