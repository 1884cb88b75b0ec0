"""The controls: the prompt, the sampler settings, and the run buttons. Values outside what the engine
accepts cannot be entered (ranges, special 'off' values); a prompt the model cannot encode is underlined
at the offending character with the engine's own message. The other sampler stages' settings and their
order are in `samplers` (a SamplerPanel, which the window lays out beside the rules); they join settings(),
and while one of its fields holds something the engine refuses, Generate and Step stay off."""

import random

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSlider,
    QSpinBox,
    QTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

import engine
from engine import MAX_SEED, MAX_TEMPERATURE

from ..samplers.panel import SamplerPanel
from .eliding_combo import ElidingComboBox

SLIDER_TEMPERATURE = 5.0  # the slider covers the useful range; the spin box takes the engine's whole range
SETTING_LABELS = {"max_new_tokens": "max new tokens", "temperature": "temperature", "top_k": "top-k",
                  "top_p": "top-p", "min_p": "min-p", "seed": "seed"}  # fmt: skip
ERROR_COLOR, WARNING_COLOR = "#e74c3c", "#d68910"


class PromptEdit(QPlainTextEdit):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("promptEdit")
        self.setPlaceholderText("Type a prompt, then Generate (Ctrl+Return) or Step (Ctrl+Right)")
        self.setTabChangesFocus(True)
        self.setMinimumHeight(60)
        self.setMaximumHeight(140)

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), 84)  # four lines; the splitter gives it more on request

    def mark_error(self, position: int | None, color: str = ERROR_COLOR) -> None:
        """Underline the character at `position` (None clears the mark)."""
        selections = []
        if position is not None:
            selection = QTextEdit.ExtraSelection()
            cursor = QTextCursor(self.document())
            cursor.setPosition(position)
            cursor.setPosition(min(position + 1, len(self.toPlainText())), QTextCursor.MoveMode.KeepAnchor)
            selection.cursor = cursor
            selection.format.setUnderlineStyle(QTextCharFormat.UnderlineStyle.WaveUnderline)
            mark = QColor(color)
            selection.format.setUnderlineColor(mark)
            mark.setAlpha(70)
            selection.format.setBackground(mark)
            selections.append(selection)
        self.setExtraSelections(selections)


