"""The window's layout as a person sees it: the text in the centre, every other view a dock listed in the View
menu, nothing clipped at 1024x700 or 1600x1000, and the layout kept across launches (and reset on request)."""

import pyqtgraph as pg
import pytest
from conftest import shown_window
from PySide6.QtCore import QByteArray, QSize, Qt
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSpinBox,
    QComboBox,
    QDockWidget,
    QLabel,
    QLineEdit,
    QScrollArea,
    QStyle,
    QStyleOptionComboBox,
)
from test_window import generate, step

import engine
from playground import MainWindow
from playground.widgets.eliding_combo import ElidingComboBox

DOCKS = ("chartDock", "samplersDock", "rulesDock", "chatDock", "seedsDock", "treeDock", "insideDock", "steerDock", "compareDock",
         "stripDock")  # fmt: skip
SIZES = (QSize(1024, 700), QSize(1366, 768), QSize(1600, 1000))


def dock(window, name: str) -> QDockWidget:
    found = window.findChild(QDockWidget, name)
    assert found is not None, name
    return found


def seen(widget) -> bool:
    """Shown and not behind another tab (a widget in a dock stacked behind another is 'visible' to Qt)."""
    return widget.isVisible() and not widget.visibleRegion().isEmpty()


def combo_need(combo: QComboBox) -> int:
    """The width that shows the combo box's current text whole (its sizeHint may be a few characters'); for a
    combo box that elides its text in the middle, its sizeHint (the whole text is in its tooltip)."""
    if isinstance(combo, ElidingComboBox):
        assert combo.currentText() in combo.toolTip()
        return combo.sizeHint().width()
    option = QStyleOptionComboBox()
    combo.initStyleOption(option)
    text = QSize(combo.fontMetrics().horizontalAdvance(combo.currentText()), combo.fontMetrics().height())
    return combo.style().sizeFromContents(QStyle.ContentsType.CT_ComboBox, option, text, combo).width()


def edit_need(edit: QLineEdit) -> int:
    """A text field (not a spin box's or a combo's) is at least ten characters wide: a field that shows 'T...'
    cannot be read nor typed into."""
    return edit.fontMetrics().averageCharWidth() * 10


def clipped(window) -> list[str]:
    """The labels, buttons, combo boxes and text fields a person sees that are narrower than their content needs:
    any of them narrower than its minimumSizeHint, a label that neither wraps nor elides narrower than its text
    (sizeHint), a combo box narrower than its current text, a text field narrower than ten characters."""
    cut = []
    for edit in window.findChildren(QLineEdit):
        if seen(edit) and not isinstance(edit.parentWidget(), (QAbstractSpinBox, QComboBox)):
            if edit.width() < edit_need(edit):
                cut.append(f"{edit.objectName()!r} {edit.width()} < {edit_need(edit)}")
    for combo in window.findChildren(QComboBox):
        if seen(combo) and combo.width() < combo_need(combo):
            cut.append(f"{combo.objectName() or combo.currentText()!r} {combo.width()} < {combo_need(combo)}")
    for kind in (QLabel, QAbstractButton, QComboBox):
        for widget in window.findChildren(kind):
            if not seen(widget) or widget.width() == 0:
                continue
            need = widget.minimumSizeHint().width()
            whole_text = isinstance(widget, QLabel) and not widget.wordWrap() and type(widget) is QLabel
            if whole_text and widget.text() and widget.pixmap().isNull():
                need = max(need, widget.sizeHint().width())
            if widget.width() < need:
                name = widget.objectName() or getattr(widget, "text", lambda: "")() or type(widget).__name__
                cut.append(f"{name!r} {widget.width()} < {need}")
    return cut


def settle(qtbot, window, size: QSize) -> None:
    window.resize(size)
    qtbot.wait(60)
    assert window.size() == size  # the window keeps within the size: nothing asks it to grow


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s.width()}x{s.height()}")
def test_nothing_is_clipped_in_the_default_layout_nor_with_any_dock_in_front(qtbot, window, size):
    settle(qtbot, window, size)
    assert clipped(window) == []
    for name in DOCKS:
        shown = dock(window, name)
        window.show_panel(shown.widget() if name in ("chartDock", "compareDock", "stripDock", "samplersDock", "insideDock",
                                                            "steerDock", "chatDock")
                          else shown.widget().widget())  # fmt: skip
        qtbot.wait(30)
        assert seen(shown) and window.size() == size, name
        assert clipped(window) == [], name


def test_the_text_is_the_centre_and_every_other_view_is_a_dock(window):
    assert window.centralWidget().isAncestorOf(window.token_view)
    assert window.centralWidget().isAncestorOf(window.controls)
    for panel in (window.chart, window.rules_panel, window.seeds_panel, window.tree_panel, window.inside_panel,
                  window.comparison_panel, window.uncertainty_strip, window.sampler_scroll):  # fmt: skip
        assert not window.centralWidget().isAncestorOf(panel)
        assert any(dock(window, name).isAncestorOf(panel) for name in DOCKS)


