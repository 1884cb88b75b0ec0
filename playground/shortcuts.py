"""Every command of the window on the keyboard: menu actions with shortcuts (Run, Go, View, Help), and
Help > Keyboard shortcuts, a table made from the menus' actions themselves, so it lists what the keys do now.

install(window) adds the actions once the window's widgets exist; the menus File and Edit (export, open,
undo tree edit, ...) keep their own actions, which the table lists too."""

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QDockWidget,
    QInputDialog,
    QMenu,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
)  # fmt: skip

from .palette import PALETTES


def menu(window, title: str) -> QMenu:
    """The window's menu of this title ("&Run"), made at the end of the bar if there is none yet."""
    for action in window.menuBar().actions():
        if action.menu() is not None and action.text().replace("&", "") == title.replace("&", ""):
            return action.menu()
    return window.menuBar().addMenu(title)


def add(window, into: QMenu, name: str, keys, slot, object_name: str = "") -> QAction:
    keys = (keys,) if isinstance(keys, str) else tuple(keys)
    action = QAction(name, window)
    action.setShortcuts([QKeySequence(k) for k in keys])
    action.setObjectName(object_name)
    action.triggered.connect(lambda _checked=False: slot())
    into.addAction(action)
    return action


def bring_forward(widget) -> None:
    """Show the tab or dock that holds widget, and give it the keyboard focus."""
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QTabWidget):
            pages = [parent.widget(i) for i in range(parent.count())]
            parent.setCurrentWidget(next(p for p in pages if p is widget or p.isAncestorOf(widget)))
        if isinstance(parent, QDockWidget):
            parent.show()
            parent.raise_()
        parent = parent.parentWidget()
    widget.setFocus()


def views(window) -> list[tuple[str, object]]:
    """(name, widget) of the views a person switches between, in the order of their keys Alt+1, Alt+2, ..."""
    found = [
        ("Rules", "rules_panel"),
        ("Samplers", "sampler_scroll"),
        ("Seeds", "seeds_panel"),
        ("Tree", "tree_panel"),
        ("Inside", "inside_panel"),
        ("The text", "token_view"),
        ("The chart", "chart"),
        ("The prompt", "controls.prompt"),
        ("Chat", "chat_panel"),
    ]  # fmt: skip (a new view: the next key)
    shown = []
    for name, path in found:
        widget = window
        for part in path.split("."):
            widget = getattr(widget, part, None)
        if widget is not None:
            shown.append((name, widget))
    return shown


def install(window) -> list[QAction]:
    """The Run, Go, View and Help menus' actions with their shortcuts."""
    made = []
    run = menu(window, "&Run")
    for name, keys, slot in window.controls.run_commands():
        made.append(add(window, run, name, keys, slot, f"{name.lower()}Action"))
    made += [
        add(window, run, "Insert text...", "Ctrl+I", lambda: _focus_insert(window), "insertAction"),
        add(window, run, "Force a token of the chart...", "Ctrl+Shift+F", lambda: _force(window), "forceAction"),
        add(window, run, "Continue from here", "Ctrl+Shift+Return", window.continue_button.click, "continueAction"),
    ]
    go = menu(window, "&Go")
    made += [
        add(window, go, "Previous token", "Alt+Left", lambda: _select_by(window, -1), "previousTokenAction"),
        add(window, go, "Next token", "Alt+Right", lambda: _select_by(window, 1), "nextTokenAction"),
        add(window, go, "Go to token...", "Ctrl+G", lambda: _go_to(window), "goToTokenAction"),
        add(window, go, "Expand the tree here", "Ctrl+E", lambda: _expand(window), "expandAction"),
    ]
    view = menu(window, "&View")
    for number, (name, widget) in enumerate(views(window), start=1):
        made.append(add(window, view, f"Show {name.lower()}", f"Alt+{number}", lambda w=widget: bring_forward(w)))
    made.append(add(window, view, "Model settings...", "Ctrl+,", window.controls.model_settings.click,
                    "modelSettingsAction"))  # fmt: skip
    help_menu = menu(window, "&Help")
    made.append(add(window, help_menu, "Keyboard shortcuts", "F1", lambda: ShortcutsDialog(window).exec(),
                    "keyboardShortcutsAction"))  # fmt: skip
    return made


