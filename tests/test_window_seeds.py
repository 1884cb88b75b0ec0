"""The Seeds tab (issue 16, many seeds at once): seeds run in the worker from where the text is, with the
controls' settings; the distinct continuations are listed by frequency; a click puts a seed in the controls
and Generate then writes exactly that continuation. Real window, story model, offscreen."""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QListWidget, QPushButton, QSpinBox
from test_window import WAIT, child, generate, step, type_prompt

from playground.seeds.seeding import STALE_SEEDS


def run_seeds(qtbot, win, count):
    child(win, QSpinBox, "seedCount").setValue(count)
    with qtbot.waitSignal(win.controller.seeding.shown, timeout=WAIT) as blocker:
        qtbot.mouseClick(child(win, QPushButton, "runSeedsButton"), Qt.MouseButton.LeftButton)
    return blocker.args[0]


def click_row(qtbot, rows, index):
    rows.scrollToItem(rows.item(index))
    qtbot.mouseClick(rows.viewport(), Qt.MouseButton.LeftButton, pos=rows.visualItemRect(rows.item(index)).center())


def test_seeds_list_their_continuations_and_a_chosen_seed_writes_its_own(qtbot, window):
    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.temperature.setValue(1.0)
    run = run_seeds(qtbot, window, 30)
    rows = child(window, QListWidget, "seedCompletions")
    completions = run.completions()
    assert rows.count() == len(completions) and sum(count for _text, count in completions) == 30
    assert rows.item(0).text().startswith(f"{completions[0][1]:>4} ×")
    summary = child(window, QLabel, "seedSummary").text()
    assert summary.startswith("30 seeds:") and "kept the first sentence's colour and object" in summary
    assert window.token_view.step_count() == 0  # the seeds leave the text as it was
    index = rows.count() - 1  # the rarest: its seed must write it, not the most likely story
    click_row(qtbot, rows, index)
    seed = rows.item(index).data(Qt.ItemDataRole.UserRole)
    assert window.controls.seed.value() == seed
    generate(qtbot, window)
    assert window.token_view.whole_text() == run.text + run.continuation(seed)


def test_seeds_from_a_later_point_continue_it(qtbot, window):
    type_prompt(qtbot, window, "ben has a blue kite.")
    window.controls.temperature.setValue(1.2)
    for _ in range(3):
        step(qtbot, window)
    text = window.token_view.whole_text()
    run = run_seeds(qtbot, window, 12)
    assert run.text == text and window.token_view.whole_text() == text
    rows = child(window, QListWidget, "seedCompletions")
    click_row(qtbot, rows, 0)
    seed = rows.item(0).data(Qt.ItemDataRole.UserRole)
    generate(qtbot, window)
    assert window.token_view.whole_text() == text + run.continuation(seed)
    assert rows.count() == 0  # the text moved on: the old seeds' list would not write what it says any more
    assert child(window, QLabel, "seedSummary").text().startswith("The text changed since those seeds ran")


def test_seeds_from_the_selected_token_continue_from_there(qtbot, window):
    """Issue 24: "Run seeds from here" ignored the selected token. With a token selected, the seeds continue from
    it (what Continue from here keeps), the text stays as it is, and the Seeds tab says where they started;
    a chosen seed then writes its continuation there, bit for bit."""
    from test_window import token_point

    type_prompt(qtbot, window, "ben has a blue kite.")
    window.controls.temperature.setValue(1.2)
    generate(qtbot, window)
    view = window.token_view
    text, steps = view.whole_text(), [s.to_dict() for s in view.steps()]
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=token_point(view, 2))
    assert view.selected == 2
    token = view.step(2).token
    run = run_seeds(qtbot, window, 12)
    assert run.at == 3 and run.text == "ben has a blue kite." + "".join(s.token for s in view.steps()[:3])
    assert view.whole_text() == text and [s.to_dict() for s in view.steps()] == steps  # the text is as it was
    summary = child(window, QLabel, "seedSummary").text()
    assert summary.startswith(f"12 seeds from step 3, {token!r}: ")
    rows = child(window, QListWidget, "seedCompletions")
    click_row(qtbot, rows, rows.count() - 1)
    seed = rows.item(rows.count() - 1).data(Qt.ItemDataRole.UserRole)
    assert window.message_label.text() == (f"Seed {seed} writes that continuation from step 3, {token!r}: "
                                           "Continue from here (that token selected) writes it")  # fmt: skip
    assert view.selected == 2
    with qtbot.waitSignal(window.controller.runFinished, timeout=WAIT):
        qtbot.mouseClick(window.continue_button, Qt.MouseButton.LeftButton)
    window.controller.flush()
    assert view.whole_text() == run.text + run.continuation(seed)
    assert [s.to_dict() for s in view.steps()[3:]] == [s.to_dict() for s in run.steps[seed]]


def test_seeds_cleared_by_a_step_or_a_generate_say_so_in_the_tab_and_the_status_bar(qtbot, window):
    """Issue 24: the seeds' results vanished after Generate without a word in the status bar (it still showed the
    seeds' summary), and a Step left them listed though they no longer continue the text."""
    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.temperature.setValue(1.0)
    rows, summary = child(window, QListWidget, "seedCompletions"), child(window, QLabel, "seedSummary")
    for move in (step, generate):
        run_seeds(qtbot, window, 8)
        assert rows.count() > 0
        move(qtbot, window)
        assert rows.count() == 0
        assert summary.text() == STALE_SEEDS
        assert window.message_label.text() == f"Seeds cleared. {STALE_SEEDS}"


def test_a_refused_generate_keeps_the_seeds(qtbot, window):
    """A Generate the session refuses (the story has ended) changes no text: the seeds from an earlier token stay
    listed (they were wiped, with the false note that the text had changed)."""
    generate(qtbot, window)
    window.token_view.click_step(2)
    run_seeds(qtbot, window, 6)
    rows = child(window, QListWidget, "seedCompletions")
    count = rows.count()
    window.token_view.select(-1)
    qtbot.mouseClick(child(window, QPushButton, "generateButton"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "cannot go on" in window.message_label.text(), timeout=WAIT)
    qtbot.wait(100)
    assert rows.count() == count > 0
    assert child(window, QLabel, "seedSummary").text() != STALE_SEEDS
