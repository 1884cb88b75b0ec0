"""A banner above the text while any attention head is steered: which heads and by what factor, and a button
that puts every head back. Whichever tab is open, a person sees that the model is not the one as trained.

It takes the place of another widget (the hint above the text) while it shows, and its text keeps to two
lines ("... and 3 more heads" past them; the whole list in its tooltip and on the Inside tab), so that showing
it never makes the window taller or wider."""

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QWidget

AMBER = "#steeringBanner { background: #f6d58e; border-radius: 3px; } #steeringText { color: #3b2a00; }"
LINES = 2  # the most lines the banner's text takes


def head_texts(scales) -> list[str]:
    """((layer, head, factor), 0-based) -> ["layer 1 head 4 ablated", "layer 1 head 2 ×0.5"]."""
    return [f"layer {layer + 1} head {head + 1} " + ("ablated" if factor == 0 else f"×{factor:g}")
            for layer, head, factor in scales]  # fmt: skip


def steering_text(heads: list[str], shown: int | None = None) -> str:
    """The text: "Steering: ", the first `shown` heads (all by default), then how many more there are."""
    shown = len(heads) if shown is None else shown
    more = len(heads) - shown
    rest = f"{', ' if shown else ''}and {more} more head{'s' * (more > 1)}" if more else ""
    return "Steering: " + ", ".join(heads[:shown]) + rest


class SteeringBanner(QFrame):
    restoreClicked = Signal()  # put every head back

    def __init__(self, instead_of: QWidget | None = None, parent=None):
        super().__init__(parent)
        self.setObjectName("steeringBanner")
        self.setStyleSheet(AMBER)  # dark text on amber, in a dark theme too
        self._instead_of = instead_of
        self._heads: list[str] = []
        self.label = QLabel("", objectName="steeringText")
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setWordWrap(True)
        self.label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never wider
        self.label.setMaximumHeight(LINES * self.label.fontMetrics().lineSpacing() + 2)
        self.button = QPushButton("Restore all", objectName="restoreAllHeadsButton")
        self.button.setToolTip("put every attention head back as trained, from the next step on (logged in the "
                               "trace)")  # fmt: skip
        self.button.clicked.connect(self.restoreClicked)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 2, 2, 2)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.button)
        self.hide()
        if instead_of is not None:  # both take the same least height: the window's least size never changes
            least = max(instead_of.minimumSizeHint().height(), self.minimumSizeHint().height())
            instead_of.setMinimumHeight(least)
            self.setMinimumHeight(least)

    def show_scales(self, scales) -> None:
        """The session's steered heads now ((layer, head, factor), 0-based); none: the banner goes."""
        self._heads = head_texts(scales)
        self.label.setToolTip(self.text())
        self.setVisible(bool(scales))
        if self._instead_of is not None:
            self._instead_of.setVisible(not scales)
        self._fit()

    def text(self) -> str:
        """The whole text (the label may end it with "and N more heads")."""
        return steering_text(self._heads)

    def _fit(self) -> None:
        """As many heads as the label's LINES lines hold at its width."""
        width = self.label.width() if self.isVisible() else self.width() - self.button.sizeHint().width() - 12
        metrics, flags = self.label.fontMetrics(), Qt.TextFlag.TextWordWrap
        room = LINES * metrics.lineSpacing()
        shown = len(self._heads)
        while shown and metrics.boundingRect(0, 0, max(width, 40), 10_000, flags,
                                             steering_text(self._heads, shown)).height() > room:  # fmt: skip
            shown -= 1
        self.label.setText(steering_text(self._heads, shown))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()
