"""The window's side of the rules: the panel's rules act from the next step of the session in progress (a bad
rule is named and changes nothing; with no session, the next one starts with them), and command rules skipped
while "Allow commands" is off are said once a run."""

from PySide6.QtCore import QObject, Signal

from .skipped import SkippedCommands


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
