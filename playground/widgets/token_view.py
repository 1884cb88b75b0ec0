"""The token view: the prompt in plain text, then every step's token on a background colored by its
probability, every other token a shade deeper so each token's extent shows; forced, rule and tool tokens
bold and underlined in their own color. A character whose bytes span several tokens shows once complete
(see playground/token_text.py). Hover a token for its numbers, click it to select its step. Appending writes at the end of the document inside one edit block per
batch, so a token costs the same at token 10 and at token 10,000."""

import bisect
import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor, QTextFormat
from PySide6.QtWidgets import QPlainTextEdit, QTextEdit, QToolTip

from ..palette import DEFAULT_PALETTE, colour
from ..token_text import REPLACEMENT, candidate_label, incomplete_tail, pending_label, split_chars
from .token_colours import (
    COLOR_LEVELS,
    COLOUR_MODES,
    SOURCE_COLORS,
    SOURCE_LABELS,
    colour_level,
    legend_marks,
    rank_text,
    visible,
)

# Qt lays out the whole paragraph that text is appended to; a paragraph that grows without end would make
# each token dearer than the last. Past this many characters the view starts a new paragraph at the next
# word (a line break that only the view shows: text() and traces keep the model's text).
MAX_BLOCK_CHARS = 1500
EMPTY_HINT = (
    "The model's text appears here, each token on a color for how likely it was (the legend below: the scale). "
    "Press Generate (Ctrl+Return) or Step (Ctrl+→)."
)
SHADE_ALPHA = (0.30, 0.50)  # alternate tokens: neighbours of similar probability still show where each ends


def legend_html(mode: str, palette: str = DEFAULT_PALETTE) -> str:
    """The legend under the view for a colour mode: the scale's swatches, then the steered tokens' marks."""
    title, marks = legend_marks(mode)
    swatches = "".join(
        f'<span style="background-color: {probability_color(level, 0, palette).name(QColor.NameFormat.HexArgb)};">'
        f"&nbsp;{value if isinstance(value, str) else f'{value:g}'}&nbsp;</span>"
        for value, level in marks
    )
    sources = " &nbsp; ".join(f'<b><u style="color:{color}">{name}</u></b>' for name, color in SOURCE_COLORS.items())
    return f"{title}: {swatches} &nbsp;&nbsp; steered tokens: {sources}"


def probability_color(p: float, shade: int = 0, palette: str = DEFAULT_PALETTE) -> QColor:
    """The palette's colour for p (playground/palette.py), translucent so text stays readable on any theme;
    shade 1 is the deeper tone every other token gets."""
    color = QColor(*colour(p, palette))
    color.setAlphaF(SHADE_ALPHA[shade])
    return color


def _raw_bytes(token_id: int, token: str) -> bytes:
    return token.encode("utf-8")


