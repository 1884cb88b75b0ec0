"""The Chat tab: the conversation the prompt box's message joins in chat mode. A system prompt (the template's own
default, shown, or the person's; empty is none), the turns kept so far (user and assistant), and what a person
does with them: keep the reply just written (with the message that asked for it), edit a turn (the turns after
it go; a user turn's text comes back to the prompt box), clear. The reply's thinking (between the reasoning
markers) is shown apart: folded, in its own colour, with its length; a thinking budget bounds it. A tool's output
that a rule wrote into the reply can become a tool turn, and the chat goes on after it.

The widget only lays out: the window's side (chatting.py) holds the Conversation and fills it."""

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

ROW_CHARS = 200  # of a long turn, its start in the list (the whole text in the row's tooltip)
NO_BUDGET = -1  # the budget box's lowest value: no bound on thinking
TOKEN_SHADES = ("#eef3fb", "#fbf3e6")  # alternate tokens of the rendered prompt, so each one's extent shows
SPECIAL_STYLE = "background:#5b3a8c;color:white;font-weight:bold"  # <|im_start|> and the like
THINKING_STYLE = "QPlainTextEdit { color: #6a5acd; background: #f3f0ff; font-style: italic; }"


class ChatPanel(QWidget):
    keepRequested = Signal()  # keep the reply (and the message that asked for it) as turns
    regenerateRequested = Signal()  # another reply to the same message
    editRequested = Signal(int)  # edit this turn: the turns after it go
    deleteRequested = Signal(int)  # this turn goes (the turns after it stay)
    clearRequested = Signal()
    systemChanged = Signal()  # the system prompt or its default box changed
    budgetChanged = Signal()
    renderedShown = Signal(bool)  # the rendered prompt's view opened (True) or closed
    toolTurnRequested = Signal()  # the tool output in the reply becomes a tool turn; the model answers after it

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
        self.edit_button.setToolTip("a message of yours comes back to the prompt box to change and send again; a "
                                    "reply or a tool's result is changed in place; the turns after it go (Generate "
                                    "branches there: the Tree keeps what followed)")  # fmt: skip
        self.delete_button = QPushButton("Delete turn", objectName="chatDeleteButton")
        self.delete_button.setToolTip("the selected turn goes, the others stay (Generate branches there)")
        self.clear_button = QPushButton("Clear", objectName="chatClearButton")
        self.tool_button = QPushButton("Tool output as a tool turn", objectName="chatToolTurnButton")
        self.tool_button.setToolTip("the reply up to the tool's output (a command rule's) becomes the assistant's "
                                    "turn, the output a tool turn, and the model answers after it (the Tree keeps "
                                    "the reply as it was as a branch)")  # fmt: skip
        self.budget = QSpinBox(objectName="chatThinkingBudget", minimum=NO_BUDGET, maximum=1 << 20, value=NO_BUDGET)
        self.budget.setSpecialValueText("no limit")
        self.budget.setSuffix(" tokens")
        self.budget.setToolTip("once the reply has thought this many tokens, the closing marker is inserted (a "
                               "rule's insertion: shown, replayed), as llama.cpp's reasoning budget does")  # fmt: skip
        self.markers = QLabel("", objectName="chatThinkingMarkers", wordWrap=True)
        self.thinking_toggle = QToolButton(objectName="chatThinkingToggle", checkable=True)
        self.thinking_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.thinking = QPlainTextEdit(objectName="chatThinking", readOnly=True)
        self.thinking.setStyleSheet(THINKING_STYLE)
        self.thinking.setMaximumHeight(120)
        self.answer = QLabel("", objectName="chatAnswer", wordWrap=True)
        self.rendered_toggle = QToolButton(objectName="chatRenderedToggle", checkable=True)
        self.rendered_toggle.setText("The prompt as the model reads it")
        self.rendered_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.rendered_toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.rendered_toggle.setToolTip("the conversation and your message through the model's own chat template, "
                                        "token by token (special tokens marked)")  # fmt: skip
        self.rendered = QTextEdit(objectName="chatRendered", readOnly=True)
        self.rendered.setMaximumHeight(160)
        self.rendered.hide()
        self.rendered_toggle.toggled.connect(self._show_rendered)
        self.tool_button.clicked.connect(self.toolTurnRequested)
        self.budget.valueChanged.connect(lambda _value: self.budgetChanged.emit())
        self.thinking_toggle.toggled.connect(self._fold)
        self.keep_button.clicked.connect(self.keepRequested)
        self.regenerate_button.clicked.connect(self.regenerateRequested)
        self.edit_button.clicked.connect(lambda: self.editRequested.emit(self.turns.currentRow()))
        self.clear_button.clicked.connect(self.clearRequested)
        self.delete_button.clicked.connect(lambda: self.deleteRequested.emit(self.turns.currentRow()))
        self.turns.currentRowChanged.connect(self._selected)
        self.default_system.toggled.connect(self._default_toggled)
        self.system.textChanged.connect(self.systemChanged)
        buttons = QVBoxLayout()  # two rows: a narrow dock (1024 pixels wide) keeps every button whole
        for row in ((self.keep_button, self.regenerate_button), (self.edit_button, self.delete_button,
                                                                 self.clear_button)):  # fmt: skip
            line = QHBoxLayout()
            for button in row:
                line.addWidget(button)
            line.addStretch(1)
            buttons.addLayout(line)
        budget = QHBoxLayout()
        budget.addWidget(QLabel("Thinking budget"))
        budget.addWidget(self.budget)
        budget.addWidget(self.markers, 1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.note)
        layout.addWidget(self.default_system)
        layout.addWidget(self.system)
        layout.addWidget(QLabel("Turns"))
        layout.addWidget(self.turns, 1)
        layout.addLayout(buttons)
        layout.addLayout(budget)
        layout.addWidget(self.thinking_toggle)
        layout.addWidget(self.thinking)
        layout.addWidget(self.answer)
        layout.addWidget(self.tool_button)
        layout.addWidget(self.rendered_toggle)
        layout.addWidget(self.rendered)
        self.show_turns([], None)
        self.show_reasoning(None, 0, False, "", False)
        self.set_default_text(None)

    def _selected(self, row: int) -> None:
        self.edit_button.setEnabled(row >= 0)
        self.delete_button.setEnabled(row >= 0)

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
        self._selected(self.turns.currentRow())
        self.clear_button.setEnabled(bool(turns))

    def thinking_budget(self) -> int | None:
        return None if self.budget.value() == NO_BUDGET else self.budget.value()

    def set_markers(self, opening: str, closing: str, own: bool) -> None:
        whose = "the model's own" if own else "the usual tags: this model's template names none"
        self.markers.setText(f"between {opening} and {closing} ({whose})")

    def show_reasoning(self, thinking: str | None, tokens: int, closed: bool, answer: str, tool: bool) -> None:
        """The reply being written: its thinking folded apart (None: it has none) with its length in tokens (closed:
        its closing marker is written), and its answer; tool: it holds a tool's output to make a tool turn of."""
        self.thinking_toggle.setVisible(thinking is not None)
        self.thinking_toggle.setText(f"Thinking: {tokens:,} tokens{'' if closed else ' (still thinking)'}")
        self.thinking.setPlainText(thinking or "")
        self._fold(self.thinking_toggle.isChecked())
        self.answer.setText(f"Reply: {answer}" if answer else "")
        self.answer.setVisible(bool(answer))
        self.tool_button.setVisible(tool)

    def _show_rendered(self, shown: bool) -> None:
        self.rendered_toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.rendered.setVisible(shown)
        self.renderedShown.emit(shown)

    def show_rendered(self, tokens, problem: str = "") -> None:
        """The prompt token by token ((text, special) pairs), each token shaded apart and special ones marked; or
        why there is none (problem)."""
        if problem:
            self.rendered.setPlainText(problem)
            return
        spans = []
        for i, (text, special) in enumerate(tokens):
            style = SPECIAL_STYLE if special else f"background:{TOKEN_SHADES[i % 2]}"
            shown = html.escape(text).replace("\n", "↵<br>")
            spans.append(f'<span style="{style}">{shown}</span>')
        specials = sum(special for _text, special in tokens)
        head = f'<p style="color:gray">{len(tokens):,} tokens, {specials:,} of them special</p>'
        self.rendered.setHtml(head + '<p style="font-family:monospace;white-space:pre-wrap">' + "".join(spans) + "</p>")

    def _fold(self, unfolded: bool) -> None:
        self.thinking_toggle.setArrowType(Qt.ArrowType.DownArrow if unfolded else Qt.ArrowType.RightArrow)
        self.thinking.setVisible(unfolded and self.thinking_toggle.isVisible())

    def set_note(self, text: str) -> None:
        self.note.setText(text)
        self.note.setVisible(bool(text))
