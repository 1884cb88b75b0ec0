"""The Inside views readable on a 30-layer model: SmolLM2 (30 layers x 9 heads) in the numpy engine."""

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QLabel

import engine
from playground.inside.head_map import head_statistic, per_layer
from playground.inside.lens_grid import CELL_ALPHA
from playground.inside.panel import InsidePanel
from playground.palette import colour

TEXT = "The cat sat on the mat because it was tired, and the dog"
LONG = "<filename>reallylongtoken"


@pytest.fixture(scope="module")
def smol():
    """(view, position_tokens, grid_tokens) of TEXT read by SmolLM2; one lens cell's token made long."""
    model = engine.load_model("smollm2", backend="numpy")
    ids = model.tokenizer.encode(TEXT)
    view = engine.inside_view(model, ids)
    position_tokens = [model.tokenizer.decode([i]) for i in ids]
    grid_tokens = [[model.tokenizer.decode([int(i)]) for i in row] for row in view.grid_top]
    grid_tokens[5][-1] = LONG
    return view, position_tokens, grid_tokens


@pytest.fixture
def panel(qtbot, smol):
    widget = InsidePanel()
    qtbot.addWidget(widget)
    widget.resize(420, 1000)
    widget.show_view(smol[0], "after ' dog'", smol[1], smol[2], None, None)
    widget.show()
    qtbot.waitExposed(widget)
    qtbot.wait(20)  # the grid scrolls to its newest positions once laid out
    return widget


def test_the_lens_grid_elides_long_tokens_on_the_right_with_the_whole_text_in_the_tooltip(panel, smol):
    view = smol[0]
    grid = panel.lens
    assert grid.rowCount() == 31 and view.attention.shape[:2] == (30, 9)
    last = grid.columnCount() - 1
    cell = grid.item(5, last)
    p = float(view.grid_p[5, -1])
    assert cell.text() == f"{LONG} {p:.2f}"
    assert grid.textElideMode() == Qt.TextElideMode.ElideRight
    assert grid.columnWidth(last) < grid.fontMetrics().horizontalAdvance(cell.text())  # too long: elided
    assert LONG in cell.toolTip() and f"p = {p:.3f}" in cell.toolTip() and "layer 5" in cell.toolTip()


def test_no_lens_column_is_cut_from_the_left(panel):
    grid = panel.lens
    assert grid.horizontalScrollBar().value() == grid.horizontalScrollBar().maximum() > 0  # scrolled to the end
    for column in range(grid.columnCount()):
        left = grid.columnViewportPosition(column)
        if left + grid.columnWidth(column) > 0:  # seen, wholly or in part
            assert left >= 0, f"column {column} starts {-left} px left of the grid's edge"


def test_the_lens_cells_take_the_palettes_colour_and_follow_a_change(panel, smol):
    p = float(smol[0].grid_p[3, 2])
    assert panel.lens.item(3, 2).background().color().getRgb() == (*colour(p, "cividis"), CELL_ALPHA)
    panel.set_palette("red to green")
    assert panel.lens.item(3, 2).background().color().getRgb() == (*colour(p, "red to green"), CELL_ALPHA)


def test_the_head_map_is_a_heat_map_of_every_head_with_a_colour_bar(panel, smol):
    attention = smol[0].attention
    head_map = panel.head_map
    assert child(panel, QComboBox, "headStatistic").currentText() == "entropy"
    assert child(panel, QCheckBox, "headPerLayer").isChecked()
    image = panel.grid_image()
    assert image.shape == (30, 9)  # a cell per layer and head
    np.testing.assert_allclose(image, per_layer(head_statistic(attention, "entropy")), rtol=1e-6)
    assert np.allclose(image.min(axis=1), 0) and np.allclose(image.max(axis=1), 1)  # each layer's heads spread
    bars = [item for item in head_map.plot.scene().items() if isinstance(item, pg.ColorBarItem)]
    assert bars == [head_map.colour_bar] and head_map.colour_bar.isVisible()
    assert head_map.colour_bar.levels() == (0.0, 1.0)


def test_per_layer_scaling_changes_the_picture(panel, smol):
    attention = smol[0].attention
    scaled = panel.grid_image().copy()
    child(panel, QCheckBox, "headPerLayer").setChecked(False)
    raw = panel.grid_image()
    np.testing.assert_allclose(raw, head_statistic(attention, "entropy"), rtol=1e-6)
    assert not np.allclose(raw, scaled)
    assert panel.head_map.colour_bar.levels() == pytest.approx((float(raw.min()), float(raw.max())))
    child(panel, QComboBox, "headStatistic").setCurrentText("peak weight")
    np.testing.assert_allclose(panel.grid_image(), attention.max(axis=-1), rtol=1e-6)


def test_a_click_on_a_cell_picks_its_head_and_says_its_numbers(qtbot, panel, smol):
    attention = smol[0].attention
    x, y = panel.head_map.point_of(11, 2)
    point = panel.grid.mapFromScene(panel.image.mapToScene(QPointF(x, y)))
    with qtbot.waitSignal(panel.headChosen) as picked:
        qtbot.mouseClick(panel.grid.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert picked.args == [11, 2]
    weights = attention[11, 2]
    entropy = float(-(weights * np.log(weights)).sum())
    text = child(panel, QLabel, "headCellNumbers").text()
    assert text.startswith(f"layer 12 head 3: entropy {entropy:.2f} nats · peak {float(weights.max()):.2f}")


def child(panel, kind, name):
    found = panel.findChild(kind, name)
    assert found is not None, name
    return found


def test_the_window_on_smollm2_shows_every_layer_and_head_readably(qtbot, prefs, smol):
    """The real window on SmolLM2 (numpy), driven by keys: Alt+5 brings Inside forward, Ctrl+Right steps."""
    from conftest import shown_window
    from test_window_shortcuts import press

    win = shown_window(qtbot, engine.load_model("smollm2", backend="numpy"), prefs)
    win.controls.prompt.setPlainText("The cat sat on the")
    press(qtbot, win, "Alt+5")
    assert win.inside_panel.isVisible()
    with qtbot.waitSignal(win.controller.inside.shown, timeout=60000) as done:
        press(qtbot, win, "Ctrl+Right")
    assert done.args[0].view.attention.shape[:2] == (30, 9)
    assert win.inside_panel.lens.rowCount() == 31
    assert win.inside_panel.grid_image().shape == (30, 9) and win.inside_panel.head_map.colour_bar.isVisible()
    heads = win.inside_panel.grid_image()
    assert (heads.max(axis=1) - heads.min(axis=1) > 0.99).all()  # in every layer the heads span the scale
    win.close()
