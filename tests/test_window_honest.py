"""Issue 24, "the window never misleads": each test drives the real window offscreen on the story model and checks
what a person sees."""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton
from test_window import WAIT, child, click_bar, generate, step
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
