"""What the window paints while a run streams (issue 30): less, and nothing nobody can see, with the picture after
the run as a whole redraw makes it. On the real window and the story model."""

from test_window import generate, type_prompt

from playground.strip.uncertainty_strip import LIVE_FPS as strip_live_fps
from playground.widgets.chart import LIVE_FPS as chart_live_fps
from playground.widgets.chart import DistributionChart
from playground.widgets.frames import FRAME_MS

LONG = "a token label much wider than any word"


def test_while_streaming_the_chart_keeps_its_label_room_and_title_lines_and_fits_them_once_the_run_ends(qtbot, window):
    """Narrower labels or a shorter title mid-run moved every bar, label and tick (a new x range, a new plot height)
    at each step: while live both only grow; once the run ends they fit what is shown, and the chart looks as one
    drawn afresh, pixel for pixel."""
    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.max_tokens.setValue(12)
    generate(qtbot, window)
    chart, step = window.chart, window.token_view.step(3)
    qtbot.waitUntil(lambda: chart._title.startswith("Stopped"), timeout=5000)  # the window is done with the chart
    candidates, wide = step.candidates, [LONG] + list(step.candidates.tokens[1:])
    chart.set_live(True)
    chart.show_candidates(candidates, step.token_id, "Step 4: " + LONG * 3, wide)
    chart.flush()
    qtbot.wait(20)  # laid out
    room, height = chart.label_space, chart.plot.height()
    chart.show_candidates(candidates, step.token_id, "Step 4")  # the story model's short words
    chart.flush()
    qtbot.wait(20)  # a layout would be done by now
    assert chart.label_space == room and chart.plot.height() == height  # kept while live
    chart.set_live(False)  # the run's end
    chart.flush()
    qtbot.waitUntil(lambda: chart.plot.height() > height, timeout=5000)  # one line of title again
    assert chart.label_space > room  # fitted to the short words again
    fresh = DistributionChart()
    qtbot.addWidget(fresh)
    fresh.resize(chart.size())
    fresh.show()
    qtbot.waitExposed(fresh)
    fresh.show_candidates(candidates, step.token_id, "Step 4")
    fresh.flush()
    assert fresh.label_space == chart.label_space
    assert chart.plot.grab().toImage() == fresh.plot.grab().toImage()  # pixel for pixel


def test_a_hidden_strip_and_chart_draw_nothing_until_shown_then_all_of_it(qtbot, window):
    """Closed (or behind another tab), the strip and the chart do not repaint during a run; shown again, they draw
    the whole run at once."""
    strip, chart, docks = window.uncertainty_strip, window.chart, window.docks
    docks.hide(chart)
    docks.hide(strip)
    qtbot.waitUntil(lambda: not strip.isVisible() and not chart.isVisible(), timeout=5000)
    strip_before, chart_before = strip.repaints, chart.repaints
    type_prompt(qtbot, window, "mia has a red ball.")
    generate(qtbot, window)
    qtbot.wait(100)  # frames pass after the run too
    assert (strip.repaints, chart.repaints) == (strip_before, chart_before)
    docks.show(strip)
    docks.show(chart)
    steps = window.token_view.steps()
    qtbot.waitUntil(lambda: strip.repaints > strip_before and chart.repaints > chart_before, timeout=5000)
    x, _y = strip._curves["surprisal"].getData()
    assert list(x) == list(range(1, len(steps) + 1))
    assert chart.title.text().startswith(("Stopped", "Next token"))


def test_a_runs_end_keeps_the_live_pace_until_the_next_frame(qtbot, window):
    """Story after story, a run's end does not switch the chart and the strip to 60 repaints a second for the few
    milliseconds before the next run (nor does the next run's start put off the frame that is due): the live pace
    holds until the next frame, which draws the run's end; then frames come at 60 a second again."""
    for widget, live_fps in ((window.chart, chart_live_fps), (window.uncertainty_strip, strip_live_fps)):
        timer = widget._frames.timer
        widget.set_live(True)
        assert timer.interval() == 1000 // live_fps
        widget.set_live(False)
        assert timer.interval() == 1000 // live_fps
        before = widget.repaints
        widget._mark_dirty()
        qtbot.waitUntil(lambda timer=timer: timer.interval() == FRAME_MS, timeout=2000)
        assert widget.repaints == before + 1  # the run's end was drawn at that frame


def test_runs_back_to_back_restyle_neither_the_status_message_nor_the_prompts_message(qtbot, window):
    """Each run cleared the status message and each new prompt the prompt's message, setting their style sheets
    again though nothing changed: a style sheet set again restyles (and relays out) the label, every story."""
    from PySide6.QtCore import QEvent, QObject
    from test_window_autosave import STORY_STARTS, runs_back_to_back

    class Restyles(QObject):
        count = 0

        def eventFilter(self, _watched, event):
            self.count += event.type() == QEvent.Type.StyleChange
            return False

    restyles = Restyles()
    for label in (window.message_label, window.controls.prompt_error):
        label.installEventFilter(restyles)
    runs_back_to_back(qtbot, window, STORY_STARTS)
    assert window.token_view.whole_text().startswith(STORY_STARTS[-1]) and restyles.count == 0  # before: 4 in 5 runs
    window.controller.status("no such thing", error=True)  # a message that is one still shows as one
    assert restyles.count == 1 and window.message_label.styleSheet() == "color: #e74c3c;"
