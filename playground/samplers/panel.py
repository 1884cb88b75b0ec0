"""The samplers panel: token healing, a grammar, the settings of the sampler stages beyond the contract's
four (penalties, DRY, XTC, typical-p, top-n-σ, logit bias) and the order the stages run in (drag a stage, or
Up / Down; two presets). Healing and grammars are offered where the model can do them (set_model).

A spin box shows "off" at the value that switches its stage off. The DRY breakers and the logit bias are text
fields, checked as they are typed: what the engine refuses is named under the field with the engine's own
message, and `problem()` says so (the controls then keep Generate off). A stage whose settings are neutral
shows greyed in the order list: it does not run."""

import math

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

import engine

from ..widgets.chart_rows import stage_label
from .order import StageOrder
from .parse import (
    GRAMMAR_EXAMPLES,
    GRAMMAR_SHOWN,
    LABELS,
    SPINS,
    bias_pairs,
    bias_text,
    breakers_text,
    cut,
    parse_bias,
    parse_breakers,
)  # fmt: skip
from .spins import SpecialDoubleSpin, SpecialIntSpin

DEFAULTS = engine.Settings()
ERROR_COLOR = "#e74c3c"


class SamplerPanel(StageOrder, QWidget):
    changed = Signal()  # any value or the order changed (also while a field holds something the engine refuses)

    def __init__(self, vocab_size: int | None = None, parent=None):
        super().__init__(parent)
        self.setObjectName("samplerPanel")
        self.vocab_size = vocab_size
        self._read: dict | None = None  # the fields' values, read again after a change (values())
        self.changed.connect(self._forget_values)  # first: every other slot of `changed` reads them new
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

        self._make_order()  # the stages' order: the list, Up / Down, the two presets (order.py)

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
        see problem()). The fields are read once per change (the window asks several times a run); healing and
        the grammar each time (whether they are enabled changes with the model, not by a signal)."""
        if self._read is None:
            self._read = self._read_values()
        read = self._read
        values = {**read, "dry_sequence_breakers": list(read["dry_sequence_breakers"]),
                  "logit_bias": [list(pair) for pair in read["logit_bias"]], "samplers": list(read["samplers"])}  # fmt: skip
        values["heal"] = self.heal.isEnabled() and self.heal.isChecked()
        grammar = self.grammar.toPlainText()
        values["grammar"] = grammar if grammar.strip() and self.grammar.isEnabled() else None
        return values

    def _read_values(self) -> dict:
        values = {name: round(spin.value(), 2) if isinstance(spin, QDoubleSpinBox) else spin.value()
                  for name, spin in self.spins.items()}  # fmt: skip
        values["typical_p"] = values["typical_p"] or None
        values["top_n_sigma"] = values["top_n_sigma"] or None
        values["dry_sequence_breakers"] = list(self._breakers)
        values["logit_bias"] = [[token_id, None if bias == -math.inf else bias] for token_id, bias in self._bias]
        values["samplers"] = list(self.order())
        return values

    def _forget_values(self) -> None:
        self._read = None

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
                same = bias_pairs(value) == bias_pairs(shown[name]) or self._problems[name] is not None
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


def _shown_text(panel: SamplerPanel, name: str, value) -> str:
    """A setting's value as the report of what the controls cannot show writes it ("0.125", "off")."""
    if name == "samplers":
        return " → ".join(map(stage_label, value))
    if name == "logit_bias":
        return repr(bias_text(bias_pairs(value)) or "none")
    if name == "dry_sequence_breakers":
        return repr(breakers_text(value))
    if value is None or value is False:
        return "off"
    if name == "grammar":  # a grammar can be long: its start and size
        return f"{cut(value, GRAMMAR_SHOWN)!r} ({len(value):,} characters)" if isinstance(value, str) else "on"
    if name not in panel.spins:  # token healing
        return "on"
    word = panel.spins[name].specials.get(value)
    return word if word is not None else f"{value:g}" if isinstance(value, (int, float)) else repr(value)


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