class Controls(QWidget):
    generateClicked = Signal()
    stepClicked = Signal()
    stopClicked = Signal()
    resetClicked = Signal()

    def __init__(self, vocab_size: int, context_length: int, parent=None):
        super().__init__(parent)
        self.model_picker = ElidingComboBox(
            "The model to run: the built-in story model, a GGUF file found on this computer (with the engine that "
            "runs it), any GGUF file, or a server",
            objectName="modelPicker",
        )
        self.model_settings = QPushButton("Settings...", objectName="modelSettingsButton")
        self.model_settings.setToolTip("How the model's file is opened: engine, context size, CPU threads, GPU layers")
        self.chat_format = QCheckBox("Chat format", objectName="chatFormatBox")
        self.chat_format.setToolTip("Send the prompt as a user's turn, rendered with the model's own chat template")
        self.chat_format.setEnabled(False)
        self.load_progress = QProgressBar(objectName="loadProgress")
        self.load_progress.setTextVisible(True)
        self.load_progress.setFormat("loading the model... %p%")
        self.load_progress.hide()
        self.prompt = PromptEdit()
        self.prompt_error = QLabel("")
        self.prompt_error.setObjectName("promptError")
        self.prompt_error.setWordWrap(True)
        self.prompt_error.setStyleSheet(f"color: {ERROR_COLOR};")
        self.prompt_error.hide()

        self.temperature_slider = QSlider(Qt.Orientation.Horizontal)
        self.temperature_slider.setRange(0, int(SLIDER_TEMPERATURE * 100))
        self.temperature = QDoubleSpinBox(objectName="temperatureSpin", decimals=2, singleStep=0.05)
        self.temperature.setRange(0.0, MAX_TEMPERATURE)  # two decimals: 0 (greedy) or >= 0.01
        self.temperature.setSpecialValueText("0 (greedy)")
        self.temperature.setToolTip(
            "0 is greedy: the most likely token after every other stage; otherwise softmax(scores / T)"
        )
        self.temperature_slider.valueChanged.connect(self._temperature_slid)
        self.temperature.valueChanged.connect(lambda v: self.temperature_slider.setValue(round(v * 100)))

        self.top_k = QSpinBox(objectName="topKSpin")
        self.top_k.setRange(0, vocab_size)
        self.top_k.setSpecialValueText("off")
        self.top_k.setToolTip(f"keep the k most likely tokens (1 to {vocab_size}); off keeps all")
        self.top_p = QDoubleSpinBox(objectName="topPSpin", decimals=2, singleStep=0.05)
        self.top_p.setRange(0.0, 1.0)
        self.top_p.setSpecialValueText("off")
        self.top_p.setToolTip("keep the smallest set of likely tokens whose probabilities sum to p; off keeps all")
        self.min_p = QDoubleSpinBox(objectName="minPSpin", decimals=3, singleStep=0.01)
        self.min_p.setRange(0.0, 1.0)
        self.min_p.setSpecialValueText("off")
        self.min_p.setToolTip("keep tokens at least min-p times as likely as the top one; off keeps all")
        self.seed = QSpinBox(objectName="seedSpin")
        self.seed.setRange(0, MAX_SEED)
        self.seed.setToolTip("the random seed: the same seed and settings give the same text")
        self.new_seed = QToolButton(objectName="newSeedButton", text="New seed")
        self.new_seed.setToolTip("new random seed")
        self.new_seed.clicked.connect(lambda: self.seed.setValue(random.randint(0, MAX_SEED)))
        self.max_tokens = QSpinBox(objectName="maxTokensSpin")
        self.max_tokens.setRange(1, max(1, context_length))
        self.max_tokens.setToolTip("stop after this many new tokens")
        self.samplers = SamplerPanel(vocab_size)  # laid out by the window
        self._running, self._can_start = False, True

        self.generate = QPushButton("Generate", objectName="generateButton")
        self.generate.setToolTip("Generate until the model stops (Ctrl+Return)")
        self.step = QPushButton("Step", objectName="stepButton")
        self.step.setToolTip("Take one token (Ctrl+Right)")
        self.stop = QPushButton("Stop", objectName="stopButton")
        self.stop.setToolTip("Stop generating (Escape)")
        self.stop.setEnabled(False)
        self.reset = QPushButton("Reset", objectName="resetButton")
        self.reset.setToolTip("Clear the text and start over (Ctrl+R)")
        self.generate.setDefault(True)
        for button, signal in ((self.generate, self.generateClicked), (self.step, self.stepClicked),
                               (self.stop, self.stopClicked), (self.reset, self.resetClicked)):  # fmt: skip
            button.clicked.connect(signal)

        for spin in (self.temperature, self.top_k, self.top_p, self.min_p, self.seed, self.max_tokens):
            spin.setKeyboardTracking(False)
        for spin in (self.temperature, self.top_k, self.top_p, self.min_p):
            spin.valueChanged.connect(lambda _value: self._show_active_stages())
        self.samplers.changed.connect(self._samplers_changed)
        self._show_active_stages()

        grid = QGridLayout()
        grid.setHorizontalSpacing(10)
        grid.addWidget(QLabel("Temperature"), 0, 0)
        temperature_row = QHBoxLayout()
        temperature_row.addWidget(self.temperature_slider, 1)
        temperature_row.addWidget(self.temperature)
        grid.addLayout(temperature_row, 0, 1, 1, 3)
        grid.addWidget(QLabel("Top-k"), 1, 0)
        grid.addWidget(self.top_k, 1, 1)
        grid.addWidget(QLabel("Top-p"), 1, 2)
        grid.addWidget(self.top_p, 1, 3)
        grid.addWidget(QLabel("Min-p"), 2, 0)
        grid.addWidget(self.min_p, 2, 1)
        grid.addWidget(QLabel("Max new"), 2, 2)
        grid.addWidget(self.max_tokens, 2, 3)
        grid.addWidget(QLabel("Seed"), 3, 0)
        seed_row = QHBoxLayout()
        seed_row.addWidget(self.seed, 1)
        seed_row.addWidget(self.new_seed)
        grid.addLayout(seed_row, 3, 1, 1, 3)

        buttons = QHBoxLayout()
        for button in (self.generate, self.step, self.stop, self.reset):
            buttons.addWidget(button)

        model_row = QHBoxLayout()
        model_row.addWidget(QLabel("Model"))
        model_row.addWidget(self.model_picker, 1)
        model_row.addWidget(self.model_settings)
        prompt_row = QHBoxLayout()
        prompt_row.addWidget(QLabel("Prompt"))
        prompt_row.addStretch(1)
        prompt_row.addWidget(self.chat_format)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(model_row)
        layout.addWidget(self.load_progress)
        layout.addLayout(prompt_row)
        layout.addWidget(self.prompt)
        layout.addWidget(self.prompt_error)
        layout.addLayout(grid)
        layout.addLayout(buttons)

    def _temperature_slid(self, value: int) -> None:
        # The slider follows the spin box, pinned at its end above 5: only a move of its own sets a value.
        if min(round(self.temperature.value() * 100), self.temperature_slider.maximum()) != value:
            self.temperature.setValue(value / 100)

    # --- values ----------------------------------------------------------------------------------------
    def settings(self) -> dict:
        """The engine settings the controls show (0 means off for top-k, top-p and min-p), the samplers panel's
        included (a field of it that holds what the engine refuses gives its last good value: settings_problem
        says so)."""
        return {
            "max_new_tokens": self.max_tokens.value(),
            "temperature": round(self.temperature.value(), 2),
            "top_k": self.top_k.value() or None,
            "top_p": round(self.top_p.value(), 2) or None,
            "min_p": round(self.min_p.value(), 3) or None,
            "seed": self.seed.value(),
            **self.samplers.values(),
        }

    def settings_problem(self) -> str | None:
        """The engine's message for a samplers field it refuses (a logit bias it cannot read), or None."""
        return self.samplers.problem()

    def set_settings(self, settings: dict) -> list[str]:
        """Show engine settings (validated ones: a trace's, or remembered ones). -> what the controls could
        not show exactly ("max new tokens 5000 shown as 2048"): a spin box keeps to its range and decimals."""
        shown_now = self.settings()
        asked = dict(
            {k: shown_now[k] for k in SETTING_LABELS}, **{k: v for k, v in settings.items() if k in SETTING_LABELS}
        )
        self.max_tokens.setValue(int(asked["max_new_tokens"]))
        self.temperature.setValue(float(asked["temperature"] or 0.0))
        self.top_k.setValue(int(asked["top_k"] or 0))
        self.top_p.setValue(float(asked["top_p"] or 0.0))
        self.min_p.setValue(float(asked["min_p"] or 0.0))
        self.seed.setValue(int(asked["seed"] or 0))
        panel_not_shown = self.samplers.set_values(settings)
        shown = self.settings()
        return [f"{label} {asked[name] or 'off'} shown as {shown[name] or 'off'}"
                for name, label in SETTING_LABELS.items() if (asked[name] or None) != (shown[name] or None)] + (
            panel_not_shown)  # fmt: skip

    def _samplers_changed(self) -> None:
        self._show_active_stages()
        self.set_running(self._running, self._can_start)  # a field the engine refuses keeps Generate off

    def _show_active_stages(self) -> None:
        """Grey the stages in the samplers' order that do not run with the settings shown: the contract's
        four where neutral (temperature always runs: it decides greedy or sampled), the others where off."""
        settings = self.settings()
        try:
            checked = engine.Settings(**settings)
        except (ValueError, TypeError):
            return  # (cannot happen: every control keeps to what the engine takes)
        neutral = {"top_k": settings["top_k"] is None, "top_p": settings["top_p"] in (None, 1),
                   "min_p": not settings["min_p"]}  # fmt: skip
        self.samplers.show_active({stage: checked.active(stage) and not neutral.get(stage, False)
                                   for stage in engine.SAMPLERS})  # fmt: skip

    def run_commands(self) -> list[tuple[str, tuple[str, ...], object]]:
        """(name, keys, slot) of the run's commands, which the window gives shortcuts (playground/shortcuts.py).
        Generate and Step wait, as their buttons do, until the samplers' fields hold what the engine takes."""
        return [("Generate", ("Ctrl+Return", "Ctrl+Enter"), self._when_settings_ok(self.generateClicked)),
                ("Step", ("Ctrl+Right",), self._when_settings_ok(self.stepClicked)),
                ("Stop", ("Escape",), self.stopClicked.emit), ("Reset", ("Ctrl+R",), self.resetClicked.emit)]  # fmt: skip

    def _when_settings_ok(self, signal):
        def emit():
            if self.settings_problem() is None:
                signal.emit()

        return emit

    def set_model_limits(self, vocab_size: int, context_length: int, has_chat_template: bool) -> None:
        self.top_k.setRange(0, vocab_size)
        self.top_k.setToolTip(f"keep the k most likely tokens (1 to {vocab_size}); off keeps all")
        self.max_tokens.setRange(1, max(1, context_length))
        self.chat_format.setEnabled(has_chat_template)
        self.chat_format.setChecked(has_chat_template)

    def show_prompt_error(self, message: str | None, position: int | None = None, warning: bool = False) -> None:
        """A message under the prompt, the character it is about marked; a warning (amber) allows Generate."""
        if message is None and not self.prompt_error.text():
            return  # nothing shown, nothing to show (a style sheet set again restyles the label: each new prompt)
        color = WARNING_COLOR if warning else ERROR_COLOR
        self.prompt.mark_error(position, color)
        self.prompt_error.setText(message or "")
        self.prompt_error.setStyleSheet(f"color: {color};")
        self.prompt_error.setVisible(bool(message))

    def set_running(self, running: bool, can_start: bool) -> None:
        """Generate and Step on where nothing runs and a run can start (the prompt checked, and the samplers'
        fields hold what the engine takes), Stop while something runs."""
        self._running, self._can_start = running, can_start
        can_start = can_start and self.settings_problem() is None
        for button, enabled in ((self.generate, not running and can_start), (self.step, not running and can_start),
                                (self.stop, running)):  # fmt: skip
            if button.isEnabled() != enabled:
                button.setEnabled(enabled)
