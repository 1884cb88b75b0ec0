"""The rules' command in the worker: the rules panel's rules act from the next step on (logged in the trace)."""

from PySide6.QtCore import Signal, Slot

from ..feature import WorkerCommands


class RuleCommands(WorkerCommands):
    name = "rules"
    rulesSet = Signal(int)  # the number of rules now in force, after a change from the rules panel

    @Slot(object)
    def set_rules(self, rules) -> None:
        session = self.host.session
        if session is None:
            return
        before = session.rules
        try:
            now = session.set_rules(rules)
        except ValueError as error:
            self.host.failed.emit(str(error))
            return
        if now is before:  # Step and Generate send the panel's rules each time: unchanged ones say nothing
            return
        self.host.publish()
        self.rulesSet.emit(len(rules))
