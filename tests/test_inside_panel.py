"""The Inside tab's panel, alone, on a real InsideView of the shipped story model (1 layer, 8 heads)."""

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QLabel, QSlider, QTableWidget, QTextBrowser

import engine
from playground.inside.panel import InsidePanel, strip_map
from playground.token_text import shown

TEXT = "mia has a red ball. she goes to the park. now mia has the"


@pytest.fixture(scope="module")
def story(story_model):
    """(view, position_tokens, grid_tokens, chosen id) for TEXT; the chosen token is ' park'."""
    m = story_model
    ids = m.tokenizer.encode(TEXT)
    view = engine.inside_view(m, ids)
    position_tokens = [m.tokenizer.decode([i]) for i in ids]
    grid_tokens = [[m.tokenizer.decode([int(i)]) for i in row] for row in view.grid_top]
    (park,) = m.tokenizer.encode(" park")
    return view, position_tokens, grid_tokens, park


@pytest.fixture
def panel(qtbot, story):
    view, position_tokens, grid_tokens, park = story
    widget = InsidePanel()
    qtbot.addWidget(widget)
    widget.resize(420, 900)
    widget.show_view(view, "after ' the'", position_tokens, grid_tokens, park, " park")
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def child(panel, kind, name):
    found = panel.findChild(kind, name)
    assert found is not None, name
    return found


def test_the_lens_grid_shows_the_views_numbers(panel, story):
    view, position_tokens, grid_tokens, park = story
    grid = child(panel, QTableWidget, "lensGrid")
    layers, columns = view.grid_top.shape
    assert (layers, columns) == (2, 20)
    assert grid.rowCount() == layers
    assert grid.columnCount() == columns + 1  # + the chosen token's rank
    assert [grid.verticalHeaderItem(r).text() for r in range(layers)] == ["embedding", "layer 1 (the model)"]
    headers = [grid.horizontalHeaderItem(c).text() for c in range(columns + 1)]
    assert headers == [shown(position_tokens[p]) for p in view.grid_positions] + ["chosen's rank"]
    assert headers[-2] == "·the"  # the last position: the text's last token
    for row, column in ((0, 0), (1, 7), (1, columns - 1)):
        expected = f"{shown(grid_tokens[row][column])} {float(view.grid_p[row, column]):.2f}"
        assert grid.item(row, column).text() == expected
    ranks = view.ranks(park)
    assert [grid.item(r, columns).text() for r in range(layers)] == [str(int(k)) for k in ranks]
    assert grid.editTriggers() == QTableWidget.EditTrigger.NoEditTriggers  # read-only


def test_without_a_chosen_token_there_is_no_rank_column(qtbot, panel, story):
    view, position_tokens, grid_tokens, _ = story
    panel.show_view(view, "next token", position_tokens, grid_tokens, None, None)
    grid = child(panel, QTableWidget, "lensGrid")
    assert grid.columnCount() == view.grid_top.shape[1]
    assert "ranks" not in child(panel, QLabel, "insideLayerLabel").text()
    assert child(panel, QLabel, "insideTitle").text() == "next token"


def test_the_slider_starts_at_the_model_and_picks_a_lens_layer(qtbot, panel, story):
    view, position_tokens, grid_tokens, park = story
    slider = child(panel, QSlider, "insideLayer")
    label = child(panel, QLabel, "insideLayerLabel")
    ranks = view.ranks(park)
    assert (slider.minimum(), slider.maximum(), slider.value(), panel.layer()) == (0, 1, 1, 1)
    top = f"'{grid_tokens[1][-1]}' {float(view.probs[1].max()):.2f}"
    assert label.text() == f"layer 1 of 1 (the model): {top} · ' park' ranks {int(ranks[1])}"
    assert int(view.grid_top[1, -1]) == int(view.probs[1].argmax())  # the label's token is the lens's top
    with qtbot.waitSignal(panel.layerChosen) as picked:
        slider.setValue(0)
    assert picked.args == [0]
    assert panel.layer() == 0
    top = f"'{grid_tokens[0][-1]}' {float(view.probs[0].max()):.2f}"
    assert label.text() == f"embedding: {top} · ' park' ranks {int(ranks[0])}"
    with qtbot.assertNotEmitted(panel.layerChosen):  # a new view keeps the layer picked, quietly (issue 24)
        panel.show_view(view, "again", position_tokens, grid_tokens, park, " park")
    assert slider.value() == 0 and label.text().startswith("embedding: ")
    panel.new_model()  # another model: back to the model's own
    panel.show_view(view, "again", position_tokens, grid_tokens, park, " park")
    assert slider.value() == 1


def test_a_click_on_the_lens_grid_moves_the_slider(qtbot, panel):
    grid = child(panel, QTableWidget, "lensGrid")
    cell = grid.visualItemRect(grid.item(0, 3)).center()
    with qtbot.waitSignal(panel.layerChosen) as picked:
        qtbot.mouseClick(grid.viewport(), Qt.MouseButton.LeftButton, pos=cell)
    assert picked.args == [0]
    assert panel.layer() == 0


