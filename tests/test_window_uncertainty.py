"""The uncertainty strip under the token view, the "least confident" list and the colour switch (issue 15,
the window's part), on the real window and the story model."""

import html
import math
import sys

import numpy as np
import pytest
from conftest import shown_window
from PySide6.QtCore import QPoint, Qt, QThread
from PySide6.QtWidgets import QComboBox, QLabel, QListWidget, QWidget
from test_window import WAIT, child, generate, step, type_prompt

import engine
from playground.widgets.token_colours import COLOR_LEVELS, colour_level
from playground.widgets.token_view import probability_color


def strip_of(win):
    strip = child(win, QWidget, "uncertaintyStrip")
    strip.flush()
    return strip


def generated(qtbot, win, temperature=1.0, seed=3):
    type_prompt(qtbot, win, "mia has a red ball.")
    win.controls.temperature.setValue(temperature)
    win.controls.seed.setValue(seed)
    generate(qtbot, win)
    return win.token_view.steps()


def nan_list(steps, name):
    return [np.nan if getattr(s, name) is None else getattr(s, name) for s in steps]


def test_the_strip_shows_each_steps_surprisal_and_entropy_and_the_perplexity(qtbot, window):
    steps = generated(qtbot, window)
    assert len(steps) > 10
    strip = strip_of(window)
    assert strip.count() == len(steps)
    np.testing.assert_array_equal(strip.values("surprisal"), nan_list(steps, "surprisal"))
    np.testing.assert_array_equal(strip.values("entropy"), nan_list(steps, "entropy"))
    for name in ("surprisal", "entropy"):  # one point per step, drawn at its step number
        x, y = strip._curves[name].getData()
        assert list(x) == list(range(1, len(steps) + 1))
        np.testing.assert_array_equal(y, nan_list(steps, name))
    expected = math.exp(sum(s.surprisal for s in steps) / len(steps))
    assert strip.perplexity() == pytest.approx(expected)
    readout = child(window, QLabel, "perplexityLabel").text()  # " · prompt ..." follows once the worker scored it
    assert readout.split(" · ")[0] == f"perplexity {expected:.2f}"
    step_index = int(np.argmax(strip.values("surprisal")))
    assert html.escape(repr(window.token_view.shown_token(step_index))) in strip.hover_text(step_index)


def test_clicking_a_point_selects_its_token_and_charts_it(qtbot, window):
    steps = generated(qtbot, window)
    strip = strip_of(window)
    index = len(steps) // 2
    point = strip.plot.mapFromScene(strip.point_scene_position(index))
    qtbot.mouseClick(strip.plot.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(point.x(), point.y()))
    assert window.token_view.selected == index
    assert strip.marked == index
    window.chart.flush()
    assert window.chart.title.text().startswith(f"Step {index + 1}:")
    assert [token for token, _ in window.chart.shown()] == list(steps[index].candidates.tokens)
    assert window.continue_button.isEnabled()  # the same path as clicking the token itself


def test_selecting_a_token_in_the_view_marks_its_point(qtbot, window):
    generated(qtbot, window)
    view, strip = window.token_view, strip_of(window)
    start, _end = view._span(3)
    cursor = view.textCursor()
    cursor.setPosition(start + 1)
    rect = view.cursorRect(cursor)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert view.selected == 3 and strip.marked == 3
    strip.flush()
    assert strip._mark_line.isVisible() and strip._mark_line.value() == 4
    view.select(-1)
    strip.flush()
    assert strip.marked == -1 and not strip._mark_line.isVisible()


