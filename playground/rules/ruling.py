"""The window's side of the rules: the panel's rules act from the next step of the session in progress (a bad
rule is named and changes nothing; with no session, the next one starts with them), and command rules skipped
while "Allow commands" is off are said once a run. Save rules... and Open rules... write and read a rules file
(the JSON list the server's --rules reads): a bad file is named in the status bar and changes nothing."""

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog

import engine

from .skipped import SkippedCommands

FILES = "Rules (*.json);;All files (*)"


class Ruling(QObject):
    rulesSent = Signal(object)  # to the worker: the rules now in force (unchanged ones log nothing)

    name = "rules"

    def __init__(self, host):
        """host: the controller (its window, worker, model, known session, traces, status, feed)."""
        super().__init__(host)
        self.host, self.panel = host, host.window.rules_panel
        self.rulesSent.connect(host.worker.rules.set_rules)
        host.worker.rules.rulesSet.connect(self._on_set)
        self.panel.rulesChanged.connect(self.changed)
        self.skipped = SkippedCommands(self.panel, self)  # said once a run, in the status bar
        host.feed.stepsAppended.connect(self.skipped.steps_appended)
        self.skipped.said.connect(host.status)
        self.panel.saveRequested.connect(self._ask_save)
        self.panel.openRequested.connect(self._ask_open)

    def rules(self) -> list:
        """The panel's rules for this model; ValueError names a bad one."""
        return self.panel.rules(self.host.model.tokenizer)

    def changed(self) -> None:
        """A person edited the rules: they act from the next step of the session in progress."""
        if not self.host.known.exists or self.host.traces.viewed is not None:
            return
        try:
            rules = self.rules()
        except ValueError as error:
            self.host.status(f"{error} (the rules in force are unchanged)", error=True)
            return
        self.rulesSent.emit(rules)

    def _on_set(self, count: int) -> None:
        self.host.status(f"Rules changed: {count} in force from the next step (recorded in the trace)")

    def _ask_save(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.panel, "Save rules", "rules.json", FILES)
        if path:
            self.save_to(path)

    def save_to(self, path: str) -> None:
        """Write the table's rules (command rules too: the file is not what runs) as a rules file."""
        try:
            rules = self.panel.all_rules()
            engine.save_rules(rules, path)
        except (ValueError, OSError) as error:
            self.host.status(f"Rules not saved: {_reason(error)}", error=True)
            return
        self.host.status(f"Saved {len(rules)} rule{'s' if len(rules) != 1 else ''} to {path}")

    def _ask_open(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.panel, "Open rules", "", FILES)
        if path:
            self.open_from(path)

    def open_from(self, path: str) -> None:
        """Show a rules file's rules in the table. Its command rules are read (allow_commands=True) but run
        only once Allow commands is ticked: until then the panel greys them, as it greys any command row."""
        try:
            rules = engine.load_rules(path, allow_commands=True)
            self.panel.show_rules(rules)
        except ValueError as error:
            self.host.status(f"Rules not opened: {error} (the rules are unchanged)", error=True)
            return
        self.host.status(f"Opened {len(rules)} rule{'s' if len(rules) != 1 else ''} from {path}")


def _reason(error: Exception) -> str:
    return f"{error.strerror}: {error.filename}" if isinstance(error, OSError) and error.strerror else str(error)
