"""The uncertainty strip's mouse (a mixin of UncertaintyStrip): which step or prompt token a point of the plot is,
a click selects it (stepClicked, promptClicked), a hover shows its numbers."""

from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QToolTip


class StripMouse:
    def _x_at(self, scene_pos) -> int:
        """The point column nearest a scene point: a step's is its index + 1, the prompt's are 0 and below."""
        return round(self.plot.getPlotItem().vb.mapSceneToView(QPointF(scene_pos)).x())

    def index_at(self, scene_pos) -> int:
        """The step nearest a scene point along the step axis, or -1 (the prompt too: see prompt_index_at)."""
        if not self._count:
            return -1
        index = self._x_at(scene_pos) - 1
        return index if 0 <= index < self._count else -1

    def prompt_index_at(self, scene_pos) -> int:
        """The prompt's scored token nearest a scene point, or -1."""
        if not self._prompt_steps:
            return -1
        index = self._x_at(scene_pos) - 1 + len(self._prompt_steps)
        return index if 0 <= index < len(self._prompt_steps) else -1

    def _clicked(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        index = self.index_at(event.scenePos())
        if index >= 0:
            self.stepClicked.emit(index)
        elif (index := self.prompt_index_at(event.scenePos())) >= 0:
            self.promptClicked.emit(index)

    def _hovered(self, scene_pos) -> None:
        text = self.hover_text(self.index_at(scene_pos)) or self.prompt_hover_text(self.prompt_index_at(scene_pos))
        if text:
            where = self.plot.viewport().mapToGlobal(self.plot.mapFromScene(QPointF(scene_pos)))
            QToolTip.showText(where, text, self.plot)
        else:
            QToolTip.hideText()
