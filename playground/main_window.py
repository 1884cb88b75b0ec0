"""The main window: lays the widgets out, builds the menu, remembers settings. The controller does the
rest; the worker runs the model."""

import json
from pathlib import Path

from PySide6.QtCore import QSettings, QSize, Qt
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

import engine

from .chat.panel import ChatPanel
from .compare.panel import ComparisonPanel
from .controller import Controller
from .docks import Docks
from .documents.recovery import RecoveryBanner
from .errors import ExceptionHook
from .file_menu import file_menu
from .inside.panel import InsidePanel
from .inside.steering_banner import SteeringBanner
from .models.picker import example_prompt
from .palette import DEFAULT_PALETTE, PALETTES
from .remembered import RememberedReader, notes_text, prompt_to_remember, quoted
from .rules.panel import RulesPanel
from .run_speed import runtime_text
from .seeds.panel import SeedsPanel
from .shortcuts import install as install_shortcuts
from .shortcuts import menu, palette_menu
from .steer.panel import SteerPanel
from .strip.uncertainty_strip import UncertaintyStrip
from .tree.panel import TreePanel
from .widgets.chart import DistributionChart
from .widgets.controls import Controls
from .widgets.elided_label import ElidedLabel
from .widgets.scroll_column import ScrollColumn
from .widgets.steady_label import SteadyLabel
from .widgets.token_colours import COLOUR_MODES
from .widgets.token_view import TokenView, legend_html

HINT = ("Step one token with Ctrl+→ · click a bar to force that token · click a token to see its "
        "distribution, then Continue from here to branch")  # fmt: skip


def default_size(screen) -> QSize:
    """1360x820, or what the screen has room for (a 1366x768 laptop: the window's frame and the desktop's panels
    take their share)."""
    if screen is None:
        return QSize(1360, 820)
    room = screen.availableGeometry().size()
    return QSize(min(1360, room.width() - 20), min(820, room.height() - 60))


