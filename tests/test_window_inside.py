"""The Inside tab (issue 17): for the selected step, what each layer would predict (the logit lens, its layers
in the chart) and where each head looks (attention), computed in the worker on demand only; a backend
without layers says so. Real window, story model (and a server's plain sentence)."""

import threading

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLabel, QPushButton, QSlider, QTableWidget
from test_window import WAIT, child, generate, type_prompt

import engine

PROMPT = "ben has a gold toy. ben goes to the barn. at the barn, ben gives the toy to leo. now leo has the"


def select(win, index):
    """Click-select step `index` in the view (-1: none): the chart and the Inside tab follow."""
    win.token_view.select(index)
    win.controller.token_selected(index)
    win.chart.flush()


def counting(monkeypatch):
    """Count engine.inside_view's calls, and the threads they ran in."""
    calls, real = [], engine.inside_view
    monkeypatch.setattr(
        engine, "inside_view", lambda *a, **k: calls.append(threading.current_thread()) or real(*a, **k)
    )
    return calls


def test_the_lens_and_attention_of_a_selected_step(qtbot, window, monkeypatch):
    calls = counting(monkeypatch)
    type_prompt(qtbot, window, PROMPT)
    window.controls.max_tokens.setValue(3)
    window.show_panel(window.inside_panel)  # open while generating: nothing per token
    with qtbot.waitSignal(window.controller.inside.shown, timeout=WAIT) as done:
        generate(qtbot, window)
    assert len(calls) == 1 and calls[0] is not threading.main_thread()  # once, for the next token, in the worker
    assert done.args[0].chosen_id is None
    session = window.session()
    with qtbot.waitSignal(window.controller.inside.shown, timeout=WAIT) as done:
        select(window, 0)  # the first step: ' gold' (the colour copied from the first sentence)
    shown = done.args[0]
    ids = session.ids[: len(session.prompt_ids)]
    expected = engine.inside_view(window.model, ids)
    assert np.array_equal(shown.view.probs, expected.probs) and shown.chosen_id == session.steps[0].token_id
    assert child(window, QLabel, "insideTitle").text().startswith(f"Step 1, {session.steps[0].token!r}")
    grid = child(window, QTableWidget, "lensGrid")
    assert grid.rowCount() == 2 and grid.columnCount() >= 20
    # the embedding's lens in the chart, then back to the step as it was
    slider = child(window, QSlider, "insideLayer")
    slider.setValue(0)
    window.chart.flush()
    top = [window.model.tokenizer.decode([i]) for i in np.argsort(-expected.probs[0], kind="stable")[:5]]
    assert "logit lens at embedding" in window.chart.title.text()
    assert [label.replace("·", " ") for label in window.chart.labels()[:5]] == top
    slider.setValue(1)
    window.chart.flush()
    assert window.chart.title.text().startswith("Step 1")
    # head 4 of the block looks at the first sentence's colour when the model writes it (engine/story/colour_head.py)
    assert session.steps[0].token == " gold"
    child(window, QComboBox, "attentionHead").setCurrentIndex(4)  # 0: the mean of heads
    weights = expected.attention[0, 3]
    assert np.allclose(window.inside_panel.strip_weights(), weights / weights.max(), atol=1e-6)
    assert child(window, QLabel, "attentionTop").text().startswith("' gold' 0.9")
    # ablate it: from the next step on the session reads the text without it; the trace replays it
    with qtbot.waitSignal(window.controller.worker.inside.headsSteered, timeout=WAIT):
        qtbot.mouseClick(child(window, QPushButton, "ablateHeadButton"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: child(window, QLabel, "steeredHeads").text() == "steered: layer 1 head 4 ×0", timeout=WAIT)
    qtbot.waitUntil(lambda: not window.controller.running, timeout=WAIT)
    assert session.head_scales == ((0, 3, 0.0),) and session.actions[-1] == {"kind": "heads", "scales": [[0, 3, 0.0]]}
    assert child(window, QPushButton, "ablateHeadButton").text() == "Put this head back"
    assert engine.replay(session.trace(), window.model).identical


def test_a_backend_without_layers_says_so(qtbot, prefs):
    from conftest import shown_window
    from fake_backend import FakeStreamingBackend

    server = FakeStreamingBackend()  # a server: the scores only
    window = shown_window(qtbot, server, prefs)
    window.show_panel(window.inside_panel)
    note = child(window, QLabel, "insideUnavailable")
    assert note.isVisible() and "numpy engine or llama.cpp" in note.text() and server.name in note.text()
    window.close()