class TokenView(QPlainTextEdit):
    stepClicked = Signal(int)  # the step's index, or -1 for the prompt / empty space
    stepsChanged = Signal(int)  # the steps from this index on are new (0: a new session; see steps())
    selectionChanged = Signal(int)  # the selected step (-1: none), however it was selected

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
        self.setPlaceholderText(EMPTY_HINT)
        self._steps = []
        self._starts: list[int] = []  # document position where each step's text starts
        self._text_parts: list[str] = []  # prompt, then each token: the real text, not the display
        self.revision = 0  # counts every change of the text shown (a new session, steps appended)
        self._pieces: list[str] = []  # what each step shows (a split character: on its first token)
        self._pending_from: int | None = None  # first step of a character whose last bytes have not come
        self._token_bytes = _raw_bytes
        self._selected = -1
        self._formats: dict[tuple[str, int, str, int], QTextCharFormat] = {}
        self._mode = COLOUR_MODES[0]
        self.palette_name = DEFAULT_PALETTE  # the colour scale (playground/palette.py): set_palette

    def set_token_bytes(self, token_bytes) -> None:
        """token_bytes(token_id, token_text) -> the token's own bytes (from the model's tokenizer); None:
        the token's text as UTF-8 (a server's tokens, a trace of another model)."""
        self._token_bytes = token_bytes or _raw_bytes

    def colour_mode(self) -> str:
        return self._mode

    def set_colour_mode(self, mode: str) -> None:
        """Colour the tokens by this measure (one of COLOUR_MODES; another: drawn probability). The document
        is written again with the new formats, keeping the selection and the scroll position."""
        mode = mode if mode in COLOUR_MODES else COLOUR_MODES[0]
        if mode != self._mode:
            self._mode = mode
            self._write_again()

    def set_palette(self, palette: str) -> None:
        """Paint the levels with this colour scale (one of palette.PALETTES); the document is written again."""
        if palette != self.palette_name:
            self.palette_name, self._formats = palette, {}
            self._write_again()

    def _write_again(self) -> None:
        if not self._steps:
            return
        selected, scroll = self._selected, self.verticalScrollBar().value()
        self.show_session(self._text_parts[0], list(self._steps))
        self.select(selected)
        self.verticalScrollBar().setValue(scroll)

    # --- content -------------------------------------------------------------------------------------
    def show_session(self, prompt: str, steps) -> None:
        self.clear()
        self._steps, self._starts, self._pieces, self._selected, self._pending_from = [], [], [], -1, None
        self._text_parts = [prompt]
        self.revision += 1
        cursor = self._end_cursor()
        cursor.insertText(prompt, QTextCharFormat())
        self.stepsChanged.emit(0)
        self.selectionChanged.emit(-1)
        self.append_steps(steps)

    def append_steps(self, steps) -> None:
        if not steps:
            return
        self.revision += 1
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        cursor = self._end_cursor()
        cursor.beginEditBlock()
        changed_from = len(self._steps) if self._pending_from is None else self._pending_from
        if self._pending_from is not None or any(REPLACEMENT in step.token for step in steps):
            steps, pieces = self._split_characters(cursor, steps)
        else:
            pieces = [step.token for step in steps]  # whole text: the usual case, and the fast one
        for step, piece in zip(steps, pieces):
            if cursor.positionInBlock() > MAX_BLOCK_CHARS and step.token[:1] == " ":
                cursor.insertBlock()  # see MAX_BLOCK_CHARS
            self._starts.append(cursor.position())
            self._steps.append(step)
            self._text_parts.append(step.token)
            self._pieces.append(piece)
            cursor.insertText(visible(piece), self._format(step, len(self._steps) % 2))
        cursor.endEditBlock()
        if at_bottom:
            bar.setValue(bar.maximum())
        self.stepsChanged.emit(changed_from)

    def _split_characters(self, cursor, steps) -> tuple[list, list[str]]:
        """Steps to write (from the first one of an incomplete character, which is taken out of the
        document again) and what each shows, once the bytes of every character are put together."""
        start = self._pending_from if self._pending_from is not None else len(self._steps)
        if start < len(self._steps):  # rewrite the tail that held the character's first bytes
            cursor.setPosition(self._starts[start])
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            steps = self._steps[start:] + list(steps)
            del self._steps[start:], self._starts[start:], self._pieces[start:], self._text_parts[start + 1 :]
        pieces, open_at = split_chars([self._bytes(step) for step in steps])
        self._pending_from = None if open_at is None else start + open_at
        return steps, pieces

    def _bytes(self, step) -> bytes:
        try:
            return self._token_bytes(step.token_id, step.token)
        except ValueError:  # an id from another model (an opened trace): its text is all there is
            return step.token.encode("utf-8")

    def pending_bytes(self, index: int) -> bytes:
        """The bytes of a character left incomplete just before step `index` (b"" if none)."""
        return incomplete_tail(b"".join(self._bytes(step) for step in self._steps[max(0, index - 4) : index]))

    def piece(self, index: int) -> str:
        """What step `index` shows (a split character on its first token, the others empty)."""
        return self._pieces[index]

    def label(self, pending: bytes, token_id: int, token: str) -> str:
        """A candidate's text as the chart and the hover show it after the pending bytes."""
        if not pending and REPLACEMENT not in token:
            return token
        try:
            data = self._token_bytes(token_id, token)
        except ValueError:
            data = token.encode("utf-8")
        return candidate_label(pending, data, token)

    def text(self) -> str:
        """The session's text (prompt plus tokens) as the engine has it."""
        return "".join(self._text_parts)

    def tail(self, length: int) -> str:
        """The last `length` characters of text(), without joining all of it."""
        parts, size = [], 0
        for part in reversed(self._text_parts):
            parts.append(part)
            size += len(part)
            if size >= length:
                break
        return "".join(reversed(parts))[-length:]

    def has_text(self) -> bool:
        """Whether anything is shown (a prompt or a step): whole_text() without building it."""
        return bool(self._text_parts and (self._text_parts[0] or self._pieces))

    def whole_text(self) -> str:
        """The prompt and what the steps show: a character split across tokens whole (text() has the
        engine's per-token text, U+FFFD for each part)."""
        return self._text_parts[0] + "".join(self._pieces) if self._text_parts else ""

    def step_at_byte(self, offset: int) -> int:
        """The step whose shown text holds byte `offset` of whole_text() in UTF-8, or -1 (in the prompt)."""
        end = len(self._text_parts[0].encode("utf-8")) if self._text_parts else 0
        if offset < end:
            return -1
        for index, piece in enumerate(self._pieces):
            end += len(piece.encode("utf-8"))
            if offset < end:
                return index
        return len(self._pieces) - 1

    def steps(self, start: int = 0) -> list:
        """The steps shown (from index `start` on)."""
        return self._steps[start:]

    def step(self, index: int):
        return self._steps[index]

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
        self.selectionChanged.emit(self._selected)

    def click_step(self, index: int) -> None:
        """Select step `index` as a click on it would (the strip and the "least confident" list use this),
        scrolled into sight."""
        self.select(index)
        if self._selected >= 0:
            cursor = QTextCursor(self.document())
            cursor.setPosition(self._starts[self._selected])
            self.setTextCursor(cursor)
            self.ensureCursorVisible()
        self.stepClicked.emit(self._selected)

    @property
    def selected(self) -> int:
        return self._selected

    def step_at(self, point) -> int:
        """The index of the step under a viewport point, or -1 (blank space below the text is no step: Qt's
        nearest position there is the text's end)."""
        cursor = self.cursorForPosition(point)
        line = self.cursorRect(cursor)
        if not line.top() <= point.y() <= line.bottom():
            return -1
        position = cursor.position()
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
        pending = self.pending_bytes(index)
        candidates = step.candidates
        alternatives = "".join(
            f"<tr><td><code>{html.escape(repr(self.label(pending, token_id, token)))}</code></td>"
            f"<td align=right>{p:.3f}</td></tr>"
            for token_id, token, p in list(zip(candidates.token_ids, candidates.tokens, candidates.raw))[:5]
        )
        if step.probability is None:
            numbers = "probability unknown: outside the server's top 20"
        else:
            rank = f"rank {step.model_rank}" if step.model_rank else "rank unknown"
            numbers = f"probability {step.probability:.4f} &nbsp; model {step.model_probability:.4f}, {rank}"
        measures = [f"{name} {value:.2f} nats" for name, value in (("surprisal", step.surprisal),
                    ("entropy", step.entropy)) if value is not None]  # fmt: skip
        numbers += "<br>" + " &nbsp; ".join(measures) if measures else ""  # what every colour mode paints
        ranks = rank_text(step)
        if ranks:
            ranks = f"rank by stage: {html.escape(ranks)}<br>"
        return (
            f"<b>step {index + 1}: <code>{html.escape(repr(self.shown_token(index)))}</code></b> "
            f"({SOURCE_LABELS[step.source]})<br>{self._bytes_note(index)}"
            f"{numbers}<br>{ranks}top 5 of the model:<table>{alternatives}</table>"
        )

    def shown_token(self, index: int) -> str:
        step = self._steps[index]
        if REPLACEMENT not in step.token:
            return step.token
        return self.label(self.pending_bytes(index), step.token_id, step.token)

    def _bytes_note(self, index: int) -> str:
        """For a token that holds part of a character: its own bytes and the character they make."""
        step = self._steps[index]
        if REPLACEMENT not in step.token:
            return ""
        first = index
        while first > 0 and not self._pieces[first]:
            first -= 1  # the character is shown on the token that holds its first byte
        last = first
        while last + 1 < len(self._pieces) and not self._pieces[last + 1]:
            last += 1
        together = (
            f"steps {first + 1}-{last + 1} spell {html.escape(repr(self._pieces[first]))}" if last > first else ""
        )
        return (f"token id {step.token_id}, bytes {html.escape(pending_label(self._bytes(step)))}"
                f"{'; ' + together if together else ''}<br>")  # fmt: skip

    # --- helpers -------------------------------------------------------------------------------------
    def _span(self, index: int) -> tuple[int, int]:
        start = self._starts[index]
        end = self._starts[index + 1] if index + 1 < len(self._starts) else self.document().characterCount() - 1
        return start, end

    def _end_cursor(self) -> QTextCursor:
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def _format(self, step, shade: int = 0) -> QTextCharFormat:
        """The token's character format; the colour mode's level is bucketed in 20ths, so the document holds
        a few dozen distinct formats however long it grows. Steered tokens keep the text's own color (orange
        on red could not be read) and get a bold underline in their source's color."""
        level = colour_level(step, self._mode)  # None: a server's token outside its top N, no color to give
        known = level is not None
        key = (self._mode, round(level * COLOR_LEVELS) if known else -1, step.source, shade)
        fmt = self._formats.get(key)
        if fmt is None:
            fmt = self._formats[key] = QTextCharFormat()
            unknown = QColor(128, 128, 128, 50 + 40 * shade)
            fmt.setBackground(probability_color(key[1] / COLOR_LEVELS, shade, self.palette_name) if known else unknown)
            if step.source != "model":
                fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.SingleUnderline)
                fmt.setUnderlineColor(QColor(SOURCE_COLORS[step.source]))
                fmt.setFontWeight(QFont.Weight.Bold)
        return fmt

    def format_at(self, index: int) -> QTextCharFormat:
        """The character format step `index` is drawn with (tests read what a person sees)."""
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._starts[index] + 1)
        return cursor.charFormat()
