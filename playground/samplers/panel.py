"""The samplers panel: token healing, a grammar, the settings of the sampler stages beyond the contract's
four (penalties, DRY, XTC, typical-p, top-n-σ, logit bias) and the order the stages run in (drag a stage, or
Up / Down; two presets). Healing and grammars are offered where the model can do them (set_model).

A spin box shows "off" at the value that switches its stage off. The DRY breakers and the logit bias are text
fields, checked as they are typed: what the engine refuses is named under the field with the engine's own
message, and `problem()` says so (the controls then keep Generate off). A stage whose settings are neutral
shows greyed in the order list: it does not run."""

import math
import re

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QFont, QPalette, QValidator
from PySide6.QtWidgets import (
    QAbstractItemView,
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

import engine

from ..widgets.chart import stage_label

DEFAULTS = engine.Settings()
PENALTY_RANGE = 100.0  # repeat, presence and frequency penalties, DRY's multiplier: far past any useful value
MAX_LAST_N = 1_000_000  # tokens the penalties and DRY look back (-1: the whole text): past any context
SPIN_WIDTH = 64  # the narrowest a spin box gets ("0.10", "all", "off" and the arrows)
STAGE_MIME = "application/x-token-playground-stage"
ERROR_COLOR = "#e74c3c"
GRAMMAR_SHOWN = 40  # characters of a grammar the report of what the controls cannot show quotes
BAN_WORDS = ("ban", "-inf", "-infinity")
# what the controls report of a setting they cannot show exactly ("repeat penalty 500 shown as 100")
LABELS = {"repeat_penalty": "repeat penalty", "presence_penalty": "presence penalty",
          "frequency_penalty": "frequency penalty", "repeat_last_n": "penalty last n",
          "dry_multiplier": "DRY multiplier", "dry_base": "DRY base", "dry_allowed_length": "DRY allowed length",
          "dry_last_n": "DRY last n", "dry_sequence_breakers": "DRY breakers", "xtc_probability": "XTC probability",
          "xtc_threshold": "XTC threshold", "typical_p": "typical-p", "top_n_sigma": "top-n-σ",
          "logit_bias": "logit bias", "samplers": "order", "heal": "token healing", "grammar": "grammar"}  # fmt: skip
# GBNF examples for the grammar field (llama.cpp's grammar format)
GRAMMAR_EXAMPLES = {
    "JSON object": r"""root   ::= object
object ::= "{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}" ws
value  ::= object | array | string | number | ("true" | "false" | "null") ws
array  ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]*)) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws     ::= [ \t\n]{0,20}""",
    "yes or no": 'root ::= ("yes" | "no") "."',
    "a date (YYYY-MM-DD)": 'root ::= [0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( [0-2] [0-9] | "3" [01] )',
}
# each spin box: setting, objectName, range, decimals (0: an int), step, the words shown for values, tooltip
SPINS = (
    ("repeat_penalty", "repeatPenaltyBox", 0.01, PENALTY_RANGE, 2, 0.05, {1.0: "off"},
     "repetition penalty: the scores of tokens in the last n are divided by it (multiplied where negative); 1 is "
     "off, above 1 repeats less"),
    ("presence_penalty", "presencePenaltyBox", -PENALTY_RANGE, PENALTY_RANGE, 2, 0.1, {0.0: "off"},
     "subtracted once from the score of each token in the last n; 0 is off"),
    ("frequency_penalty", "frequencyPenaltyBox", -PENALTY_RANGE, PENALTY_RANGE, 2, 0.1, {0.0: "off"},
     "subtracted from a token's score once per time it occurs in the last n; 0 is off"),
    ("repeat_last_n", "repeatLastNBox", -1, MAX_LAST_N, 0, 1, {-1: "all", 0: "off"},
     "how many of the last tokens (prompt included) the penalties look at; all: the whole text, off: none"),
    ("dry_multiplier", "dryMultiplierBox", 0.0, PENALTY_RANGE, 2, 0.1, {0.0: "off"},
     "DRY (don't repeat yourself): how hard a token that would continue a repeat is penalised; 0 is off"),
    ("dry_base", "dryBaseBox", 1.0, 100.0, 2, 0.05, {},
     "DRY's penalty grows as multiplier × base ^ (repeat length - allowed length)"),
    ("dry_allowed_length", "dryAllowedLengthBox", 1, 1000, 0, 1, {}, "repeats up to this many tokens long go unpenalised"),
    ("dry_last_n", "dryLastNBox", -1, MAX_LAST_N, 0, 1, {-1: "all", 0: "off"},
     "how many of the last tokens DRY looks at; all: the whole text, off: none"),
    ("xtc_probability", "xtcProbabilityBox", 0.0, 1.0, 2, 0.05, {0.0: "off"},
     "XTC (exclude top choices): the chance it acts at a step; 0 is off"),
    ("xtc_threshold", "xtcThresholdBox", 0.0, 1.0, 2, 0.01, {},
     "XTC removes every token above this probability but the least likely of them (above 0.5: it never acts)"),
    ("typical_p", "typicalPBox", 0.0, 1.0, 2, 0.05, {0.0: "off"},
     "locally typical sampling: keep the tokens closest to the expected surprise, up to this much probability; "
     "off (or 1) keeps all"),
    ("top_n_sigma", "topNSigmaBox", 0.0, 1000.0, 2, 0.1, {0.0: "off"},
     "keep the tokens whose scores are within n standard deviations of the best; off keeps all"),
)  # fmt: skip
_ESCAPES = {"n": "\n", "t": "\t", "s": " ", ",": ",", "\\": "\\"}


# --- text forms ----------------------------------------------------------------------------------------------
def breakers_text(breakers) -> str:
    """DRY's breakers as the field shows them: comma-separated, with \\n, \\t, \\, and \\\\, and \\s for a
    space at either end of one (parse_breakers reads it back)."""
    return ", ".join(_escaped(b) for b in breakers)


def _escaped(breaker: str) -> str:
    text = breaker.replace("\\", "\\\\").replace(",", "\\,").replace("\n", "\\n").replace("\t", "\\t")
    core = text.strip(" ")
    if not core:
        return "\\s" * len(text)
    start = text.index(core)
    return "\\s" * start + core + "\\s" * (len(text) - start - len(core))


def parse_breakers(text: str) -> list[str]:
    """The field's text -> the breakers: separated by commas (or newlines), the spaces around each dropped
    (an escaped space, \\s, stays), empty ones left out."""
    items, current, chars = [], [], iter(text)
    for char in chars:
        if char == "\\":
            following = next(chars, "")
            current.append((_ESCAPES.get(following, "\\" + following), True))
        elif char in ",\n":
            items.append(current)
            current = []
        else:
            current.append((char, False))
    items.append(current)
    breakers = []
    for item in items:
        while item and item[0] == (" ", False):
            item = item[1:]
        while item and item[-1] == (" ", False):
            item = item[:-1]
        if item:
            breakers.append("".join(part for part, _escaped in item))
    return breakers


def _number_text(value: float) -> str:
    """A bias as short as it reads exactly (float(text) gives it back)."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def bias_text(pairs) -> str:
    """(id, bias) pairs (bias None or -inf: banned) -> "15:-2.5, 42:ban"."""
    return ", ".join(f"{i}:{'ban' if b is None or b == -math.inf else _number_text(float(b))}" for i, b in pairs)


def parse_bias(text: str) -> list:
    """ "15:-2.5, 42:ban" -> [[15, -2.5], [42, None]] (None bans); ValueError for an item that is not id:bias.
    Values are handed on as typed where they are no number, for the engine to name what is wrong."""
    pairs = []
    for item in re.split(r"[,;\n]", text):
        item = item.strip()
        if not item:
            continue
        if item.count(":") != 1:
            raise ValueError(f"logit bias: {item!r} is not id:bias (e.g. 15:-2.5, or 15:ban to ban token 15)")
        token_id, bias = (part.strip() for part in item.split(":"))
        pairs.append([_number(token_id, int), None if bias.lower() in BAN_WORDS else _number(bias, float)])
    return pairs


def _number(text: str, kind):
    try:
        return kind(text)
    except ValueError:
        return text


# --- spin boxes with "off" -----------------------------------------------------------------------------------
class _Specials:
    """Words shown instead of some values ("off" at the value that switches a stage off, "all" at -1)."""

    specials: dict = {}

    def set_up(self, low, high, specials: dict, tip: str) -> None:
        self.specials = specials
        self.setRange(low, high)
        self.setToolTip(tip)
        self.setKeyboardTracking(False)
        self.setCorrectionMode(QAbstractSpinBox.CorrectionMode.CorrectToNearestValue)
        self.setMinimumWidth(SPIN_WIDTH)  # not as wide as its widest value: the panel fits a narrow column

    def textFromValue(self, value) -> str:
        for special, word in self.specials.items():
            if value == special:
                return word
        return super().textFromValue(value)

    def valueFromText(self, text: str):
        word = text.strip().lower()
        for special, known in self.specials.items():
            if word == known:
                return special
        return super().valueFromText(text)

    def validate(self, text: str, pos: int):
        word = text.strip().lower()
        for known in self.specials.values():
            if word and known.startswith(word):
                state = QValidator.State.Acceptable if word == known else QValidator.State.Intermediate
                return state, text, pos
        return super().validate(text, pos)


class SpecialDoubleSpin(_Specials, QDoubleSpinBox):
    def __init__(self, name: str, low: float, high: float, decimals: int, step: float, specials: dict, tip: str):
        super().__init__(objectName=name, decimals=decimals, singleStep=step)
        self.set_up(low, high, specials, tip)


class SpecialIntSpin(_Specials, QSpinBox):
    def __init__(self, name: str, low: int, high: int, specials: dict, tip: str):
        super().__init__(objectName=name)
        self.set_up(low, high, specials, tip)


# --- the order -----------------------------------------------------------------------------------------------
class StageList(QListWidget):
    """The stages in the order they run; drag one to move it. A drop moves the stage it names (its own
    format: nothing else can be dropped), and reports it with `moved`."""

    moved = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("samplerOrder")
        self.setDragDropMode(QAbstractItemView.DragDropMode.InternalMove)
        self.setDefaultDropAction(Qt.DropAction.MoveAction)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setToolTip("The order the stages run in: drag a stage, or select it and use Up / Down. Greyed "
                        "stages are off (their settings are neutral) and do not run.")  # fmt: skip

    def mimeTypes(self) -> list[str]:
        return [STAGE_MIME]

    def mimeData(self, items) -> QMimeData:
        data = QMimeData()
        data.setData(STAGE_MIME, ",".join(item.data(Qt.ItemDataRole.UserRole) for item in items).encode())
        return data

    def dropEvent(self, event) -> None:
        names = bytes(event.mimeData().data(STAGE_MIME)).decode().split(",")
        order = self.order()
        if len(names) != 1 or names[0] not in order:
            event.ignore()
            return
        point = event.position().toPoint()
        index = self.indexAt(point)
        if index.isValid():
            target = index.row() + (point.y() > self.visualRect(index).center().y())
        else:
            target = self.count() if point.y() > 0 else 0
        source = order.index(names[0])
        self.move(source, target - (source < target))
        # the move is done: a MoveAction would make the view remove the dragged row after the drag
        event.setDropAction(Qt.DropAction.CopyAction)
        event.accept()

    def order(self) -> tuple[str, ...]:
        return tuple(self.item(row).data(Qt.ItemDataRole.UserRole) for row in range(self.count()))

    def move(self, source: int, target: int) -> None:
        target = max(0, min(self.count() - 1, target))
        if target == source:
            return
        item = self.takeItem(source)
        self.insertItem(target, item)
        self.setCurrentRow(target)
        self.moved.emit()


class SamplerPanel(QWidget):
    changed = Signal()  # any value or the order changed (also while a field holds something the engine refuses)

    def __init__(self, vocab_size: int | None = None, parent=None):
        super().__init__(parent)
        self.setObjectName("samplerPanel")
        self.vocab_size = vocab_size
        d = DEFAULTS
        self.spins = {}  # setting name -> its spin box (also an attribute by that name)
        for name, object_name, low, high, decimals, step, specials, tip in SPINS:
            if decimals:
                spin = SpecialDoubleSpin(object_name, low, high, decimals, step, specials, tip)
            else:
                spin = SpecialIntSpin(object_name, low, high, specials, tip)
            spin.setValue(getattr(d, name) or 0)
            spin.valueChanged.connect(lambda _value: self.changed.emit())
            self.spins[name] = spin
            setattr(self, name, spin)
        self.dry_breakers = QLineEdit(objectName="dryBreakersEdit")
        self.dry_breakers.setToolTip(
            "A repeat does not continue across these texts. Separate them with commas; write a newline as \\n, "
            "a tab as \\t, a space as \\s, a comma as \\, and a backslash as \\\\")  # fmt: skip
        self.dry_breakers_error = _error_label("dryBreakersError")
        self.logit_bias = QLineEdit(objectName="logitBiasEdit")
        self.logit_bias.setPlaceholderText("id:bias, id:ban  (e.g. 15:-2.5, 42:ban)")
        self.logit_bias.setToolTip(
            "Added to a token's score at the logit bias stage (the first by default), by token id (hover a bar in "
            "the chart for its id); ban (or -inf) removes the token")  # fmt: skip
        self.logit_bias_error = _error_label("logitBiasError")
        self.heal = QCheckBox("Heal the token boundary", objectName="healBox")
        self.heal.setToolTip("Cut the prompt's (and each inserted text's) last token and let the model spell it "
                             "again: a prompt that ends in a space or mid-word then continues as the model "
                             "would have written it")  # fmt: skip
        self.heal.toggled.connect(lambda _on: self.changed.emit())
        self.grammar_examples = QComboBox(objectName="grammarExamples")
        self.grammar_examples.addItem("Grammar: examples...")
        self.grammar_examples.addItems(list(GRAMMAR_EXAMPLES))
        self.grammar_examples.activated.connect(self._use_example)
        self.grammar = QPlainTextEdit(objectName="grammarEdit")
        self.grammar.setPlaceholderText('GBNF, e.g. root ::= ("yes" | "no") "."  (empty: no grammar)')
        self.grammar.setToolTip("A GBNF grammar (llama.cpp's format, with a root rule) the generated text must "
                                "follow: the chart's grammar stage shows what the model wanted against what it "
                                "allowed")  # fmt: skip
        self.grammar.setFixedHeight(64)
        self.grammar.textChanged.connect(self.changed.emit)
        self.grammar_note = QLabel("", objectName="grammarNote")
        self.grammar_note.setWordWrap(True)
        self.grammar_note.hide()

        # the order
        self.order_list = StageList()
        self.up = QPushButton("Up", objectName="samplerUp")
        self.up.setToolTip("run the selected stage one earlier")
        self.down = QPushButton("Down", objectName="samplerDown")
        self.down.setToolTip("run the selected stage one later")
        self.llama_order = QPushButton("llama.cpp order", objectName="llamaCppOrderButton")
        self.llama_order.setToolTip(
            "llama.cpp's default order: " + " → ".join(map(stage_label, engine.LLAMA_CPP_ORDER))
        )
        self.default_order = QPushButton("Default order", objectName="defaultOrderButton")
        self.default_order.setToolTip("this app's default: score changes first, then the generation contract's "
                                      "four, then the other filters: " + " → ".join(map(stage_label, engine.SAMPLERS)))  # fmt: skip
        self.up.clicked.connect(lambda: self._step_selected(-1))
        self.down.clicked.connect(lambda: self._step_selected(1))
        self.llama_order.clicked.connect(lambda: self.set_order(engine.LLAMA_CPP_ORDER))
        self.default_order.clicked.connect(lambda: self.set_order(engine.SAMPLERS))
        self.order_list.moved.connect(self.changed.emit)
        self.order_list.currentRowChanged.connect(lambda _row: self._enable_moves())
        self._active: dict[str, bool] = {}
        self.set_order(engine.SAMPLERS)

        self._breakers, self._bias = list(d.dry_sequence_breakers), []  # the last values the engine took
        self._problems = {"dry_sequence_breakers": None, "logit_bias": None}
        self.dry_breakers.setText(breakers_text(d.dry_sequence_breakers))
        self.dry_breakers.textChanged.connect(lambda _text: self._check_breakers())
        self.logit_bias.textChanged.connect(lambda _text: self._check_bias())
        self._layout()

    def _layout(self) -> None:
        grid = QGridLayout()
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(3)
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(3, 1)
        rows = [("Penalties and bias", None),
                ("Repeat", self.repeat_penalty, "Presence", self.presence_penalty),
                ("Frequency", self.frequency_penalty, "Last n", self.repeat_last_n),
                ("Logit bias", self.logit_bias), (None, self.logit_bias_error),
                ("DRY (don't repeat yourself)", None),
                ("Multiplier", self.dry_multiplier, "Base", self.dry_base),
                ("Allowed len.", self.dry_allowed_length, "Last n", self.dry_last_n),
                ("Breakers", self.dry_breakers), (None, self.dry_breakers_error),
                ("Filters", None),
                ("Top-n-σ", self.top_n_sigma, "Typical-p", self.typical_p),
                ("XTC prob.", self.xtc_probability, "XTC thresh.", self.xtc_threshold)]  # fmt: skip
        for row, entry in enumerate(rows):
            if entry[1] is None:  # a section's heading
                grid.addWidget(_heading(entry[0], top=row > 0), row, 0, 1, 4)
                continue
            for column in range(0, len(entry), 2):
                label, widget = entry[column], entry[column + 1]
                if label is not None:
                    text = QLabel(label)
                    text.setToolTip(widget.toolTip())
                    text.setBuddy(widget)
                    grid.addWidget(text, row, column)
                span = 3 if len(entry) == 2 else 1
                grid.addWidget(widget, row, column + 1, 1, span)

        buttons = QVBoxLayout()
        for button in (self.up, self.down, self.llama_order, self.default_order):
            buttons.addWidget(button)
        buttons.addStretch(1)
        order_row = QHBoxLayout()
        order_row.addWidget(self.order_list, 1)
        order_row.addLayout(buttons)

        grammar_row = QHBoxLayout()
        grammar_row.addWidget(self.heal)
        grammar_row.addStretch(1)
        grammar_row.addWidget(self.grammar_examples)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(_heading("Healing and grammar", top=False))
        layout.addLayout(grammar_row)
        layout.addWidget(self.grammar)
        layout.addWidget(self.grammar_note)
        layout.addLayout(grid)
        layout.addWidget(_heading("Order (first runs first)", top=True))
        layout.addLayout(order_row)
        layout.addStretch(1)
        rows_shown = len(engine.SAMPLERS)
        self.order_list.setFixedHeight(
            self.order_list.sizeHintForRow(0) * rows_shown + 2 * self.order_list.frameWidth() + 2
        )

    # --- values ----------------------------------------------------------------------------------------------
    def values(self) -> dict:
        """The panel's engine settings (a field holding something the engine refuses gives its last good value:
        see problem())."""
        values = {name: round(spin.value(), 2) if isinstance(spin, QDoubleSpinBox) else spin.value()
                  for name, spin in self.spins.items()}  # fmt: skip
        values["typical_p"] = values["typical_p"] or None
        values["top_n_sigma"] = values["top_n_sigma"] or None
        values["dry_sequence_breakers"] = list(self._breakers)
        values["logit_bias"] = [[token_id, None if bias == -math.inf else bias] for token_id, bias in self._bias]
        values["samplers"] = list(self.order())
        values["heal"] = self.heal.isEnabled() and self.heal.isChecked()
        grammar = self.grammar.toPlainText()
        values["grammar"] = grammar if grammar.strip() and self.grammar.isEnabled() else None
        return values

    def set_model(self, local_sampling: bool, grammars: bool, heal_by_default: bool) -> None:
        """What the model in use can do: healing where the engine samples (on by default for GGUF files),
        grammars on the llama.cpp backend (else the field is off, and a note says why)."""
        self.heal.setEnabled(local_sampling)
        self.heal.setChecked(local_sampling and heal_by_default)
        self.grammar.setEnabled(grammars)
        self.grammar_examples.setEnabled(grammars)
        self.grammar_note.setText("" if grammars else "Grammars need the llama.cpp backend (open a GGUF file with it).")
        self.grammar_note.setVisible(not grammars)

    def _use_example(self, index: int) -> None:
        if index > 0:
            self.grammar.setPlainText(GRAMMAR_EXAMPLES[self.grammar_examples.itemText(index)])
        self.grammar_examples.setCurrentIndex(0)

    def set_values(self, settings: dict) -> list[str]:
        """Show these settings (the panel's keys among them). -> what cannot be shown exactly."""
        asked = {k: v for k, v in settings.items() if k in LABELS}
        not_shown = []
        for name, spin in self.spins.items():
            if name in asked:
                spin.setValue(float(asked[name] or 0) if isinstance(spin, QDoubleSpinBox) else int(asked[name] or 0))
        if "dry_sequence_breakers" in asked:
            self.dry_breakers.setText(breakers_text(asked["dry_sequence_breakers"]))
        if "logit_bias" in asked:
            pairs = asked["logit_bias"]
            pairs = pairs.items() if isinstance(pairs, dict) else pairs
            self.logit_bias.setText(bias_text(pairs))
        if "samplers" in asked:
            self.set_order(asked["samplers"])
        if "heal" in asked:
            self.heal.setChecked(bool(asked["heal"]))
        if "grammar" in asked:
            self.grammar.setPlainText(asked["grammar"] or "")
        shown = self.values()
        for name, value in asked.items():
            if name == "samplers":
                same = [stage for stage in shown[name] if stage in value] == list(value)
            elif name == "logit_bias":
                same = _bias_pairs(value) == _bias_pairs(shown[name]) or self._problems[name] is not None
            elif name == "dry_sequence_breakers":
                same = list(value) == shown[name] or self._problems[name] is not None
            else:
                same = (value or None) == (shown[name] or None)
            if not same:
                not_shown.append(f"{LABELS[name]} {_shown_text(self, name, value)} shown as "
                                 f"{_shown_text(self, name, shown[name])}")  # fmt: skip
        return not_shown

    def problem(self) -> str | None:
        """What the engine refuses in a field (its message), or None."""
        return next((p for p in self._problems.values() if p), None)

    def set_vocab_size(self, vocab_size: int | None) -> None:
        """The model's vocabulary size (None: unknown): logit bias ids are checked against it."""
        self.vocab_size = vocab_size
        self._check_bias()

    # --- the order -------------------------------------------------------------------------------------------
    def order(self) -> tuple[str, ...]:
        return self.order_list.order()

    def set_order(self, names) -> None:
        """Show this order; stages it leaves out (they are off, or the engine refuses the settings) follow in
        the default order."""
        names = [n for n in names if n in engine.SAMPLERS]
        names += [n for n in engine.SAMPLERS if n not in names]
        if tuple(names) == self.order():
            return
        selected = self.order_list.currentItem()
        selected = selected.data(Qt.ItemDataRole.UserRole) if selected is not None else None
        self.order_list.clear()
        for name in names:
            item = QListWidgetItem(stage_label(name))
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsDragEnabled)
            self.order_list.addItem(item)
        if selected is not None:
            self.order_list.setCurrentRow(names.index(selected))
        self._paint_active()
        self._enable_moves()
        self.changed.emit()

    def show_active(self, active: dict[str, bool]) -> None:
        """Grey the stages that are off ({stage: runs})."""
        if active != self._active:
            self._active = dict(active)
            self._paint_active()

    def is_active(self, name: str) -> bool:
        return self._active.get(name, True)

    def _paint_active(self) -> None:
        palette = self.palette()
        on_color = palette.color(QPalette.ColorGroup.Active, QPalette.ColorRole.Text)
        off_color = palette.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text)
        for row in range(self.order_list.count()):
            item = self.order_list.item(row)
            name = item.data(Qt.ItemDataRole.UserRole)
            on = self.is_active(name)
            item.setText(f"{row + 1}. {stage_label(name)}" + ("" if on else "  (off)"))
            item.setForeground(on_color if on else off_color)
            font = QFont(self.order_list.font())
            font.setItalic(not on)
            item.setFont(font)
            greedy = " (at 0, greedy takes the most likely token after the last stage)" if name == "temperature" else ""
            item.setToolTip(f"{stage_label(name)}: " + ("runs" + greedy if on else "off (its settings are neutral): "
                                                        "it does not run"))  # fmt: skip

    def _step_selected(self, delta: int) -> None:
        row = self.order_list.currentRow()
        if row >= 0:
            self.order_list.move(row, row + delta)

    def _enable_moves(self) -> None:
        row = self.order_list.currentRow()
        self.up.setEnabled(row > 0)
        self.down.setEnabled(0 <= row < self.order_list.count() - 1)

    # --- checks ----------------------------------------------------------------------------------------------
    def _check_breakers(self) -> None:
        breakers = parse_breakers(self.dry_breakers.text())
        try:
            engine.Settings(dry_sequence_breakers=breakers)
        except ValueError as error:
            self._set_problem("dry_sequence_breakers", str(error))
        else:
            self._breakers = breakers
            self._set_problem("dry_sequence_breakers", None)
        self.changed.emit()

    def _check_bias(self) -> None:
        try:
            pairs = engine.Settings(logit_bias=parse_bias(self.logit_bias.text())).check_vocab(self.vocab_size)
        except ValueError as error:
            self._set_problem("logit_bias", str(error))
        else:
            self._bias = list(pairs.logit_bias)
            self._set_problem("logit_bias", None)
        self.changed.emit()

    def _set_problem(self, name: str, message: str | None) -> None:
        self._problems[name] = message
        field, label = {"dry_sequence_breakers": (self.dry_breakers, self.dry_breakers_error),
                        "logit_bias": (self.logit_bias, self.logit_bias_error)}[name]  # fmt: skip
        label.setText(message or "")
        label.setVisible(bool(message))
        field.setStyleSheet(f"QLineEdit {{ border: 1px solid {ERROR_COLOR}; }}" if message else "")


