"""The Inside tab never misleads (issue 24): after a model switch, a change of the text or of the steered heads
it shows the text as it is now or nothing; the lens slider and the chart name the same layer; while any head
is steered a banner above the text says which, whichever tab is open. Real window: the story model, SmolLM2
on numpy and on llama.cpp (30 layers both)."""

import numpy as np
import pytest
from conftest import answer_questions
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLabel, QPushButton, QSlider, QTableWidget, QTextBrowser
from test_window import WAIT, child, generate, step, type_prompt
from test_window_inside import PROMPT, select

import engine

LOAD_WAIT = 120000  # ms: SmolLM2 loads in a few seconds, more on a busy machine


def tab_shows(win) -> dict:
    """What a person sees in the Inside tab (when it is open): the title or the note, the lens rows and their
    cells, the attention strip and its top positions."""
    panel = win.inside_panel

    def seen(widget):
        return widget.isVisibleTo(panel)

    title, note = child(win, QLabel, "insideTitle"), child(win, QLabel, "insideUnavailable")
    grid, strip = child(win, QTableWidget, "lensGrid"), child(win, QTextBrowser, "attentionStrip")
    top, layer = child(win, QLabel, "attentionTop"), child(win, QLabel, "insideLayerLabel")
    cells = [[grid.item(r, c).text() if grid.item(r, c) else "" for c in range(grid.columnCount())]
             for r in range(grid.rowCount())] if seen(grid) else []  # fmt: skip
    return {"title": title.text() if seen(title) else "", "note": note.text() if seen(note) else "",
            "lens": cells, "layer": layer.text() if seen(layer) else "",
            "strip": strip.toPlainText() if seen(strip) else "", "top": top.text() if seen(top) else ""}  # fmt: skip


def assert_shows_nothing(win, *, saying: str = "") -> None:
    shows = tab_shows(win)
    assert shows["lens"] == [] and shows["strip"] == "" and shows["top"] == "" and shows["layer"] == "", shows
    assert saying in shows["title"] + shows["note"], shows


def chart_title(win) -> str:
    win.chart.flush()
    return win.chart.title.text()


def banner(win):
    return child(win, QLabel, "steeringText"), child(win, QPushButton, "restoreAllHeadsButton")


def open_inside_and_step(qtbot, win, prompt=PROMPT):
    """The tab open, a prompt typed, one Step: the tab shows the next token."""
    win.show_panel(win.inside_panel)
    type_prompt(qtbot, win, prompt)
    with qtbot.waitSignal(win.controller.inside.shown, timeout=LOAD_WAIT) as done:
        step(qtbot, win)
    return done.args[0]


def steered(qtbot, win, scales):
    """Steer these heads as the Inside panel's buttons do; the tab then shows the steered numbers."""
    now = tuple(sorted(scales))  # (layer, head) order, as the session keeps them
    with qtbot.waitSignal(
        win.controller.inside.shown, timeout=LOAD_WAIT, check_params_cb=lambda shown: shown.key[0][0] == now
    ) as done:
        win.inside_panel.headsSteered.emit(list(scales))
    return done.args[0]


def switch(qtbot, win, source, **options):
    with qtbot.waitSignal(win.controller.modelChanged, timeout=LOAD_WAIT):
        win.controller.models.open_model(source, **options)


