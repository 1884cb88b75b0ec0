"""Token Playground's window: PySide6 + pyqtgraph over engine.Session (the model runs in a worker thread)."""

__all__ = ["MainWindow"]


def __getattr__(name: str):
    # MainWindow is loaded on first use, so the window's Qt-free parts (playground.samplers.parse, ...) import
    # without Qt
    if name == "MainWindow":
        from .main_window import MainWindow

        return MainWindow
    raise AttributeError(f"module 'playground' has no attribute {name!r}")
