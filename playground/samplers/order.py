"""The samplers panel's stage order (a mixin of SamplerPanel): the list of stages in the order they run (drag a stage,
or Up / Down), the two presets (llama.cpp's order, this app's default), and the stages that do not run greyed."""

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QPalette
from PySide6.QtWidgets import QListWidgetItem, QPushButton

import engine

from ..widgets.chart_rows import stage_label
from .spins import StageList


class StageOrder:
    """Needs the panel's `changed` signal; makes order_list, up, down, llama_order and default_order."""

    def _make_order(self) -> None:
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
