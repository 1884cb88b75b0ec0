"""Every command on the keyboard: the menus' shortcuts drive the real window, and Help > Keyboard shortcuts lists
them all, made from the actions themselves."""

from PySide6.QtCore import QTimer
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QApplication, QInputDialog, QTableWidget
from test_window import WAIT, step

from playground.shortcuts import ShortcutsDialog, shortcut_rows


def press(qtbot, win, keys: str) -> None:
    """The key sequence as a person types it, to the window's focused widget."""
    if not win.isActiveWindow():  # a person's keys go to the window they work in
        win.activateWindow()
        qtbot.waitUntil(win.isActiveWindow, timeout=5000)
    combo = QKeySequence(keys)[0]
    target = QApplication.focusWidget() or win
    qtbot.keyClick(target, combo.key(), combo.keyboardModifiers())


def test_the_shortcuts_dialog_lists_every_menu_shortcut(qtbot, window):
    rows = shortcut_rows(window)
    commands = {command for _menu, command, _keys in rows}
    for command in ("Generate", "Step", "Stop", "Reset", "Insert text...", "Force a token of the chart...",
                    "Continue from here", "Previous token", "Next token", "Go to token...", "Expand the tree here",
                    "Undo tree edit", "Export trace...", "Open trace...", "Model settings...", "Show inside",
                    "Show tree", "Keyboard shortcuts"):  # fmt: skip
        assert command in commands, command
    dialog = ShortcutsDialog(window)
    qtbot.addWidget(dialog)
    table = dialog.findChild(QTableWidget, "shortcutsTable")
    shown = [tuple(table.item(r, c).text() for c in range(3)) for r in range(table.rowCount())]
    assert shown == rows
    keys = [k for _menu, _command, k in rows]
    assert len(keys) == len(set(keys)), "no two commands share a key"
    assert {a.text() for a in window.shortcut_actions} <= commands


def test_f1_opens_the_shortcuts_dialog(qtbot, window):
    seen = []

    def look():
        dialog = QApplication.activeModalWidget()
        seen.append(dialog.objectName() if dialog else None)
        if dialog:
            dialog.reject()

    QTimer.singleShot(200, look)
    press(qtbot, window, "F1")
    assert seen == ["shortcutsDialog"]


def test_the_step_shortcut_takes_one_step(qtbot, window):
    window.token_view.setFocus()
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        press(qtbot, window, "Ctrl+Right")
    window.controller.flush()
    assert window.token_view.step_count() == 1


def test_alt_left_and_right_move_the_selected_token(qtbot, window):
    for _ in range(3):
        step(qtbot, window)
    window.token_view.setFocus()
    press(qtbot, window, "Alt+Left")
    assert window.token_view.selected == 2  # nothing selected: the last token
    press(qtbot, window, "Alt+Left")
    press(qtbot, window, "Alt+Left")
    press(qtbot, window, "Alt+Left")
    assert window.token_view.selected == 0
    press(qtbot, window, "Alt+Right")
    assert window.token_view.selected == 1


def test_alt_digits_bring_each_view_forward(qtbot, window):
    press(qtbot, window, "Alt+5")
    assert window.panel_shown(window.inside_panel)
    press(qtbot, window, "Alt+4")
    assert window.panel_shown(window.tree_panel) and not window.panel_shown(window.inside_panel)


def test_the_insert_shortcut_puts_the_keyboard_in_the_insert_field(qtbot, window):
    window.token_view.setFocus()
    press(qtbot, window, "Ctrl+I")
    assert QApplication.focusWidget() is window.insert_edit


def test_the_force_shortcut_forces_the_token_picked_in_its_list(qtbot, window, monkeypatch):
    step(qtbot, window)
    window.chart.flush()
    second = window.chart.shown()[1][0]
    monkeypatch.setattr(QInputDialog, "getItem", lambda parent, title, label, items, *a, **k: (items[1], True))
    press(qtbot, window, "Ctrl+Shift+F")
    step(qtbot, window)
    steps = window.token_view.steps()
    assert steps[1].token == second and steps[1].source == "forced"
