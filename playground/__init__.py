"""Token Playground's window: PySide6 + pyqtgraph over engine.Session (the model runs in a worker thread)."""

from .main_window import MainWindow

__all__ = ["MainWindow"]
