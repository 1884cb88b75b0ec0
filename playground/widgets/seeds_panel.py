"""The Seeds tab: run many seeds from where the text is, with the controls' settings (Session.run_seeds, in the
worker), and see what they wrote: the distinct continuations, most frequent first, with their counts. A
click on one puts its first seed in the controls, so Generate (or Step) writes exactly that continuation.
The widget only lays out; the controller runs it (runRequested) and fills it (show_run)."""

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

from engine import MAX_SEEDS

SHOWN = 50  # continuations listed


class SeedsPanel(QWidget):
    runRequested = Signal(int)  # how many seeds
    seedChosen = Signal(int)  # the first seed that wrote the clicked continuation

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("seedsPanel")
        self.count = QSpinBox(objectName="seedCount")
        self.count.setRange(1, MAX_SEEDS)
        self.count.setValue(100)
        self.count.setToolTip("how many seeds (0, 1, 2, ...) continue the text")
        self.run_button = QPushButton("Run seeds from here", objectName="runSeedsButton")
        self.run_button.setToolTip("each seed continues the text with the controls' settings, as Generate would "
                                   "with that seed; rules do not act")  # fmt: skip
        self.run_button.clicked.connect(lambda: self.runRequested.emit(self.count.value()))
        self.summary = QLabel("", objectName="seedSummary")
        self.summary.setWordWrap(True)
        self.completions = QListWidget(objectName="seedCompletions")
        self.completions.setWordWrap(True)
        self.completions.setToolTip("click one to put its first seed in the controls: Generate then writes it")
        self.completions.itemClicked.connect(lambda item: self.seedChosen.emit(item.data(Qt.ItemDataRole.UserRole)))

        row = QHBoxLayout()
        row.addWidget(QLabel("Seeds"))
        row.addWidget(self.count)
        row.addWidget(self.run_button, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.summary)
        layout.addWidget(self.completions, 1)

    def set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)

    def show_run(self, run, seconds: float, measure: dict | None) -> None:
        """A SeedRun: its continuations by frequency, and a summary (the story model's measure, if given)."""
        completions = run.completions()
        first_seed = {}
        for seed in run.seeds:
            first_seed.setdefault(run.continuation(seed), seed)
        parts = [f"{len(run.seeds)} seeds: {len(completions)} different continuations, a tree of "
                 f"{len(run.nodes) - 1} tokens ({seconds:.2f} s)"]  # fmt: skip
        if measure is not None:
            parts.append(f"{measure['well_formed']} wrote a well-formed story, {measure['keeps_color_and_object']} "
                         "kept the first sentence's colour and object")  # fmt: skip
        self.summary.setText("; ".join(parts))
        self.completions.clear()
        for text, count in completions[:SHOWN]:
            seed = first_seed[text]
            item = QListWidgetItem(f"{count:>4} ×  {text.strip() or '(nothing: the text ended)'}")
            item.setData(Qt.ItemDataRole.UserRole, seed)
            item.setToolTip(f"seed {seed} writes this: <code>{html.escape(repr(text))}</code>")
            self.completions.addItem(item)
