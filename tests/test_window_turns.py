"""The worker sends a run's steps to the window a turn at a time (stepsTaken), not a token at a time: each delivery
wakes the GUI thread, which takes the GIL from the worker mid-step. Every step still arrives, in order."""

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton

import playground.worker

WAIT = 15000  # ms


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_runs_steps_reach_the_window_in_turns_every_one_in_order(qtbot, window, monkeypatch, temperature):
    monkeypatch.setattr(playground.worker, "TICK_SECONDS", 0.2)  # turns longer than a loaded machine's steps
    deliveries, singles = [], []
    worker = window.controller.worker
    worker.stepsTaken.connect(lambda steps: deliveries.append(list(steps)), Qt.ConnectionType.DirectConnection)
    worker.stepped.connect(singles.append, Qt.ConnectionType.DirectConnection)
    window.controls.temperature.setValue(temperature)
    window.controls.max_tokens.setValue(40)
    with qtbot.waitSignal(window.controller.runFinished, timeout=WAIT):
        qtbot.mouseClick(window.findChild(QPushButton, "generateButton"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.token_view.step_count() == len(singles), timeout=WAIT)
    shown = [step.token_id for step in window.token_view.steps()]
    assert len(shown) >= 10
    assert [step.token_id for steps in deliveries for step in steps] == shown  # all of them, in order
    assert [step.token_id for step in singles] == shown  # each also as its own `stepped`
    # the first token at once, then a turn's worth (or a speed update's) at a time: far fewer wakes than tokens
    assert len(deliveries) <= len(shown) // 2