def test_the_combos_pick_a_head_and_the_strip_draws_its_weights(qtbot, panel, story):
    view, position_tokens, _, _ = story
    layers = child(panel, QComboBox, "attentionLayer")
    heads = child(panel, QComboBox, "attentionHead")
    assert [layers.itemText(i) for i in range(layers.count())] == ["layer 1"]
    assert [heads.itemText(i) for i in range(heads.count())] == ["mean of heads", *(f"head {i}" for i in range(1, 9))]
    assert panel.head() == (0, -1)
    mean = view.attention[0].mean(axis=0)
    np.testing.assert_allclose(panel.strip_weights(), mean / mean.max(), rtol=1e-6)
    with qtbot.waitSignal(panel.headChosen) as picked:
        heads.setCurrentIndex(4)  # head 4
    assert picked.args == [0, 3]
    assert panel.head() == (0, 3)
    weights = view.attention[0, 3]
    np.testing.assert_allclose(panel.strip_weights(), weights / weights.max(), rtol=1e-6)
    assert max(panel.strip_weights()) == 1.0
    first = child(panel, QLabel, "attentionTop").text().split(" · ")
    assert len(first) == 5
    t = int(weights.argmax())
    assert first[0] == f"'{position_tokens[t]}' {float(weights[t]):.2f}"
    assert position_tokens[t] == " "  # head 4 looks at the space before the first sentence's "red"
    heads.setCurrentIndex(7)  # head 7 looks at the first sentence's object, almost only
    assert child(panel, QLabel, "attentionTop").text().startswith("' ball' 0.9")


def test_the_strip_shows_the_texts_tokens_escaped(qtbot, panel, story):
    view, position_tokens, grid_tokens, _ = story
    tokens = ["<b>&", "\n", *position_tokens[2:]]
    panel.show_view(view, "hostile", tokens, grid_tokens, None, None)
    strip = child(panel, QTextBrowser, "attentionStrip")
    assert strip.isReadOnly()
    assert strip.toPlainText().startswith("<b>&↵ has a red ball.")
    assert len(panel.strip_weights()) == len(tokens)


def strips(panel):
    """The map's cells as strips of weights over the text, each scaled to its own max (not the default)."""
    child(panel, QComboBox, "headStatistic").setCurrentText("weights over the text")
    child(panel, QCheckBox, "headPerLayer").setChecked(False)


def test_the_map_has_a_strip_per_layer_and_head_each_scaled_to_its_max(panel, story):
    view, *_ = story
    strips(panel)
    layers, heads, positions = view.attention.shape
    image = panel.grid_image()
    assert image.shape == (2 * layers - 1, heads * (positions + 1) - 1) == (1, 191)
    assert image.dtype == np.float32
    for head in range(heads):
        strip = image[0, head * (positions + 1) : head * (positions + 1) + positions]
        assert strip.max() == pytest.approx(1.0)
        np.testing.assert_allclose(strip, view.attention[0, head] / view.attention[0, head].max(), rtol=1e-6)
    assert np.isnan(image[0, positions :: positions + 1]).all()  # the 1-pixel gaps between heads
    np.testing.assert_array_equal(panel.image.image, image)  # the ImageItem shows it
    item = panel.image
    panel.show_view(view, "again", *story[1:3], None, None)  # a new view: the same item, updated in place
    assert [i for i in panel.plot.items if isinstance(i, pg.ImageItem)] == [item]


def test_strip_map_puts_layer_one_on_top_with_gap_rows():
    attention = np.zeros((3, 2, 4), np.float32)
    attention[0, 1, 2] = 0.5  # layer 1, head 2, position 3
    attention[2, 0] = [0.1, 0.2, 0.3, 0.4]
    image = strip_map(attention)
    assert image.shape == (5, 9)
    assert image[0, 5 + 2] == 1.0 and np.isnan(image[1]).all() and np.isnan(image[3]).all()
    np.testing.assert_allclose(image[4, :4], [0.25, 0.5, 0.75, 1.0])
    assert (image[2, :4] == 0).all()  # an all-zero strip stays 0, not NaN


def test_cell_at_maps_an_image_point_to_a_layer_and_head(panel, story):
    strips(panel)
    positions = story[0].attention.shape[-1]  # 23: each head's strip and its gap take 24 pixels
    assert panel.cell_at(0.5, 0.5) == (0, 0)
    assert panel.cell_at(5 * (positions + 1) + 3.2, 0.9) == (0, 5)
    assert panel.cell_at(8 * (positions + 1) - 1.5, 0.5) == (0, 7)
    assert panel.cell_at(-0.5, 0.5) is None
    assert panel.cell_at(3, 1.5) is None  # below the only layer
    assert panel.cell_at(8 * (positions + 1), 0.5) is None  # right of the last head
    assert InsidePanel().cell_at(0.5, 0.5) is None  # no view yet


def test_a_click_on_the_map_picks_that_layer_and_head(qtbot, panel, story):
    strips(panel)
    positions = story[0].attention.shape[-1]
    scene = panel.image.mapToScene(QPointF(5 * (positions + 1) + positions / 2, 0.5))
    point = panel.grid.mapFromScene(scene)
    with qtbot.waitSignal(panel.headChosen) as picked:
        qtbot.mouseClick(panel.grid.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert picked.args == [0, 5]
    assert panel.head() == (0, 5)
    assert child(panel, QComboBox, "attentionHead").currentText() == "head 6"
    weights = story[0].attention[0, 5]
    np.testing.assert_allclose(panel.strip_weights(), weights / weights.max(), rtol=1e-6)


def test_show_unavailable_hides_the_rest(qtbot, panel):
    panel.show_unavailable("llama.cpp does not show its layers")
    note = child(panel, QLabel, "insideUnavailable")
    assert note.isVisible() and note.wordWrap()
    assert note.text() == "llama.cpp does not show its layers"
    for kind, name in ((QLabel, "insideTitle"), (QSlider, "insideLayer"), (QTableWidget, "lensGrid"),
                       (QTextBrowser, "attentionStrip")):  # fmt: skip
        assert not child(panel, kind, name).isVisible(), name
    assert not panel.grid.isVisible()
    panel.show_waiting("Select a token, or pause, to look inside")
    assert not note.isVisible()
    assert child(panel, QLabel, "insideTitle").isVisible()
    assert child(panel, QLabel, "insideTitle").text() == "Select a token, or pause, to look inside"
