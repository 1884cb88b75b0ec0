"""The token view: the prompt in plain text, then every step's token on a background colored by its
probability; forced, rule and tool tokens underlined in their own color. Hover a token for its numbers,
click it to select its step. Appending writes at the end of the document inside one edit block per
batch, so a token costs the same at token 10 and at token 10,000."""

import bisect
import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor, QTextFormat
from PySide6.QtWidgets import QPlainTextEdit, QTextEdit, QToolTip

# Qt lays out the whole paragraph that text is appended to; a paragraph that grows without end would make
# each token dearer than the last. Past this many characters the view starts a new paragraph at the next
# word (a line break that only the view shows: text() and traces keep the model's text).
MAX_BLOCK_CHARS = 1500
COLOR_LEVELS = 20
SOURCE_COLORS = {"forced": "#e67e22", "rule": "#8e44ad", "tool": "#16a085"}  # readable on light and dark
SOURCE_LABELS = {"model": "drawn by the model", "forced": "forced by you", "rule": "inserted by a rule",
                 "tool": "inserted by a tool"}  # fmt: skip


def probability_color(p: float) -> QColor:
    """Red (unlikely) through yellow to green (likely), translucent so text stays readable on any palette."""
    color = QColor.fromHsvF(max(0.0, min(1.0, p)) / 3.0, 0.75, 0.95)
    color.setAlphaF(0.38)
    return color


def visible(token: str) -> str:
    """Make whitespace visible where it matters: a newline shows as ↵ (then breaks the line), a token of
    spaces only as middle dots."""
    if token == "\n":
        return "↵\n"
    if token and token.strip(" ") == "":
        return "·" * len(token)
    return token.replace("\n", "↵\n")


class TokenView(QPlainTextEdit):
    stepClicked = Signal(int)  # the step's index, or -1 for the prompt / empty space

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("tokenView")
        self.setReadOnly(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setUndoRedoEnabled(False)
        font = QFont("DejaVu Sans Mono")
        font.setStyleHint(QFont.StyleHint.Monospace)
        font.setPointSize(12)
        self.setFont(font)
        self.viewport().setMouseTracking(True)
        self.viewport().setCursor(Qt.CursorShape.PointingHandCursor)
        self._steps = []
        self._starts: list[int] = []  # document position where each step's text starts
        self._text_parts: list[str] = []  # prompt, then each token: the real text, not the display
        self._selected = -1
        self._formats: dict[tuple[int, str], QTextCharFormat] = {}

    # --- content -------------------------------------------------------------------------------------
    def show_session(self, prompt: str, steps) -> None:
        self.clear()
        self._steps, self._starts, self._selected = [], [], -1
        self._text_parts = [prompt]
        cursor = self._end_cursor()
        cursor.insertText(prompt, QTextCharFormat())
        self.append_steps(steps)

    def append_steps(self, steps) -> None:
        if not steps:
            return
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        cursor = self._end_cursor()
        cursor.beginEditBlock()
        for step in steps:
            if cursor.positionInBlock() > MAX_BLOCK_CHARS and step.token[:1] == " ":
                cursor.insertBlock()  # see MAX_BLOCK_CHARS
            self._starts.append(cursor.position())
            self._steps.append(step)
            self._text_parts.append(step.token)
            cursor.insertText(visible(step.token), self._format(step))
        cursor.endEditBlock()
        if at_bottom:
            bar.setValue(bar.maximum())

    def text(self) -> str:
        """The session's text (prompt plus tokens) as the engine has it."""
        return "".join(self._text_parts)

    def steps(self) -> list:
        return list(self._steps)

    def step_count(self) -> int:
        return len(self._steps)

    # --- selection -----------------------------------------------------------------------------------
    def select(self, index: int) -> None:
        self._selected = index if 0 <= index < len(self._steps) else -1
        selections = []
        if self._selected >= 0:
            start, end = self._span(self._selected)
            selection = QTextEdit.ExtraSelection()
            selection.cursor = QTextCursor(self.document())
            selection.cursor.setPosition(start)
            selection.cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
            selection.format.setProperty(QTextFormat.Property.OutlinePen, self.palette().highlight().color())
            selection.format.setBackground(self.palette().highlight())
            selection.format.setForeground(self.palette().highlightedText())
            selections.append(selection)
        self.setExtraSelections(selections)

    @property
    def selected(self) -> int:
        return self._selected

    def step_at(self, point) -> int:
        """The index of the step under a viewport point, or -1."""
        position = self.cursorForPosition(point).position()
        index = bisect.bisect_right(self._starts, position) - 1
        if index < 0:
            return -1
        start, end = self._span(index)
        return index if start <= position <= end else -1

    # --- events --------------------------------------------------------------------------------------
    def mouseMoveEvent(self, event):
        index = self.step_at(event.position().toPoint())
        if index >= 0:
            QToolTip.showText(event.globalPosition().toPoint(), self.tooltip_html(index), self.viewport())
        else:
            QToolTip.hideText()
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event):
        super().mouseReleaseEvent(event)
        if event.button() == Qt.MouseButton.LeftButton and not self.textCursor().hasSelection():
            index = self.step_at(event.position().toPoint())
            self.select(index)
            self.stepClicked.emit(index)

    def tooltip_html(self, index: int) -> str:
        step = self._steps[index]
        alternatives = "".join(
            f"<tr><td><code>{html.escape(repr(token))}</code></td><td align=right>{p:.3f}</td></tr>"
            for token, p in list(zip(step.candidates.tokens, step.candidates.raw))[:5]
        )
        if step.probability is None:
            numbers = "probability unknown: outside the server's top 20"
        else:
            rank = f"rank {step.model_rank}" if step.model_rank else "rank unknown"
            numbers = f"probability {step.probability:.4f} &nbsp; model {step.model_probability:.4f}, {rank}"
        return (
            f"<b>step {index + 1}: <code>{html.escape(repr(step.token))}</code></b> ({SOURCE_LABELS[step.source]})<br>"
            f"{numbers}<br>top 5 of the model:<table>{alternatives}</table>"
        )

    # --- helpers -------------------------------------------------------------------------------------
    def _span(self, index: int) -> tuple[int, int]:
        start = self._starts[index]
        end = self._starts[index + 1] if index + 1 < len(self._starts) else self.document().characterCount() - 1
        return start, end

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _format(self, step) -> QTextCharFormat:
        """The token's character format; probabilities are bucketed in 20ths, so the document holds a few
        dozen distinct formats however long it grows."""
        known = step.probability is not None  # a server's token outside its top N: no color to give
        key = (round(step.probability * COLOR_LEVELS) if known else -1, step.source)
        fmt = self._formats.get(key)
        if fmt is None:
            fmt = self._formats[key] = QTextCharFormat()
            fmt.setBackground(probability_color(key[0] / COLOR_LEVELS) if known else QColor(128, 128, 128, 60))
            if step.source != "model":
                fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.SingleUnderline)
                fmt.setUnderlineColor(QColor(SOURCE_COLORS[step.source]))
                fmt.setFontWeight(QFont.Weight.Bold)
                fmt.setForeground(QColor(SOURCE_COLORS[step.source]))
        return fmt