class MainWindow(QMainWindow):
    def __init__(self, model=None, settings: QSettings | None = None):
        super().__init__()
        self.model = model if model is not None else engine.load_model()
        self.prefs = settings if settings is not None else QSettings("TokenPlayground", "Token Playground")
        self.resize(default_size(self.screen()))

        self.controls = Controls(self.model.vocab_size or 1_000_000, self.model.context_length)  # a server's: unknown
        self.token_view = TokenView()
        self.chart = DistributionChart()
        self.uncertainty_strip = UncertaintyStrip()
        self.comparison_panel = ComparisonPanel()
        self.colour_by = QComboBox(objectName="colourBy")
        self.colour_by.addItems(COLOUR_MODES)
        self.colour_by.setToolTip("what the tokens' background colours show")
        self.colour_by.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)  # "drawn probability" whole
        self.legend = QLabel("", objectName="legendLabel")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)  # the window can be narrow (1024 px)
        self.rules_panel = RulesPanel()
        self.seeds_panel = SeedsPanel()
        self.tree_panel = TreePanel()
        self.inside_panel = InsidePanel()
        self.steer_panel = SteerPanel()
        self.chat_panel = ChatPanel()
        self.insert_edit = QLineEdit(objectName="insertTextEdit")
        self.insert_edit.setPlaceholderText("Text to write into the model's output, as if it had said it")
        self.insert_edit.setMinimumWidth(self.insert_edit.fontMetrics().horizontalAdvance("Text to write in"))
        self.insert_button = QPushButton("Insert", objectName="insertButton")
        self.insert_button.setToolTip(
            "Append this text as forced tokens (Return); Step or Generate then carries on from it"
        )
        self.insert_error = QLabel("", objectName="insertError")
        self.insert_error.setStyleSheet("color: #e74c3c;")
        self.insert_error.setWordWrap(True)  # a long message wraps instead of widening the window
        self.insert_error.hide()
        self.continue_button = QPushButton("Continue from here", objectName="continueButton")
        self.continue_button.setToolTip(
            "Rewind to the selected token and generate a new branch with the current settings"
        )
        self.continue_button.setEnabled(False)
        self.healing_note = QLabel("", objectName="healingNote")  # token healing: the text the model spells next
        self.healing_note.setWordWrap(True)
        self.healing_note.setStyleSheet("color: #666; font-style: italic;")
        self.healing_note.hide()
        self.hint = QLabel(HINT, objectName="hintLabel")
        self.hint.setWordWrap(True)
        self.steering_banner = SteeringBanner(instead_of=self.hint)  # in the hint's place while heads are steered
        self.stop_reason = SteadyLabel("", min_width=240, objectName="stopReasonLabel")  # its texts: no layout
        self.speed_label = SteadyLabel("", min_width=130, objectName="speedLabel")
        self.runtime_label = QLabel(runtime_text(self.model), objectName="runtimeLabel")  # what runs the model
        self.runtime_label.setToolTip("The engine that runs the model, its CPU threads, and its context size")
        self.runtime_label.setContentsMargins(14, 0, 2, 0)  # apart from the speed beside it
        self.message_label = ElidedLabel("", objectName="messageLabel")  # one line: the whole text in its tooltip
        self.recovery_banner = RecoveryBanner()  # "The last session ended unexpectedly: Restore / Discard"

        self._layout()
        self._menu()
        self._wire_strip()
        self.controller = Controller(self, self.model)
        self.controller.modelChanged.connect(lambda model: self.controls.samplers.set_vocab_size(model.vocab_size))
        self.controller.modelChanged.connect(lambda model: self.runtime_label.setText(runtime_text(model)))
        self.controls.samplers.changed.connect(self._mark_sampler_problem)
        self.exception_hook = ExceptionHook(self.controller.show_error)  # a failing slot reaches the status bar
        self.exception_hook.install()
        self.shortcut_actions = install_shortcuts(self)  # Run, Go, View, Help: every command on the keyboard
        self.palette_actions = palette_menu(self, DEFAULT_PALETTE, self.set_palette)
        self.reset_layout_action = self.docks.fill_menu(menu(self, "&View"))  # each dock, and Reset layout
        self._restore()
        self.controller.check_prompt()
        self.controller.begin()  # the untitled session's first state; the last session reopened (or offered)

    # --- public interface ------------------------------------------------------------------------------
    def session(self) -> "engine.Session | None":
        """The worker's live session, for tests to look into once the worker is idle (the window itself
        reads only the worker's SessionView: controller.known)."""
        return self.controller.worker.session

    def export_trace(self, path, branches: str = "all") -> Path:
        """Save the current session's trace (the engine's JSON, written atomically): every branch of its tree,
        or the active one alone (branches="active")."""
        trace = self.controller.traces.trace(branches)  # made by the worker; ValueError when there is nothing to export
        engine.save_trace(trace, path)
        which = "" if branches == "all" else " of the active branch alone"
        self.message_label.setText(f"Exported {len(trace['steps'])} steps{which} to {path}")
        return Path(path)

    def open_trace(self, path) -> dict:
        trace = engine.load_trace(path)  # ValueError names the first bad field
        self.controller.traces.open_trace(trace)
        return trace

    # --- layout ------------------------------------------------------------------------------------------
    def _layout(self) -> None:
        insert_row = QHBoxLayout()
        insert_row.addWidget(QLabel("Insert text"))
        insert_row.addWidget(self.insert_edit, 1)
        insert_row.addWidget(self.insert_button)
        insert_row.addWidget(self.continue_button)

        text_column = QWidget()
        text_layout = QVBoxLayout(text_column)
        text_layout.setContentsMargins(0, 0, 0, 0)
        text_layout.addWidget(self.hint)
        text_layout.addWidget(self.steering_banner)
        text_layout.addWidget(self.token_view, 1)
        text_layout.addWidget(self.healing_note)
        legend_row = QHBoxLayout()
        legend_row.addWidget(QLabel("Colour by"))
        legend_row.addWidget(self.colour_by)
        legend_row.addWidget(self.legend, 1)
        text_layout.addLayout(legend_row)
        text_layout.addLayout(insert_row)
        text_layout.addWidget(self.insert_error)

        self.sampler_scroll = sampler_scroll = QScrollArea(objectName="samplerScroll")  # a short window scrolls
        sampler_scroll.setWidget(self.controls.samplers)
        sampler_scroll.setWidgetResizable(True)
        sampler_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        sampler_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.docks = Docks(self)  # every other view: the chart, the panels, the strip (playground/docks.py)

        main = QSplitter(Qt.Orientation.Horizontal)
        left = QWidget()  # the controls keep their height (a warning under the prompt grows them)
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(self.controls)
        left_layout.addStretch(1)
        main.addWidget(ScrollColumn(left, "leftColumn"))  # a short window scrolls it: the window never grows
        main.addWidget(text_column)
        main.setSizes([300, 520])
        main.setStretchFactor(1, 1)
        main.setChildrenCollapsible(False)

        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(10, 8, 10, 4)
        layout.addWidget(self.recovery_banner)
        layout.addWidget(main, 1)
        self.setCentralWidget(central)
        status = self.statusBar()
        self.speed_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        status.addWidget(self.stop_reason)
        status.addWidget(self.message_label, 1)
        status.addPermanentWidget(self.speed_label)
        status.addPermanentWidget(self.runtime_label)

    def _wire_strip(self) -> None:
        """The strip follows the view's steps and selection; a click on it (or on a "least confident" row)
        selects the step as a click on the token would. The colour switch recolours the view."""
        view, strip = self.token_view, self.uncertainty_strip
        strip.set_token_text(view.shown_token)
        view.stepsChanged.connect(lambda start: strip.set_steps(view.steps(start), start))
        view.selectionChanged.connect(strip.mark)
        strip.stepClicked.connect(view.click_step)
        self.colour_by.currentTextChanged.connect(self.set_colour_mode)

    def set_colour_mode(self, mode: str) -> None:
        """Colour the tokens by "drawn probability", "surprisal", "entropy" or "rank"; the legend follows."""
        if self.colour_by.currentText() != mode:
            self.colour_by.setCurrentText(mode)  # comes back here through the signal
            return
        self.token_view.set_colour_mode(mode)
        self.legend.setText(legend_html(self.token_view.colour_mode(), self.token_view.palette_name))

    def set_palette(self, palette: str) -> None:
        """Paint probabilities with this colour scale (playground/palette.py): the tokens, the legend, Inside."""
        self.token_view.set_palette(palette)
        self.inside_panel.set_palette(palette)
        self.legend.setText(legend_html(self.token_view.colour_mode(), palette))
        for name, action in self.palette_actions.items():
            action.setChecked(name == palette)

    def _menu(self) -> None:
        self.session_menu, self.replay_action = file_menu(self)  # playground/file_menu.py

    def show_samplers(self) -> None:
        self.show_panel(self.sampler_scroll)

    def show_panel(self, panel) -> None:
        """Show the dock that holds this panel (self.tree_panel, self.chart, ...) in front of those stacked with it."""
        self.docks.show(panel)

    def panel_shown(self, panel) -> bool:
        """Whether the panel's dock is shown and in front (not behind another tab)."""
        return self.docks.raised(panel)

    def _mark_sampler_problem(self) -> None:
        """The Samplers tab says when one of its fields keeps Generate off (and comes to the front, where the
        field's message is, if the person is not there already: opening a trace, another model)."""
        problem = self.controls.settings_problem()
        dock = self.docks.dock(self.sampler_scroll)
        title = "Samplers ⚠" if problem else "Samplers"
        if dock.windowTitle() != title:
            dock.setWindowTitle(title)  # the title's sign, not a colour: the tab shows it too
            if problem:
                self.show_samplers()

    # --- remembered across launches ----------------------------------------------------------------------
    def _restore(self) -> None:
        """What was remembered, read defensively (remembered.py): a value the window cannot show starts from its
        default, and the status bar says which and why."""
        read = RememberedReader(self.prefs)
        self.controls.prompt.setPlainText(read.prompt(f"prompt/{self.model.name}", example_prompt(self.model)))
        self.docks.restore(read)  # the layout of the docks, as the window was closed
        read.notes += self.restore_settings(self.model, notes=read.notes)
        self.chart.set_stage(read.choice("stage", self.chart.stages(), "final", "chart stage"))
        self.set_palette(read.choice("palette", PALETTES, DEFAULT_PALETTE, "colour palette"))
        self.set_colour_mode(read.choice("colourBy", COLOUR_MODES, COLOUR_MODES[0], "colour by"))
        rank_by = self.uncertainty_strip.rank_by
        ranks = [rank_by.itemText(index) for index in range(rank_by.count())]
        rank_by.setCurrentText(read.choice("leastConfidentBy", ranks, "surprisal", "least confident by"))
        if read.notes:
            self.message_label.setText(notes_text(read.notes))

    def restore_settings(self, model, or_last_used: bool = True, notes: list | None = None) -> list[str]:
        """The settings last used with this model (each model has its own: a Max new of 200 on SmolLM2 is not
        the 64 the story model's context allows). A model never used keeps what the controls show (or_last_used:
        the settings used last, with whichever model, as at start). -> what the controls could not show (a
        grammar on a model that takes none); notes hears the remembered values left out."""
        if or_last_used or self.prefs.value(f"settings/{model.name}", None) is not None:
            return self.controls.set_settings(self._saved_settings(model, [] if notes is None else notes))
        return []

    def remember_settings(self, model) -> None:
        """The controls' settings as this model's own (before another model's ranges clamp them)."""
        settings = json.dumps(self.controls.settings())
        self.prefs.setValue(f"settings/{model.name}", settings)
        self.prefs.setValue("settings", settings)

    def _saved_settings(self, model, notes: list) -> dict:
        """The remembered settings the engine accepts. Prefs are a file a person can edit, and an older or
        newer version may have written them: a value the engine refuses, or a setting it does not know, is
        left out (the control keeps its default, and notes hears why), the others are kept."""
        defaults = {"max_new_tokens": min(60, model.context_length), "temperature": 0.0, "seed": 0}
        key = f"settings/{model.name}" if self.prefs.value(f"settings/{model.name}", None) is not None else "settings"
        text = self.prefs.value(key, None)
        try:
            saved = json.loads(text) if isinstance(text, str) else text
        except (ValueError, RecursionError):
            saved = text
        if saved is None:
            return defaults
        if not isinstance(saved, dict):
            notes.append(f"settings {quoted(text)} (not a JSON object of settings)")
            return defaults
        try:
            return engine.Settings(**saved).to_dict()
        except (ValueError, TypeError, RecursionError):
            pass
        kept = {}
        for name, value in saved.items():  # one by one: each value that the engine takes with those before it
            try:
                engine.Settings(**{**kept, name: value})
            except (ValueError, TypeError, RecursionError) as error:
                why = "not a setting" if isinstance(error, TypeError) else str(error)
                notes.append(f"setting {quoted(name)} = {quoted(value)} ({why})")
                continue
            kept[name] = value
        return dict(defaults, **kept)

    def remember(self) -> None:
        self.prefs.setValue(f"prompt/{self.model.name}", prompt_to_remember(self.controls.prompt.toPlainText()))
        self.remember_settings(self.model)
        self.prefs.setValue("stage", self.chart.stage())
        self.docks.save(self.prefs)
        self.prefs.setValue("colourBy", self.colour_by.currentText())
        self.prefs.setValue("palette", self.token_view.palette_name)
        self.prefs.setValue("leastConfidentBy", self.uncertainty_strip.rank_by.currentText())
        self.prefs.sync()

    def closeEvent(self, event) -> None:
        self.remember()
        self.controller.shutdown()  # stops the worker cleanly before the window goes
        self.exception_hook.uninstall()
        super().closeEvent(event)
