"""The window's memory over the Tree tab's full cycle (issue 25, item 11): expand the tree, go to a leaf, delete
another leaf's branch, step; Reset. What a cycle makes, Reset frees: the tree's rows (their C++ items and
Python wrappers) and the rows' context menus. Counted, not timed: bench/window_memory.py prints the RSS."""

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QPushButton
from test_tree_panel import live_rows
from test_window import WAIT, child, generate, step, type_prompt
from test_window_tree import expand_from_end


def full_cycle(qtbot, window) -> None:
    panel = window.tree_panel
    result = expand_from_end(qtbot, window, top_k=2, depth=2, budget=6)
    leaf, other = [node for node, _p in result.leaves][:2]
    row = panel.row_of(leaf)
    panel.tree.scrollToItem(row)
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        qtbot.mouseClick(panel.tree.viewport(), Qt.MouseButton.LeftButton, pos=panel.tree.visualItemRect(row).center())
    qtbot.waitUntil(lambda: panel.path[-1] == leaf, timeout=WAIT)
    panel.menu_for(other).findChild(QAction, "deleteBranchAction").trigger()  # as the tests do: never exec'd
    qtbot.waitUntil(lambda: other not in panel.views and not window.controller.running, timeout=WAIT)
    step(qtbot, window)


def reset(qtbot, window) -> None:
    qtbot.mouseClick(child(window, QPushButton, "resetButton"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.tree_panel._old_rows, timeout=WAIT)  # the old rows go after 250 ms


def test_reset_frees_every_row_and_menu_that_the_tree_cycles_made(qtbot, window):
    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.max_tokens.setValue(6)
    after_reset = []
    for _round in range(3):
        generate(qtbot, window)
        for _cycle in range(4):
            full_cycle(qtbot, window)
        reset(qtbot, window)
        after_reset.append(live_rows())
        window.controls.prompt.setPlainText("mia has a red ball.")
    # the same rows each time: the prompt's (and any that another test left); before: 60, 119, 178, 59 a round kept
    assert after_reset[1] == after_reset[2] == after_reset[0]
    assert len(window.tree_panel.findChildren(QMenu)) <= 1  # before: 12, one per delete (7 actions each), kept
