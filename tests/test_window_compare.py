"""Two models in the window (issue 15): a second model reads the text in the view, the comparison panel shows
the log-ratio per token, the KL divergence where both read the same ids, and the spans where they disagree
most; a click selects the span's token; the comparison follows the text as it changes; a second model that
fails to load, or cannot read the text, is said and nothing is lost. Real window, real models, offscreen."""

import numpy as np
from conftest import shown_window
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel, QListWidget, QPushButton, QWidget
from test_window import WAIT, child, generate, type_prompt

import engine

STORY = {"source": None}  # the story model, as the picker asks for it


def compared(qtbot, win, request):
    with qtbot.waitSignal(win.controller.comparing.shown, timeout=WAIT) as blocker:
        win.controller.comparing.compare_with(request)
    return blocker.args[0]


def story_text(qtbot, win):
    type_prompt(qtbot, win, "mia has a red ball.")
    win.controls.temperature.setValue(1.0)
    win.controls.seed.setValue(3)
    generate(qtbot, win)
    return win.token_view.whole_text()


def test_a_model_against_itself_shows_no_disagreement(qtbot, window):
    text = story_text(qtbot, window)
    assert child(window, QAction, "compareModelAction").isEnabled()
    panel = child(window, QWidget, "comparisonPanel")
    assert not panel.isVisible()  # until a comparison is made
    comparison = compared(qtbot, window, STORY)
    assert panel.isVisible() and comparison.text == text
    assert comparison.note == "" and comparison.divergence is not None  # one tokenizer, every token's score
    np.testing.assert_array_equal(panel.log_ratios[1:], 0)
    assert np.nanmax(panel.divergences) < 1e-6
    heights = panel.bars.opts["height"]
    assert len(heights) == len(comparison.per_token) and not np.any(heights)
    steps = len(comparison.first.steps)
    assert f"same top token at {steps} of {steps} positions" in child(window, QLabel, "comparisonSummary").text()