def palette_menu(window, chosen: str, apply) -> dict[str, QAction]:
    """View > Colour palette: one checkable action per palette; apply(name) on a choice."""
    submenu = menu(window, "&View").addMenu("Colour palette")
    actions = {}
    for name in PALETTES:
        action = QAction(name, window, checkable=True, checked=name == chosen)
        action.setObjectName(f"palette:{name}")
        action.triggered.connect(lambda _checked=False, n=name: apply(n))
        submenu.addAction(action)
        actions[name] = action
    return actions


def _focus_insert(window) -> None:
    window.insert_edit.setFocus()
    window.insert_edit.selectAll()


def _select_by(window, offset: int) -> None:
    view = window.token_view
    count = view.step_count()
    if count:
        here = view.selected if view.selected >= 0 else (count if offset < 0 else -1)
        view.click_step(max(0, min(count - 1, here + offset)))


def _go_to(window) -> None:
    view = window.token_view
    count = view.step_count()
    if not count:
        return
    number, ok = QInputDialog.getInt(window, "Go to token", f"Token (1 to {count}):", max(1, view.selected + 1), 1,
                                     count)  # fmt: skip
    if ok:
        view.click_step(number - 1)


def _force(window) -> None:
    shown = window.chart.shown()
    if not shown:
        return
    items = [f"{'' if row > 8 else row + 1}  '{token}'  {p:.3f}" for row, (token, p) in enumerate(shown)]
    item, ok = QInputDialog.getItem(window, "Force a token", "The token to take instead:", items, 0, False)
    if ok and item in items:
        window.chart.click_row(items.index(item))


def _expand(window) -> None:
    """Go > Expand the tree here: "here" is the token selected in the text (its node), else what the Tree's Expand
    button takes (its selected row, or the text's end)."""
    panel, selected = window.tree_panel, window.token_view.selected
    bring_forward(panel)
    if 0 <= selected < len(panel.path):
        panel.expandRequested.emit(panel.path[selected], panel.controls.expand_params())
        return
    panel.controls.expand_button.click()


def shortcut_rows(window) -> list[tuple[str, str, str]]:
    """(menu, command, keys) of every menu action that has a shortcut, in menu order."""
    rows = []

    def walk(title: str, actions) -> None:
        for action in actions:
            if action.menu() is not None:
                walk(f"{title} > {action.text().replace('&', '')}" if title else action.text().replace("&", ""),
                     action.menu().actions())  # fmt: skip
            elif action.shortcuts():
                keys = ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in action.shortcuts())
                rows.append((title, action.text().replace("&", ""), keys))

    walk("", window.menuBar().actions())
    return rows


class ShortcutsDialog(QDialog):
    def __init__(self, window):
        super().__init__(window)
        self.setWindowTitle("Keyboard shortcuts")
        self.setObjectName("shortcutsDialog")
        rows = shortcut_rows(window)
        self.table = QTableWidget(len(rows), 3, objectName="shortcutsTable")
        self.table.setHorizontalHeaderLabels(["Menu", "Command", "Keys"])
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        for row, texts in enumerate(rows):
            for column, text in enumerate(texts):
                self.table.setItem(row, column, QTableWidgetItem(text))
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 6)
        self.table.resizeColumnsToContents()  # whole names: the dialog is as wide as its table
        self.table.horizontalHeader().setStretchLastSection(True)
        width = sum(self.table.columnWidth(c) for c in range(3)) + self.table.verticalScrollBar().sizeHint().width()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)
        layout.addWidget(buttons)
        self.resize(width + 40, 560)
