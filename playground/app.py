"""QApplication and main(): `token-playground` and `python -m playground` open the window."""

import sys

from PySide6.QtWidgets import QApplication


def main(argv=None) -> int:
    app = QApplication.instance() or QApplication(sys.argv if argv is None else argv)
    app.setApplicationName("Token Playground")
    app.setOrganizationName("TokenPlayground")
    from .main_window import MainWindow

    window = MainWindow()
    window.show()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