def test_two_tokenizers_compare_spans_and_a_click_selects_the_token(qtbot, window):
    story_text(qtbot, window)
    comparison = compared(qtbot, window, {"source": engine.smollm2_path(), "backend": "numpy"})
    panel = child(window, QWidget, "comparisonPanel")
    assert comparison.ranks is None and "different tokens" in comparison.note
    assert "different tokens" in child(window, QLabel, "comparisonSummary").text()
    ratios = [np.nan if v is None else v for v in comparison.per_token]
    np.testing.assert_array_equal(panel.log_ratios, ratios)
    rows = child(window, QListWidget, "disagreementList")
    worst = comparison.disagreements(10)
    assert rows.count() == len(worst) and f"{worst[0].log_ratio:+6.2f}" in rows.item(0).text()
    view = window.token_view
    # a row: the step that ends the span is selected (a span inside the prompt is said instead)
    index = next(i for i, span in enumerate(worst) if view.step_at_byte(span.end - 1) >= 0)
    rect = rows.visualItemRect(rows.item(index))
    qtbot.mouseClick(rows.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    expected = view.step_at_byte(worst[index].end - 1)
    assert view.selected == expected
    # a bar: the step holding that token's last byte
    token = len(comparison.token_offsets) - 2
    point = panel.plot.mapFromScene(panel.bar_scene_position(token))
    qtbot.mouseClick(panel.plot.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(point.x(), point.y()))
    assert view.selected == view.step_at_byte(comparison.token_offsets[token][1] - 1)
    assert "log-ratio" in panel.hover_text(token) and repr(panel.token_text(token))[1:-1] in panel.hover_text(token)


def test_the_comparison_follows_inserted_text(qtbot, window):
    story_text(qtbot, window)
    compared(qtbot, window, STORY)
    window.insert_edit.setText(" ben has a blue kite.")
    with qtbot.waitSignal(window.controller.comparing.shown, timeout=WAIT) as blocker:
        qtbot.mouseClick(child(window, QPushButton, "insertButton"), Qt.MouseButton.LeftButton)
    assert blocker.args[0].text == window.token_view.whole_text()
    assert " ben has a blue kite." in blocker.args[0].text


def test_a_second_model_that_fails_to_load_changes_nothing(qtbot, window, tmp_path):
    story_text(qtbot, window)
    first = compared(qtbot, window, STORY)
    steps = window.token_view.step_count()
    broken = tmp_path / "cut.gguf"
    broken.write_bytes(b"GGUF\x03\x00\x00\x00")  # a header cut short
    with qtbot.waitSignal(window.controller.comparing.failed, timeout=WAIT) as blocker:
        window.controller.comparing.compare_with({"source": str(broken)})
    assert blocker.args[0].startswith("could not open the second model:")
    assert child(window, QLabel, "messageLabel").text() == blocker.args[0]
    assert window.token_view.step_count() == steps  # the session is as it was
    panel = child(window, QWidget, "comparisonPanel")
    assert panel.isVisible() and panel.comparison is first  # and the comparison shown, with its model
    type_prompt(qtbot, window, "ben has a blue kite.")
    generate(qtbot, window)  # the first model goes on
    assert window.token_view.step_count() > 0 and window.token_view.whole_text().startswith("ben has a blue kite.")


def test_a_second_model_that_cannot_read_the_text_is_named(qtbot, prefs):
    win = shown_window(qtbot, engine.load_model("smollm2", backend="numpy"), prefs)
    with qtbot.waitSignal(win.controller.scoring.textScored, timeout=WAIT):
        win.controller.scoring.score_text("The Capital of France is Paris.")
    with qtbot.waitSignal(win.controller.comparing.failed, timeout=WAIT) as blocker:
        win.controller.comparing.compare_with(STORY)
    assert "story model cannot read this text: 'T' at position 0" in blocker.args[0]
    assert win.token_view.whole_text() == "The Capital of France is Paris."  # the scored text stays
    assert not child(win, QWidget, "comparisonPanel").isVisible()
    assert win.controller.worker.compare.second_model is None  # the model that could not read it is not kept
    win.close()


def test_nothing_to_compare_is_said(window):
    window.controller.comparing.compare_with(STORY)
    assert "Nothing to compare yet" in child(window, QLabel, "messageLabel").text()


def test_reset_clears_the_comparison_and_the_next_text_brings_it_back(qtbot, window):
    story_text(qtbot, window)
    compared(qtbot, window, STORY)
    panel = child(window, QWidget, "comparisonPanel")
    qtbot.mouseClick(child(window, QPushButton, "resetButton"), Qt.MouseButton.LeftButton)
    assert panel.comparison is None and child(window, QListWidget, "disagreementList").count() == 0
    assert not panel.bars.isVisible() and len(panel.log_ratios) == 0  # nothing left of the old text to click
    type_prompt(qtbot, window, "ben has a blue kite.")
    with qtbot.waitSignal(window.controller.comparing.shown, timeout=WAIT) as blocker:
        generate(qtbot, window)
    assert blocker.args[0].text == window.token_view.whole_text()


def test_a_comparison_that_arrives_after_close_is_dropped(qtbot, window):
    story_text(qtbot, window)
    comparison = compared(qtbot, window, STORY)
    comparing, panel = window.controller.comparing, child(window, QWidget, "comparisonPanel")
    qtbot.mouseClick(child(window, QPushButton, "closeComparisonButton"), Qt.MouseButton.LeftButton)
    assert not panel.isVisible()
    comparing._on_compared(comparison, window.controller.model)  # a result the worker sent before Close
    assert not panel.isVisible() and comparing.second_name is None
    qtbot.waitUntil(lambda: window.controller.worker.compare.second_model is None, timeout=WAIT)


def test_the_legend_keeps_each_entry_whole_at_1024_by_700_and_a_restart_shows_no_blank_panel(qtbot, story_model,
                                                                                            prefs):  # fmt: skip
    """Issue 43, item 6: the legend wrapped one word per line at 1024x700; after a restart a blank, untitled Compare
    panel showed in front."""
    from PySide6.QtCore import QSize

    win = shown_window(qtbot, story_model, prefs)
    win.resize(QSize(1024, 700))
    qtbot.wait(60)
    story_text(qtbot, win)
    compared(qtbot, win, STORY)
    qtbot.wait(60)
    title = child(win, QLabel, "comparisonTitle")
    entries = [
        "log\xa0p(first)\xa0−\xa0log\xa0p(second)",
        "▮\xa0story\xa0model\xa0(built\xa0in)\xa0likelier",
        "━\xa0KL\xa0divergence",
    ]
    plain = title.text().replace("&nbsp;", "\xa0")
    assert all(entry in plain for entry in entries), plain  # each entry breaks nowhere inside
    widest = max(title.fontMetrics().horizontalAdvance(entry) for entry in entries) * 1.2  # (bold: a little more)
    assert title.width() > widest and title.width() > win.comparison_panel.width() * 0.9  # the dock's whole width
    assert title.heightForWidth(title.width()) <= title.height()  # its lines whole
    assert win.docks.by_name["compareDock"].isVisible()
    win.close()
    again = shown_window(qtbot, story_model, prefs)
    qtbot.wait(60)
    assert not again.docks.by_name["compareDock"].isVisible()  # a comparison is not kept: no blank panel
    again.docks.show(again.comparison_panel)  # View > Compare: the panel says what it is and how to make one
    qtbot.wait(30)
    assert child(again, QLabel, "comparisonTitle").text() == "<b>Compare</b>"
    assert "File > Compare with a second model" in child(again, QLabel, "comparisonSummary").text()
    again.close()
