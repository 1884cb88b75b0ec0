"""What a feature plugs into. Each feature (tree/, inside/, compare/, seeds/, models/, rules/, strip/) brings its
worker-side commands as a `WorkerCommands` subclass, which the worker (the host) makes once and names; the
feature's GUI side connects its own signals to those commands' slots, and the commands' signals to its panel.
The list of features is playground/features.py: a new feature is its folder and one line there."""

from PySide6.QtCore import QObject


class WorkerCommands(QObject):
    """A feature's commands, run in the worker's thread: a child of the worker, so it moves to that thread with it
    and its slots run there, between two turns of a run. It reaches the session only through its host (the
    GenerationWorker: `session`, `model`, `command`, `publish`, `failed`, `notice`...)."""

    name = ""  # the worker's attribute for these commands: worker.tree, worker.inside...

    def __init__(self, host):
        super().__init__(host)
        self.host = host

    def session_changed(self, session) -> None:
        """The worker has another session (started, replayed) or none (reset, another model): `session` or None."""

    def published(self, session) -> None:
        """After every change the worker publishes (a run's turn, a command, a new session); session may be None."""

    def models(self) -> tuple:
        """Models these commands hold besides the worker's own: stopped at once on shutdown."""
        return ()

    def close(self) -> None:
        """On shutdown, once the thread has stopped: close what these commands opened."""
