"""The Tree tab (issue 16): every branch of the session under the prompt, a run of tokens without a branch as
one row, the active branch bold; a click on a row makes its branch the text again. Real window, story model."""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton, QTreeWidget
from test_window import WAIT, child, generate, type_prompt


def rows(tree: QTreeWidget) -> list:
    found, pending = [], [tree.topLevelItem(0)]
    while pending:
        item = pending.pop()
        found.append(item)
        pending.extend(item.child(i) for i in range(item.childCount()))
    return found


def test_a_new_branch_keeps_the_old_one_and_a_click_brings_it_back(qtbot, window):
    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.temperature.setValue(1.0)
    window.controls.seed.setValue(3)
    generate(qtbot, window)
    first_text, first_steps = window.token_view.whole_text(), window.token_view.step_count()
    tree = child(window, QTreeWidget, "branchTree")
    assert len(rows(tree)) == 2  # the prompt, and the run as one row
    assert child(window, QLabel, "treeSummary").text() == f"{first_steps} tokens in 1 branch"
    old_leaf = window.tree_panel.path[-1]
    # a branch: click the 6th token, another seed, Continue from here
    view = window.token_view
    start, _end = view._span(5)
    cursor = view.textCursor()
    cursor.setPosition(start + 1)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.cursorRect(cursor).center())
    window.controls.seed.setValue(11)
    with qtbot.waitSignal(window.controller.runFinished, timeout=WAIT):
        qtbot.mouseClick(child(window, QPushButton, "continueButton"), Qt.MouseButton.LeftButton)
    assert window.token_view.whole_text() != first_text
    qtbot.waitUntil(lambda: len(rows(tree)) == 4, timeout=WAIT)  # prompt, the shared start, two branches
    bold = [row for row in rows(tree) if row.font(0).bold()]
    assert len(bold) == 2  # the shared start and the new branch
    old_row = window.tree_panel.row_of(old_leaf)
    assert not old_row.font(0).bold()
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        qtbot.mouseClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=tree.visualItemRect(old_row).center())
    window.controller.flush()
    assert window.token_view.whole_text() == first_text and window.token_view.step_count() == first_steps
    qtbot.waitUntil(lambda: window.tree_panel.row_of(old_leaf).font(0).bold(), timeout=WAIT)