def _bias_pairs(value) -> tuple:
    try:
        return engine.Settings(logit_bias=value.items() if isinstance(value, dict) else value).logit_bias
    except ValueError:
        return ()


def _shown_text(panel: SamplerPanel, name: str, value) -> str:
    """A setting's value as the report of what the controls cannot show writes it ("0.125", "off")."""
    if name == "samplers":
        return " → ".join(map(stage_label, value))
    if name == "logit_bias":
        return repr(bias_text(_bias_pairs(value)) or "none")
    if name == "dry_sequence_breakers":
        return repr(breakers_text(value))
    if value is None or value is False:
        return "off"
    if name == "grammar":  # a grammar can be long: its start and size
        return f"{_cut(value, GRAMMAR_SHOWN)!r} ({len(value):,} characters)" if isinstance(value, str) else "on"
    if name not in panel.spins:  # token healing
        return "on"
    word = panel.spins[name].specials.get(value)
    return word if word is not None else f"{value:g}" if isinstance(value, (int, float)) else repr(value)


def _cut(text: str, length: int) -> str:
    return text if len(text) <= length else text[: length - 1] + "…"


def _heading(text: str, top: bool) -> QLabel:
    label = QLabel(text)
    font = label.font()
    font.setBold(True)
    label.setFont(font)
    if top:
        label.setContentsMargins(0, 3, 0, 0)
    return label


def _error_label(name: str) -> QLabel:
    label = QLabel("", objectName=name)
    label.setWordWrap(True)
    label.setStyleSheet(f"color: {ERROR_COLOR};")
    label.hide()
    return label
