"""The samplers panel's own widgets: spin boxes that show a word ("off", "all") at the values that switch a stage
off, and the list of stages a person reorders by dragging."""

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QAbstractItemView, QAbstractSpinBox, QDoubleSpinBox, QListWidget, QSpinBox

SPIN_WIDTH = 64  # the narrowest a spin box gets ("0.10", "all", "off" and the arrows)
STAGE_MIME = "application/x-token-playground-stage"


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