def test_least_confident_lists_the_top_ten_and_a_click_selects(qtbot, window):
    steps = generated(qtbot, window, seed=5)
    strip = strip_of(window)
    least = child(window, QListWidget, "leastConfident")
    by_surprisal = sorted(range(len(steps)), key=lambda i: (-steps[i].surprisal, i))[:10]
    assert [least.item(row).data(Qt.ItemDataRole.UserRole) for row in range(least.count())] == by_surprisal
    assert repr(window.token_view.shown_token(by_surprisal[0])) in least.item(0).text()
    item = least.item(2)
    rect = least.visualItemRect(item)
    qtbot.mouseClick(least.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.token_view.selected == by_surprisal[2] and strip.marked == by_surprisal[2]
    window.chart.flush()
    assert window.chart.title.text().startswith(f"Step {by_surprisal[2] + 1}:")
    child(window, QComboBox, "leastConfidentBy").setCurrentText("entropy")
    strip.flush()
    by_entropy = sorted(range(len(steps)), key=lambda i: (-steps[i].entropy, i))[:10]
    assert [least.item(row).data(Qt.ItemDataRole.UserRole) for row in range(least.count())] == by_entropy


def background(view, index):
    return view.format_at(index).background().color().rgba()


def expected_background(step, mode, index):
    level = colour_level(step, mode)
    return probability_color(round(level * COLOR_LEVELS) / COLOR_LEVELS, (index + 1) % 2).rgba()


def test_the_colour_switch_recolours_the_tokens_and_is_remembered(qtbot, story_model, prefs):
    win = shown_window(qtbot, story_model, prefs)
    steps = generated(qtbot, win)
    view, switch = win.token_view, child(win, QComboBox, "colourBy")
    assert [switch.itemText(i) for i in range(switch.count())] == ["drawn probability", "surprisal", "entropy", "rank"]
    before = [background(view, i) for i in range(len(steps))]
    assert before == [expected_background(s, "drawn probability", i) for i, s in enumerate(steps)]
    assert "0.25" in child(win, QLabel, "legendLabel").text()
    view.select(4)
    for mode in ("surprisal", "entropy", "rank"):
        switch.setCurrentText(mode)
        assert view.colour_mode() == mode
        assert [background(view, i) for i in range(len(steps))] == [
            expected_background(s, mode, i) for i, s in enumerate(steps)
        ]
        assert view.text() == "mia has a red ball." + "".join(s.token for s in steps)
        assert view.selected == 4 and strip_of(win).count() == len(steps)
    assert "20+" in child(win, QLabel, "legendLabel").text()
    switch.setCurrentText("surprisal")
    assert [background(view, i) for i in range(len(steps))] != before  # the model was sure of some, not all
    assert "8+" in child(win, QLabel, "legendLabel").text()
    win.close()
    again = shown_window(qtbot, story_model, prefs)
    assert child(again, QComboBox, "colourBy").currentText() == "surprisal"
    assert again.token_view.colour_mode() == "surprisal"
    step(qtbot, again)
    first = again.token_view.step(0)
    assert background(again.token_view, 0) == expected_background(first, "surprisal", 0)
    again.close()


def test_reset_and_a_new_session_clear_the_strip(qtbot, window):
    steps = generated(qtbot, window)
    strip = strip_of(window)
    assert strip.count() == len(steps)
    window.controller.reset()
    strip = strip_of(window)
    assert strip.count() == 0 and strip.marked == -1
    assert child(window, QListWidget, "leastConfident").count() == 0
    assert child(window, QLabel, "perplexityLabel").text() == ""
    steps = generated(qtbot, window, seed=9)
    assert strip_of(window).count() == len(steps)
    np.testing.assert_array_equal(strip.values("surprisal"), nan_list(steps, "surprisal"))


def test_an_opened_trace_and_a_branch_fill_the_strip(qtbot, window, tmp_path):
    steps = generated(qtbot, window)
    window.export_trace(tmp_path / "trace.json")
    window.controller.reset()
    window.open_trace(tmp_path / "trace.json")
    strip = strip_of(window)
    assert strip.count() == len(steps)
    np.testing.assert_allclose(strip.values("surprisal"), nan_list(steps, "surprisal"))
    window.controller.reset()
    generated(qtbot, window)
    window.token_view.click_step(5)
    with qtbot.waitSignal(window.controller.runFinished, timeout=15000):
        window.continue_button.click()
    window.controller.flush()
    strip = strip_of(window)
    branch = window.token_view.steps()
    assert strip.count() == len(branch)
    np.testing.assert_array_equal(strip.values("surprisal"), nan_list(branch, "surprisal"))


def test_ten_thousand_points_are_drawn_in_place(qtbot, window):
    """10,000 points, then one frame's batch: the strip holds them all (its speed: bench/strip_speed.py)."""
    template = engine.generate(window.model, "mia has a red ball.", max_new_tokens=50).steps
    steps = [template[i % len(template)] for i in range(10_000)]
    view, strip = window.token_view, strip_of(window)
    view.show_session("mia has a red ball.", steps[:9_990])
    strip.flush()
    strip.grab()
    view.append_steps(steps[9_990:])  # one frame's batch reaches the view, and through it the strip
    strip.flush()
    strip.grab()  # the paint too
    assert strip.count() == 10_000
    np.testing.assert_array_equal(strip.values("surprisal")[-10:], nan_list(steps[-10:], "surprisal"))


def test_score_a_text_shows_it_like_a_generation(qtbot, window, story_model):
    """File > Score a text...: the worker reads the text; the view, the strip and (on a click) the chart show
    what the model expected at each token; the numbers are engine.score's."""
    text = "mia has a red ball. mia goes to the barn."
    with qtbot.waitSignal(window.controller.scoring.textScored, timeout=30000) as blocker:
        window.controller.scoring.score_text(text)
    result = blocker.args[0]
    expected = engine.score(story_model, text)
    assert result.log_likelihood == pytest.approx(expected.log_likelihood, abs=1e-5)
    view, strip = window.token_view, strip_of(window)
    strip.flush()
    assert [s.token_id for s in view.steps()] == list(expected.token_ids[1:]) and strip.count() == len(expected.steps)
    assert f"perplexity {expected.perplexity:.2f}" in window.stop_reason.text()
    barn = [s.token for s in view.steps()].index(" barn")
    view.click_step(barn)
    window.chart.flush()
    assert window.chart.shown()[0][0].strip() in ("park", "barn", "garden", "mall")  # what it expected there
    with qtbot.waitSignal(window.controller.message, timeout=30000) as blocker:
        window.controller.scoring.score_text("mia has a Red ball.")
    assert "could not score the text" in blocker.args[0] and "'R' at position 10" in blocker.args[0]
    assert [s.token_id for s in view.steps()] == list(expected.token_ids[1:])  # the scored text stays shown


# --- the prompt in the strip ---------------------------------------------------------------------------
def prompt_scored(qtbot, win, prompt_ids):
    """Wait until the strip shows the prompt scored by the worker; engine.score's result for it."""
    expected = engine.score(win.model, prompt_ids)
    strip = strip_of(win)
    qtbot.waitUntil(lambda: strip.prompt_count() == len(expected.steps) and strip.prompt_perplexity is not None,
                    timeout=15000)  # fmt: skip
    for name in ("surprisal", "entropy"):
        np.testing.assert_allclose(strip.prompt_values(name), nan_list(expected.steps, name), rtol=0, atol=1e-6)
    strip.flush()
    return expected


def test_the_prompt_is_scored_after_a_run_and_drawn_left_of_the_steps(qtbot, window, story_model):
    steps = generated(qtbot, window)
    expected = prompt_scored(qtbot, window, story_model.tokenizer.encode("mia has a red ball."))
    strip = strip_of(window)
    generated_perplexity = math.exp(sum(s.surprisal for s in steps) / len(steps))
    label = child(window, QLabel, "perplexityLabel")
    assert label.text() == f"perplexity {generated_perplexity:.2f} · prompt {expected.perplexity:.2f}"
    assert "prompt" in label.toolTip()
    x, _y = strip._prompt_curves["surprisal"].getData()
    assert list(x) == list(range(1 - len(expected.steps), 1))  # the last prompt token next to step 1 (x = 1)
    first_step = strip.point_scene_position(0)
    assert all(strip.point_scene_position(i, prompt=True).x() < first_step.x() for i in range(len(expected.steps)))
    assert strip._prompt_band.isVisible() and strip._prompt_label.isVisible()
    last = len(expected.steps) - 1
    assert "prompt token" in strip.prompt_hover_text(last)
    assert html.escape(repr(expected.steps[last].token)) in strip.prompt_hover_text(last)
    assert strip.perplexity() == pytest.approx(generated_perplexity)  # the prompt is not in the text's perplexity
    assert strip.count() == len(steps)
    assert all(0 <= i < len(steps) for i in strip.least_confident())  # the list keeps to generated tokens
    assert "generated" in child(window, QListWidget, "leastConfident").toolTip()


def test_a_new_prompt_replaces_the_prompt_values_and_a_rewind_keeps_them(qtbot, window, story_model):
    generated(qtbot, window)
    first = prompt_scored(qtbot, window, story_model.tokenizer.encode("mia has a red ball."))
    strip = strip_of(window)
    window.token_view.click_step(5)
    with qtbot.waitSignal(window.controller.runFinished, timeout=15000):
        window.continue_button.click()  # a branch of the same session
    window.controller.flush()
    strip.flush()
    assert strip.prompt_count() == len(first.steps) and strip.prompt_perplexity == first.perplexity
    np.testing.assert_allclose(strip.prompt_values("surprisal"), nan_list(first.steps, "surprisal"), atol=1e-6)
    assert f"prompt {first.perplexity:.2f}" in child(window, QLabel, "perplexityLabel").text()
    type_prompt(qtbot, window, "tom has a big dog.")
    generate(qtbot, window)
    second = prompt_scored(qtbot, window, story_model.tokenizer.encode("tom has a big dog."))
    assert strip.prompt_count() == len(second.steps) != len(first.steps)
    assert child(window, QLabel, "perplexityLabel").text().endswith(f" · prompt {second.perplexity:.2f}")
    window.controller.reset()
    strip.flush()
    assert strip.prompt_count() == 0 and child(window, QLabel, "perplexityLabel").text() == ""


def test_the_prompt_is_scored_in_the_worker_thread_never_the_gui_thread(qtbot, window, story_model):
    """A single Step leaves the worker idle with a new session: it scores the prompt there."""
    worker_thread = window.controller.threads.thread
    emitted_in = []
    window.controller.worker.scoring.promptScored.connect(  # runs in the emitting thread
        lambda *_: emitted_in.append(QThread.currentThread()), Qt.ConnectionType.DirectConnection
    )
    scoring_code = {engine.core.scoring.score.__code__, engine.Session.score_prompt.__code__}
    gui_calls = []

    def watch(frame, event, _arg):  # sys.setprofile watches this (the GUI) thread only
        if event == "call" and frame.f_code in scoring_code:
            gui_calls.append(frame.f_code.co_name)

    sys.setprofile(watch)
    try:
        with qtbot.waitSignal(window.controller.scoring.promptScored, timeout=15000):
            step(qtbot, window)
    finally:
        sys.setprofile(None)
    assert emitted_in == [worker_thread] and worker_thread is not QThread.currentThread()
    assert gui_calls == []
    prompt_scored(qtbot, window, story_model.tokenizer.encode("mia has a red ball."))  # the values: engine.score's
    assert window.session().score_prompt() is window.session().score_prompt()  # scored once, then cached


def test_clicking_a_prompt_point_charts_that_token_and_marks_it(qtbot, window, story_model):
    generated(qtbot, window)
    expected = prompt_scored(qtbot, window, story_model.tokenizer.encode("mia has a red ball."))
    strip, view = strip_of(window), window.token_view
    view.click_step(2)
    index = 3
    point = strip.plot.mapFromScene(strip.point_scene_position(index, prompt=True))
    qtbot.mouseClick(strip.plot.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(point.x(), point.y()))
    assert strip.prompt_marked == index and strip.marked == -1 and view.selected == -1
    strip.flush()
    assert strip._mark_line.isVisible() and strip._mark_line.value() == index + 1 - len(expected.steps)
    window.chart.flush()
    assert window.chart.title.text().startswith(f"Prompt token {index + 2}: {expected.steps[index].token!r}")
    assert [token for token, _ in window.chart.shown()] == list(expected.steps[index].candidates.tokens)
    text = view.text()
    qtbot.mouseClick(window.chart.plot.viewport(), Qt.MouseButton.LeftButton,
                     pos=window.chart.plot.mapFromScene(window.chart.bar_scene_position(1)))  # fmt: skip
    assert view.text() == text and "prompt token" in window.message_label.text()  # the prompt stays as it is
    view.click_step(4)
    assert strip.prompt_marked == -1 and strip.marked == 4


def test_a_prompt_that_cannot_be_scored_says_so_quietly(qtbot, window):
    """A one-token prompt has nothing to score (engine.score's ValueError, as a server's that gives only its
    top N): the readout says so, the reason is in its tooltip, and nothing else changes."""
    type_prompt(qtbot, window, "a")
    step(qtbot, window)
    label = child(window, QLabel, "perplexityLabel")
    strip = strip_of(window)
    qtbot.waitUntil(lambda: (strip.flush(), "prompt: not scored" in label.text())[1], timeout=15000)
    assert "at least two tokens" in label.toolTip()
    assert strip.prompt_count() == 0 and strip.count() == 1
    assert window.message_label.text() == ""
    step(qtbot, window)
    assert strip_of(window).count() == 2


def test_a_prompt_is_scored_once_and_a_new_session_on_it_shows_the_same_scores(qtbot, window, story_model):
    """The worker reads a prompt with the model once (per model and chain): a new session on the same prompt, with
    another seed, shows the scores again without reading it; another prompt is read."""
    scoring = window.controller.worker.scoring
    red_ball = story_model.tokenizer.encode("mia has a red ball.")
    generated(qtbot, window, seed=3)
    first = prompt_scored(qtbot, window, red_ball)
    assert scoring.prompts_scored == 1
    window.controller.reset()
    generated(qtbot, window, seed=9)  # a new session on the same prompt
    again = prompt_scored(qtbot, window, red_ball)  # the strip shows engine.score's values again
    strip = strip_of(window)
    assert scoring.prompts_scored == 1 and strip.prompt_perplexity == first.perplexity == again.perplexity
    assert child(window, QLabel, "perplexityLabel").text().endswith(f" · prompt {first.perplexity:.2f}")
    type_prompt(qtbot, window, "tom has a big dog.")
    generate(qtbot, window)
    prompt_scored(qtbot, window, story_model.tokenizer.encode("tom has a big dog."))
    assert scoring.prompts_scored == 2


def test_a_session_replaced_as_soon_as_its_run_ends_is_not_scored(qtbot, window, story_model):
    """Story after story (as bench/window_speed.py runs them): the next prompt is sent the moment a run ends, so
    the worker reads only the prompt that stays, not each one it leaves."""
    scoring, controller = window.controller.worker.scoring, window.controller
    prompts = ["tom has a big dog.", "ben has a blue cup."]

    def next_story(_reason):
        if prompts:
            controller.window.controls.prompt.setPlainText(prompts.pop(0))
            controller.generate()

    controller.runFinished.connect(next_story)
    try:
        type_prompt(qtbot, window, "mia has a red ball.")
        generate(qtbot, window)
        qtbot.waitUntil(lambda: not prompts and not controller.running, timeout=15000)
    finally:
        controller.runFinished.disconnect(next_story)
    prompt_scored(qtbot, window, story_model.tokenizer.encode("ben has a blue cup."))
    assert scoring.prompts_scored == 1


def test_another_model_reads_the_prompt_again(qtbot, window, story_model):
    """The cached scores are the model's: once another model is in, the same prompt is read by it."""
    scoring, controller = window.controller.worker.scoring, window.controller
    red_ball = story_model.tokenizer.encode("mia has a red ball.")
    generated(qtbot, window)
    prompt_scored(qtbot, window, red_ball)
    controller.reset()
    qtbot.waitUntil(lambda: controller.known.view.steps == 0, timeout=15000)  # the worker has reset: nothing to ask
    with qtbot.waitSignal(controller.modelChanged, timeout=30000):
        controller.models.open_model(None)  # the story model again: another model object
    assert window.model is not story_model
    generated(qtbot, window)
    prompt_scored(qtbot, window, red_ball)
    assert scoring.prompts_scored == 2


def test_forced_tokens_are_marked_and_the_models_own_perplexity_stands_beside_the_whole(qtbot, window):
    """Issue 43, item 3: forced and inserted tokens topped the "least confident" list and raised the perplexity
    unmarked: the list marks them, the readout gives the model's own tokens' perplexity beside the whole text's."""
    from test_window import click_bar

    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.max_tokens.setValue(1)
    step(qtbot, window)
    window.chart.flush()
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        click_bar(qtbot, window, 9)  # an unlikely token, forced as the next step
    window.controls.max_tokens.setValue(12)
    generate(qtbot, window)
    steps = window.token_view.steps()
    forced = [i for i, s in enumerate(steps) if s.source == "forced"]
    assert forced and len(steps) > len(forced) + 3
    strip_of(window)  # drawn now
    whole = math.exp(np.mean([s.surprisal for s in steps]))
    own = math.exp(np.mean([s.surprisal for s in steps if s.source == "model"]))
    assert whole > own  # the forced token's surprisal raised it
    readout = child(window, QLabel, "perplexityLabel").text()
    assert readout.startswith(f"perplexity {whole:.2f} · model's own tokens {own:.2f}")
    assert "left out" in child(window, QLabel, "perplexityLabel").toolTip()
    rows = child(window, QListWidget, "leastConfident")
    texts = {rows.item(r).data(Qt.ItemDataRole.UserRole): rows.item(r).text() for r in range(rows.count())}
    assert (
        f"{forced[0] + 1:>4}  forced  '" in texts[forced[0]]
        and rows.item(0).data(Qt.ItemDataRole.UserRole) == forced[0]
    )
    assert not any("forced" in text for index, text in texts.items() if index not in forced)
    assert rows.textElideMode() == Qt.TextElideMode.ElideRight  # a narrow list cuts the token's end, not the mark
    assert rows.horizontalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOff  # item 6: cut, whole in the tip
    assert rows.item(0).toolTip() == rows.item(0).text()
