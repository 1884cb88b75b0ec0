"""The Tree tab's expansion controls (engine Session.expand's parameters): children per node, coverage, depth,
budget, raw model or the chain; Expand, and while it runs, Cancel and a progress bar. Only lays out."""

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)  # fmt: skip


class ExpandControls(QWidget):
    expandClicked = Signal()
    cancelRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.top_k = QSpinBox(objectName="expandTopK", minimum=0, maximum=50, value=3, specialValueText="off")
        self.top_k.setToolTip("children per node: its most probable next tokens (off: no count limit)")
        self.coverage = QDoubleSpinBox(objectName="expandCoverage", minimum=0.0, maximum=1.0, singleStep=0.05,
                                       decimals=2, value=0.0, specialValueText="off")  # fmt: skip
        self.coverage.setToolTip("children per node until they hold this share of its probability (off: none)")
        self.depth = QSpinBox(objectName="expandDepth", minimum=1, maximum=64, value=4)
        self.depth.setToolTip("levels below the starting node")
        self.budget = QSpinBox(objectName="expandBudget", minimum=1, maximum=10_000, value=200)
        self.budget.setToolTip("nodes the expansion adds at most (the likeliest sequences first)")
        self.raw = QCheckBox("raw model", objectName="expandRaw")
        self.raw.setToolTip("choose and weigh the children by the raw model's probabilities instead of the chain's "
                            "final ones (at temperature 0 the chain keeps one token)")  # fmt: skip
        self.expand_button = QPushButton("Expand", objectName="expandButton")
        self.expand_button.setToolTip("add the most probable continuations below the selected row (none selected: "
                                      "the end of the active branch)")  # fmt: skip
        self.expand_button.clicked.connect(self.expandClicked)
        self.cancel_button = QPushButton("Cancel", objectName="cancelExpandButton")
        self.cancel_button.setToolTip("stop the expansion: the levels it finished stay")
        self.cancel_button.clicked.connect(self.cancelRequested)
        self.progress = QProgressBar(objectName="expandProgress")
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(12)
        first, second = QHBoxLayout(), QHBoxLayout()
        for label, box in (("children", self.top_k), ("coverage", self.coverage), ("depth", self.depth),
                           ("budget", self.budget)):  # fmt: skip
            first.addWidget(QLabel(label))
            first.addWidget(box)
        first.addStretch(1)
        for widget in (self.raw, self.expand_button, self.cancel_button):
            second.addWidget(widget)
        second.addWidget(self.progress, 1)
        controls = QVBoxLayout(self)
        controls.setContentsMargins(0, 0, 0, 0)
        controls.setSpacing(2)
        controls.addLayout(first)
        controls.addLayout(second)
        self.set_expanding(False)

    def expand_params(self) -> dict:
        """The expansion controls as Expansion's fields."""
        top_k, coverage = self.top_k.value(), round(self.coverage.value(), 4)
        return {"top_k": top_k or None, "coverage": coverage or None, "depth": self.depth.value(),
                "budget": self.budget.value(), "raw": self.raw.isChecked()}  # fmt: skip

    def set_expanding(self, expanding: bool) -> None:
        self.expand_button.setEnabled(not expanding)
        self.cancel_button.setVisible(expanding)
        self.cancel_button.setEnabled(expanding)
        self.progress.setVisible(expanding)
        if expanding:
            self.progress.setRange(0, 0)  # busy until the first figures

    def show_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(total, 0))
        self.progress.setValue(min(done, total) if total > 0 else 0)
