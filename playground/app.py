"""QApplication and main(): `token-playground` and `python -m playground` open the window (`token-playground
serve ...` runs the OpenAI-compatible server instead: engine/serve/)."""

import gc
import os
import sys

from PySide6.QtWidgets import QApplication

from .qt_platform import xcb_problem

USAGE = """usage: token-playground [Qt's options]
       token-playground serve [-m MODEL] ...   (the OpenAI-compatible server: token-playground serve --help)

Opens the window: type a prompt and watch the model write, token by token, with the next-token chart beside it
(docs/window.md). The engine's command line needs no window: python -m engine --help."""
WRITES_WAIT_S = 10.0  # the last resort waits this long for a file being written (a big one: a model package's)


def main(argv=None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)[1:]
    if words[:1] == ["serve"]:  # `token-playground serve ...`: the server, no window
        from engine import serve_main

        return serve_main(words[1:])
    if any(word in ("-h", "--help") for word in words):
        print(USAGE)
        return 0
    if QApplication.instance() is None:
        problem = xcb_problem()  # Qt would abort inside QApplication() with a wall of text
        if problem:
            print(problem, file=sys.stderr)
            return 1
    app = QApplication.instance() or QApplication(sys.argv if argv is None else argv)
    app.setApplicationName("Token Playground")
    app.setOrganizationName("TokenPlayground")
    from .main_window import MainWindow
    from .worker_thread import threads_left_running

    window = MainWindow()
    window.show()
    code = app.exec()
    if threads_left_running():
        end_now(code)
    # Closing is done (settings saved, the worker stopped, models freed). Python's teardown runs full garbage
    # collections over every object the app made (the steps, their candidates, the tree): 0.2-0.3 s of a 0.4 s
    # exit here, over 1 s on a busy machine. Frozen, they are skipped; objects are still freed as their last
    # reference goes, and atexit handlers run (only cycles left at exit stay, as Python never promises otherwise).
    gc.freeze()
    return code


def end_now(code: int) -> None:
    """Closing's last resort: a native call (llama.cpp making a context, numpy in one long forward pass) holds the
    worker's thread past closing, and a thread is never killed. Everything is saved (closeEvent wrote the
    settings; no file write is cut: one in progress finishes first, and none starts after), so the process ends
    here, without waiting for that call."""
    from engine import end_writes

    end_writes(WRITES_WAIT_S)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
