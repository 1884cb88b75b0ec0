"""QApplication and main(): `token-playground` and `python -m playground` open the window."""

import sys

from PySide6.QtWidgets import QApplication

from .qt_platform import xcb_problem


def main(argv=None) -> int:
    if QApplication.instance() is None:
        problem = xcb_problem()  # Qt would abort inside QApplication() with a wall of text
        if problem:
            print(problem, file=sys.stderr)
            return 1
    app = QApplication.instance() or QApplication(sys.argv if argv is None else argv)
    app.setApplicationName("Token Playground")
    app.setOrganizationName("TokenPlayground")
    from .main_window import MainWindow

    window = MainWindow()
    window.show()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