def test_a_model_switch_shows_nothing_of_the_old_model(qtbot, window, monkeypatch):
    pytest.importorskip("llama_cpp")
    answer_questions(monkeypatch)  # "the session on the story model closes": OK
    open_inside_and_step(qtbot, window)
    child(window, QSlider, "insideLayer").setValue(0)  # the embedding's lens in the chart
    assert "logit lens at embedding" in chart_title(window)
    steered(qtbot, window, [(0, 3, 0.0)])  # the banner shows it (test_a_banner_says_which_heads_are_steered...)

    switch(qtbot, window, "smollm2", backend="numpy")  # has layers: the tab waits for a text
    assert_shows_nothing(window, saying="Step")  # what to do with an empty text
    assert "logit lens" not in chart_title(window) and not banner(window)[0].isVisible()
    assert child(window, QComboBox, "attentionLayer").count() == 0  # no layer of the old model to pick

    # SmolLM2's 31 lens rows; the slider at layer 15, then a head ablated: the slider and the chart stay there
    shown = open_inside_and_step(qtbot, window, "Once upon a time, there was a little")
    assert len(tab_shows(window)["lens"]) == 31 and shown.view.attention.shape[:2] == (30, 9)
    child(window, QSlider, "insideLayer").setValue(15)
    assert "logit lens at layer 15" in chart_title(window)
    shown = steered(qtbot, window, [(0, 3, 0.0)])
    assert child(window, QSlider, "insideLayer").value() == 15
    assert tab_shows(window)["layer"].startswith("layer 15 of 30")
    assert "logit lens at layer 15" in chart_title(window)
    session = window.session()
    expected = engine.inside_view(window.model, session.ids, head_scales=session.head_table)
    assert session.head_scales == ((0, 3, 0.0),) and np.array_equal(shown.view.probs, expected.probs)
    labels = [label.replace("·", " ") for label in window.chart.labels()]
    assert labels[0] == shown.layers[15].tokens[0]  # the steered layer 15's own top token
    assert banner(window)[0].text() == "Steering: layer 1 head 4 ablated"

    switch(qtbot, window, "smollm2", backend="llama.cpp", threads=1, context_length=512)  # layers too (issue 28)
    assert_shows_nothing(window, saying="Step")
    assert "logit lens" not in chart_title(window) and not banner(window)[0].isVisible()
    shown = open_inside_and_step(qtbot, window, "Once upon a time, there was a little")
    assert len(tab_shows(window)["lens"]) == 31 and shown.view.attention.shape[:2] == (30, 9)
    expected = engine.inside_view(window.model, window.session().ids)
    assert np.array_equal(shown.view.probs, expected.probs)


def test_the_tab_follows_the_text_or_clears(qtbot, window, tmp_path):
    model = window.model
    shown = open_inside_and_step(qtbot, window)
    session = window.session()
    assert np.array_equal(shown.view.probs, engine.inside_view(model, session.ids).probs)

    with qtbot.waitSignal(window.controller.inside.shown, timeout=WAIT) as done:  # a new step: the next token again
        step(qtbot, window)
    assert len(done.args[0].position_tokens) == len(session.ids) and done.args[0].title.startswith("The next token")

    with qtbot.waitSignal(window.controller.inside.shown, timeout=WAIT):
        select(window, 0)
    with qtbot.waitSignal(window.controller.inside.shown, timeout=WAIT) as done:  # a branch: another token there
        window.controller.bar_clicked(session.steps[0].candidates.token_ids[1])  # the second candidate
    assert done.args[0].title.startswith("The next token") and len(session.steps) == 1
    assert np.array_equal(done.args[0].view.probs, engine.inside_view(model, session.ids).probs)

    # while a run goes on, nothing of the text before it (each frame of steps is checked as it is drawn)
    during = []

    def record(_start):
        during.append(tab_shows(window))

    window.token_view.stepsChanged.connect(record)
    window.controls.max_tokens.setValue(6)
    generate(qtbot, window)
    assert during and all(shows["lens"] == [] and shows["strip"] == "" for shows in during), during[0]
    window.token_view.stepsChanged.disconnect(record)
    qtbot.waitUntil(lambda: tab_shows(window)["lens"] != [], timeout=WAIT)  # and after it, the text as it is

    path = tmp_path / "run.json"
    window.export_trace(path)
    qtbot.mouseClick(child(window, QPushButton, "resetButton"), Qt.MouseButton.LeftButton)
    assert_shows_nothing(window, saying="Step")  # Reset: an empty text, and what to do

    shown = open_inside_and_step(qtbot, window, "tom has a red ball. now tom has the")  # a new prompt
    assert shown.position_tokens[0] == model.tokenizer.decode(window.session().ids[:1])
    assert "".join(shown.position_tokens) == window.token_view.text()

    window.open_trace(path)  # a trace is data: no numbers until it is replayed
    qtbot.waitUntil(lambda: "Replay" in tab_shows(window)["title"], timeout=WAIT)
    assert_shows_nothing(window, saying="Replay")
    with qtbot.waitSignal(window.controller.inside.shown, timeout=WAIT) as done:
        window.replay_action.trigger()
    assert "".join(done.args[0].position_tokens) == window.token_view.text()

    window.controller.scoring.score_text("mia has a red ball.")  # a scored text is read, not a session: nothing inside
    qtbot.waitUntil(
        lambda: window.controller.known.view.prompt is None and window.token_view.step_count() > 0, timeout=WAIT
    )
    qtbot.waitUntil(lambda: "Replay" in tab_shows(window)["title"], timeout=WAIT)
    assert_shows_nothing(window)