def test_every_dock_is_shown_and_hidden_through_the_view_menu(qtbot, window):
    view = next(a.menu() for a in window.menuBar().actions() if a.text().replace("&", "") == "View")
    listed = {action.objectName(): action for action in view.actions()}
    for name in DOCKS:
        toggle = listed[f"{name}Action"]
        assert toggle is dock(window, name).toggleViewAction()
        if not toggle.isChecked():  # the comparison's dock starts hidden
            toggle.trigger()
            assert not dock(window, name).isHidden()
        toggle.trigger()
        qtbot.wait(10)
        assert dock(window, name).isHidden() and not toggle.isChecked(), name
        toggle.trigger()
        qtbot.wait(10)
        assert not dock(window, name).isHidden() and toggle.isChecked(), name
    assert "resetLayoutAction" in listed


def test_the_layout_is_kept_across_launches_and_reset_on_request(qtbot, story_model, prefs):
    first = shown_window(qtbot, story_model, prefs)
    first.resize(1200, 800)
    dock(first, "treeDock").setFloating(True)
    dock(first, "rulesDock").hide()
    first.show_panel(first.inside_panel)
    first.close()
    second = shown_window(qtbot, story_model, prefs)
    qtbot.wait(30)
    assert second.size() == QSize(1200, 800)
    assert dock(second, "treeDock").isFloating() and dock(second, "rulesDock").isHidden()
    assert second.panel_shown(second.inside_panel) and not second.panel_shown(second.seeds_panel)
    assert second.message_label.text() == ""
    second.reset_layout_action.trigger()
    qtbot.wait(30)
    assert not dock(second, "treeDock").isFloating() and not dock(second, "rulesDock").isHidden()
    assert second.panel_shown(second.rules_panel) and dock(second, "compareDock").isHidden()
    second.close()


@pytest.mark.parametrize("state", ["not a layout", QByteArray(b"\x00\x00\x00\xff garbage"), 12])
def test_a_layout_the_window_cannot_read_is_ignored_with_a_note(qtbot, story_model, prefs, state):
    prefs.setValue("windowState", state)
    win = MainWindow(model=story_model, settings=prefs)
    qtbot.addWidget(win)
    assert "layout" in win.message_label.text()
    assert not dock(win, "rulesDock").isHidden() and dock(win, "compareDock").isHidden()
    win.close()


def cut_chart_labels(chart) -> list[str]:
    """The chart's token labels that reach past the plot's left edge (a person reads 'pulation'), and its values
    that reach past the right edge ('0.99' for 0.999)."""
    box = chart.plot.getPlotItem().vb.sceneBoundingRect()
    tokens = [item for item in chart._tokens if item.sceneBoundingRect().left() < box.left() - 0.5]
    values = [item for item in chart._values if item.sceneBoundingRect().right() > box.right() + 0.5]
    return [item.textItem.toPlainText() for item in tokens + values if item.textItem.toPlainText()]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s.width()}x{s.height()}")
def test_the_charts_token_labels_are_whole_on_a_model_with_long_tokens(qtbot, smollm2_llamacpp, prefs, size):
    win = shown_window(qtbot, smollm2_llamacpp, prefs)
    settle(qtbot, win, size)
    win.controls.prompt.setPlainText("The city's population grew as the municipality's administration")
    step(qtbot, win)
    win.chart.flush()
    qtbot.wait(30)
    assert max(len(label) for label in win.chart.labels()) >= 8  # long tokens to show
    assert cut_chart_labels(win.chart) == []
    win.close()


def test_the_charts_value_beside_a_full_bar_is_whole_in_the_narrow_default_chart(qtbot, window):
    settle(qtbot, window, QSize(1024, 700))
    generate(qtbot, window)
    window.token_view.click_step(3)  # ' the' after "mia goes to": p 0.999
    window.chart.flush()
    qtbot.wait(30)
    assert window.chart.value_texts()[0] == "0.999"
    assert cut_chart_labels(window.chart) == []


def cut_plot_texts(window) -> list[str]:
    """The texts drawn inside a plot a person sees (a hint, a label) that reach past the plot's box, in its
    width or its height: pyqtgraph draws them unclipped over the axes, or the dock's edge cuts them."""
    cut = []
    for plot in window.findChildren(pg.PlotWidget):
        if not seen(plot.viewport()):  # (a graphics view's own region is empty: its viewport draws)
            continue
        box = plot.getPlotItem().vb.sceneBoundingRect().adjusted(-0.5, -0.5, 0.5, 0.5)
        for item in plot.getPlotItem().vb.addedItems:
            if isinstance(item, pg.TextItem) and item.isVisible() and item.textItem.toPlainText():
                if not box.contains(item.sceneBoundingRect()):
                    cut.append(
                        f"{plot.objectName() or plot.parentWidget().objectName()}: {item.textItem.toPlainText()!r}"
                    )
    return cut


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s.width()}x{s.height()}")
def test_the_uncertainty_strips_hint_is_whole_before_anything_is_generated(qtbot, window, size):
    settle(qtbot, window, size)
    window.show_panel(window.uncertainty_strip)
    qtbot.wait(30)
    strip = window.uncertainty_strip
    assert strip.empty_hint.isVisible() and seen(strip.plot.viewport())
    assert cut_plot_texts(window) == []
    assert "surprisal and entropy" in strip.empty_hint.textItem.toPlainText().replace("\n", " ")


