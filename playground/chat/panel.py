"""The Chat tab: the conversation the prompt box's message joins in chat mode. A system prompt (the template's own
default, shown, or the person's; empty is none), the turns kept so far (user and assistant), and what a person
does with them: keep the reply just written (with the message that asked for it), edit a turn (the turns after
it go; a user turn's text comes back to the prompt box), clear.

The widget only lays out: the window's side (chatting.py) holds the Conversation and fills it."""

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

ROW_CHARS = 200  # of a long turn, its start in the list (the whole text in the row's tooltip)


class ChatPanel(QWidget):
    keepRequested = Signal()  # keep the reply (and the message that asked for it) as turns
    regenerateRequested = Signal()  # another reply to the same message
    editRequested = Signal(int)  # edit this turn: it and the turns after it go
    clearRequested = Signal()
    systemChanged = Signal()  # the system prompt or its default box changed

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("chatPanel")
        self.note = QLabel("", objectName="chatNote")  # chat mode off, or no template: what to do
        self.note.setWordWrap(True)
        self.default_system = QCheckBox("The template's own system prompt", objectName="chatDefaultSystem")
        self.default_system.setToolTip("send no system message: the chat template writes its own default (shown "
                                       "below, greyed); untick to write yours (empty: none)")  # fmt: skip
        self.default_system.setChecked(True)
        self.system = QPlainTextEdit(objectName="chatSystem")
        self.system.setMaximumHeight(64)
        self.turns = QListWidget(objectName="chatTurns")
        self.turns.setWordWrap(True)
        self.turns.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.keep_button = QPushButton("Keep the reply", objectName="chatKeepButton")
        self.keep_button.setToolTip("the message in the prompt box and the reply the model wrote become turns of "
                                    "the conversation; type the next message and Generate")  # fmt: skip
        self.regenerate_button = QPushButton("Regenerate", objectName="chatRegenerateButton")
        self.regenerate_button.setToolTip("another reply to the same message, with the next seed (the Tree keeps "
                                          "the one before as a branch)")  # fmt: skip
        self.edit_button = QPushButton("Edit turn", objectName="chatEditButton")
        self.edit_button.setToolTip("the selected turn and those after it go; a message of yours comes back to the "
                                    "prompt box to change and send again")  # fmt: skip
        self.clear_button = QPushButton("Clear", objectName="chatClearButton")
        self.keep_button.clicked.connect(self.keepRequested)
        self.regenerate_button.clicked.connect(self.regenerateRequested)
        self.edit_button.clicked.connect(lambda: self.editRequested.emit(self.turns.currentRow()))
        self.clear_button.clicked.connect(self.clearRequested)
        self.turns.currentRowChanged.connect(lambda row: self.edit_button.setEnabled(row >= 0))
        self.default_system.toggled.connect(self._default_toggled)
        self.system.textChanged.connect(self.systemChanged)
        buttons = QHBoxLayout()
        for button in (self.keep_button, self.regenerate_button, self.edit_button, self.clear_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.note)
        layout.addWidget(self.default_system)
        layout.addWidget(self.system)
        layout.addWidget(QLabel("Turns"))
        layout.addWidget(self.turns, 1)
        layout.addLayout(buttons)
        self.show_turns([], None)
        self.set_default_text(None)

    def _default_toggled(self, default: bool) -> None:
        self.system.setReadOnly(default)
        self.system.setEnabled(not default)
        self.systemChanged.emit()

    def system_prompt(self) -> str | None:
        """None: the template's own; else the person's text ("" is a system message with nothing in it)."""
        return None if self.default_system.isChecked() else self.system.toPlainText()

    def set_default_text(self, text: str | None) -> None:
        """The template's own system text, shown greyed while it is the one sent (None: the template writes none)."""
        self.system.setPlaceholderText(text or "(the template writes no system prompt of its own)")
        if self.default_system.isChecked():
            self.system.blockSignals(True)
            self.system.setPlainText("")
            self.system.blockSignals(False)

    def show_turns(self, turns, reply: str | None) -> None:
        """The kept turns ((role, text) pairs) and whether a reply is there to keep (its text, or None)."""
        self.turns.clear()
        for role, text in turns:
            one_line = text[:ROW_CHARS].replace("\n", " ⏎ ")
            item = QListWidgetItem(f"{role}: {one_line}{'…' * (len(text) > ROW_CHARS)}")
            item.setToolTip(text)
            self.turns.addItem(item)
        self.keep_button.setEnabled(bool(reply))
        self.regenerate_button.setEnabled(bool(reply))
        self.edit_button.setEnabled(self.turns.currentRow() >= 0)
        self.clear_button.setEnabled(bool(turns))

    def set_note(self, text: str) -> None:
        self.note.setText(text)
        self.note.setVisible(bool(text))