def test_ablate_and_restore_keep_the_lens_layer_and_show_the_steered_numbers(qtbot, window):
    open_inside_and_step(qtbot, window)
    with qtbot.waitSignal(window.controller.inside.shown, timeout=WAIT):
        select(window, 0)
    slider = child(window, QSlider, "insideLayer")
    slider.setValue(0)
    assert chart_title(window).startswith("Step 1, ' gold', logit lens at embedding")
    child(window, QComboBox, "attentionHead").setCurrentIndex(4)  # head 4: the colour head
    for clicks in range(2):  # Ablate, then put it back
        with qtbot.waitSignal(window.controller.inside.shown, timeout=WAIT) as done:
            qtbot.mouseClick(child(window, QPushButton, "ablateHeadButton"), Qt.MouseButton.LeftButton)
        session = window.session()
        assert session.head_scales == (((0, 3, 0.0),) if clicks == 0 else ())
        assert slider.value() == 0 and tab_shows(window)["layer"].startswith("embedding")
        assert chart_title(window).startswith("Step 1, ' gold', logit lens at embedding")
        ids = session.ids[: len(session.prompt_ids)]
        expected = engine.inside_view(window.model, ids, head_scales=session.head_table)
        assert np.array_equal(done.args[0].view.attention, expected.attention)
        assert child(window, QComboBox, "attentionHead").currentIndex() == 4  # the head chosen stays too
    slider.setValue(1)  # the model's own: the step as it was
    assert chart_title(window).startswith("Step 1: ' gold'")


def settled(qtbot, win):
    """The window's size once what it holds now has been laid out (a long status message may make it taller
    first: not the banner's doing), and its least size then."""
    qtbot.waitUntil(lambda: win.size().height() >= win.minimumSizeHint().height(), timeout=WAIT)
    return win.size(), win.minimumSizeHint()


def same_size(win, before) -> bool:
    """The window kept its size and needs no more room than before (it would grow at its least size)."""
    size, least = before
    now = win.minimumSizeHint()
    return win.size() == size and now.height() <= least.height() and now.width() <= least.width()


def test_a_banner_says_which_heads_are_steered_and_restores_them(qtbot, window, tmp_path):
    window.resize(1024, 700)
    open_inside_and_step(qtbot, window)
    before = settled(qtbot, window)
    text, restore = banner(window)
    assert not text.isVisible() and not restore.isVisible()
    steered(qtbot, window, [(0, 3, 0.0), (0, 1, 0.5)])
    window.show_panel(window.rules_panel)  # on another tab, the banner is there all the same
    assert text.isVisible() and restore.isVisible()
    assert text.text() == "Steering: layer 1 head 2 ×0.5, layer 1 head 4 ablated"
    assert same_size(window, before)
    with qtbot.waitSignal(window.controller.worker.inside.headsSteered, timeout=WAIT):
        qtbot.mouseClick(restore, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not text.isVisible(), timeout=WAIT)
    assert window.session().head_scales == () and same_size(window, before)

    window.show_panel(window.inside_panel)
    steered(qtbot, window, [(0, head, 0.25) for head in range(8)])  # many heads: two lines, then how many more
    assert text.text().startswith("Steering: layer 1 head 1 ×0.25, ") and text.text().endswith("more heads")
    assert same_size(window, before)
    steered(qtbot, window, [(0, 5, 0.0)])
    generate(qtbot, window)
    path = tmp_path / "steered.json"
    window.export_trace(path)
    window.controller.reset()  # Reset: every head as trained, no banner
    qtbot.waitUntil(lambda: not text.isVisible(), timeout=WAIT)
    window.open_trace(path)
    with qtbot.waitSignal(window.controller.message, timeout=WAIT) as replayed:  # the replay steers as recorded
        window.replay_action.trigger()
    assert replayed.args[0].startswith("identical")
    qtbot.waitUntil(lambda: text.isVisible(), timeout=WAIT)
    assert text.text() == "Steering: layer 1 head 6 ablated"

    window.resize(1360, 820)  # the default size: the same
    qtbot.waitUntil(lambda: window.size().width() == 1360, timeout=WAIT)
    before = settled(qtbot, window)
    steered(qtbot, window, [(0, 5, 0.0), (0, 2, 0.5)])
    assert text.text() == "Steering: layer 1 head 3 ×0.5, layer 1 head 6 ablated" and same_size(window, before)
    window.controller.reset()
    qtbot.waitUntil(lambda: not text.isVisible(), timeout=WAIT)
    assert same_size(window, before)
