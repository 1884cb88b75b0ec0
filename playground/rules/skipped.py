"""Command rules skipped while "Allow commands" is off: when the trigger of one ends the text during a run or a
command (where the engine would have run it), the status bar says so, once per run, and why. The rules panel
greys those rows meanwhile."""

from PySide6.QtCore import QObject, Signal

from ..feed import TAIL  # the characters a trigger is matched against: the end of the text (a regex one too)
from .panel import SKIPPED


class SkippedCommands(QObject):
    said = Signal(str)  # the status bar's line (once per run)

    def __init__(self, panel, parent=None):
        super().__init__(parent)
        self.panel = panel
        self._told = False  # said in this run already
        self._fresh = True  # no step of this run seen yet: the text as the run found it is matched too
        self._slow = []  # regex rules that took too long to match: no match, never tried again

    def run_begins(self) -> None:
        self._told, self._fresh = False, True

    def steps_appended(self, before: str, steps) -> None:
        """New steps reached the view after `before` (the text's last TAIL characters before them): match the
        skipped rules at the end of the text before each, as the engine does, and after the last."""
        fresh, self._fresh = self._fresh, False
        if self._told:
            return
        skipped = self.panel.skipped_rules()
        if not skipped:
            return
        texts, text = ([before] if fresh else []), before
        for step in steps:
            text = (text + step.token)[-TAIL:]
            texts.append(text)
        for text in texts:
            for row, rule in skipped:
                if self._matches(rule, text):
                    self._told = True
                    self.said.emit(f"Rule {row + 1} runs a command: its trigger {rule.when!r} ended the text, "
                                   f"and it was {SKIPPED} (tick it in the Rules tab to run it)")  # fmt: skip
                    return

    def _matches(self, rule, text: str) -> bool:
        """A regex trigger too slow to tell (the engine's SlowRule, after its bounded time) is no match here,
        and is not tried again: the GUI thread pays that time once."""
        if rule in self._slow:
            return False
        try:
            return rule.matches(text)
        except ValueError:
            self._slow.append(rule)
            return False