LONG_NAME = "Meta-Llama-3.1-8B-Instruct-abliterated-uncensored-imatrix-calibrated.Q4_K_M.gguf"


@pytest.fixture(scope="module")
def long_named_model(tmp_path_factory):
    """SmolLM2 on llama.cpp, opened from a file with a long name (a link to the package's file)."""
    pytest.importorskip("llama_cpp")
    link = tmp_path_factory.mktemp("models") / LONG_NAME
    link.symlink_to(engine.smollm2_path())
    model = engine.load_model(str(link), backend="llama.cpp", threads=1, context_length=512)
    yield model
    model.close()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s.width()}x{s.height()}")
def test_a_long_model_name_is_elided_in_the_middle_and_whole_in_the_tooltip_and_the_list(qtbot, long_named_model,
                                                                                         prefs, size):  # fmt: skip
    win = shown_window(qtbot, long_named_model, prefs)
    settle(qtbot, win, size)
    picker = win.controls.model_picker
    whole = f"{LONG_NAME} — llama.cpp"
    assert picker.currentText() == whole
    assert clipped(win) == []
    assert picker.width() >= picker.sizeHint().width()
    shown = picker.shown_text()  # as painted: its start and its engine stay
    assert shown.startswith("Meta-Llama") and shown.endswith("llama.cpp") and "…" in shown
    assert whole in picker.toolTip()
    picker.showPopup()  # the list shows each line whole
    qtbot.waitUntil(lambda: picker.view().isVisible())
    assert picker.view().viewport().width() >= picker.view().sizeHintForColumn(0)
    picker.hidePopup()
    win.close()


def test_the_inside_dock_scrolls_its_numbers_under_a_title_that_stays(qtbot, window):
    settle(qtbot, window, QSize(1024, 700))
    generate(qtbot, window)
    with qtbot.waitSignal(window.controller.inside.shown, timeout=20000):
        window.show_panel(window.inside_panel)
    qtbot.wait(30)
    around, parent = [], window.inside_panel.parentWidget()
    while parent is not None:
        around += [parent] if isinstance(parent, QScrollArea) else []
        parent = parent.parentWidget()
    assert [area.objectName() for area in around if area.verticalScrollBar().maximum() > 0] == []
    inner = window.inside_panel.findChild(QScrollArea, "insideScroll")
    assert inner.verticalScrollBar().maximum() > 0  # the numbers scroll, under the title
    assert seen(window.inside_panel.title)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s.width()}x{s.height()}")
def test_every_dock_comes_back_as_it_was_left_and_every_text_is_whole_after_a_restart(qtbot, story_model, prefs,
                                                                                      size):  # fmt: skip
    """Issue 43, item 6: after a restart the Uncertainty dock shrank from ~410 to ~195 px (its hint cut), and a
    blank Compare panel showed in front."""
    first = shown_window(qtbot, story_model, prefs)
    settle(qtbot, first, size)
    generate(qtbot, first)
    first.resizeDocks([dock(first, "stripDock")], [size.width() * 2 // 5], Qt.Orientation.Horizontal)  # dragged
    first.resizeDocks([dock(first, "stripDock")], [size.height() * 2 // 5], Qt.Orientation.Vertical)
    qtbot.wait(60)
    left = {name: dock(first, name).geometry() for name in DOCKS if seen(dock(first, name))}
    first.close()
    for _ in range(2):  # restarted twice: what comes back is what is saved again
        second = shown_window(qtbot, story_model, prefs)
        qtbot.wait(60)
        assert second.size() == size
        back = {name: dock(second, name).geometry() for name in DOCKS if seen(dock(second, name))}
        assert back == left
        assert clipped(second) == [] and cut_plot_texts(second) == []
        second.close()


@pytest.mark.parametrize("saved, expected", [(QSize(1366, 768), QSize(1366, 768)), ("1366x768", QSize(1300, 700)),
                                             (QSize(10**6, 10**6), QSize(16384, 16384))])  # fmt: skip
def test_the_window_comes_back_at_the_size_it_was_left_even_where_its_geometry_loses_a_frame(qtbot, story_model,
                                                                                            prefs, saved, expected):  # fmt: skip
    """Under Xvfb (no window manager) restoreGeometry gave 1364x742 for a window left at 1366x768, a title bar's
    height less each launch: the inner size is kept too. A remembered size that is not one is ignored; one past
    any screen is bounded."""
    other = shown_window(qtbot, story_model, prefs)
    other.resize(1300, 700)
    qtbot.wait(30)
    geometry = other.saveGeometry()  # the geometry restoreGeometry would give back, smaller than what was left
    other.close()
    prefs.setValue("windowGeometry", geometry)
    prefs.setValue("windowSize", saved)
    again = shown_window(qtbot, story_model, prefs)
    qtbot.wait(30)
    assert again.size() == expected or (expected.width() == 16384 and again.size().boundedTo(expected) == again.size())
    again.close()
