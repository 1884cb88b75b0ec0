"""Trigger rules: when the text ends with a trigger, insert text, make a constrained choice, or call a tool."""

import re
import subprocess
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Rule:
    """When the text ends with `when` (with regex=True: a match of it ends at the end of the text), do
    exactly one of: insert fixed text, choose among options, or insert what a tool returns."""

    when: str
    insert: str | None = None
    choose: tuple[str, ...] | None = None
    tool: Callable[[str], str] | None = None
    regex: bool = False

    def __post_init__(self):
        if not isinstance(self.when, str) or not self.when:
            raise ValueError(f"a rule's trigger must be a non-empty string, got {self.when!r}")
        actions = [a for a in ("insert", "choose", "tool") if getattr(self, a) is not None]
        if len(actions) != 1:
            raise ValueError(
                f"a rule needs exactly one action (insert, choose or tool); rule {self.when!r} has "
                + (", ".join(actions) if actions else "none")
            )
        if self.insert is not None and (not isinstance(self.insert, str) or not self.insert):
            raise ValueError(f"rule {self.when!r}: insert must be non-empty text")
        if self.choose is not None:
            if isinstance(self.choose, str) or not all(isinstance(o, str) for o in self.choose):
                raise ValueError(f"rule {self.when!r}: choose must be a list of strings")
            object.__setattr__(self, "choose", tuple(self.choose))
        if self.tool is not None and not callable(self.tool):
            raise ValueError(f"rule {self.when!r}: tool must be callable (text so far) -> str")
        if self.regex:
            try:
                object.__setattr__(self, "_pattern", re.compile(f"(?:{self.when})\\Z"))
            except re.error as error:
                raise ValueError(f"rule {self.when!r}: not a valid regular expression: {error}") from None

    @property
    def action(self) -> str:
        return "insert" if self.insert is not None else "choose" if self.choose is not None else "tool"

    def matches(self, text: str) -> bool:
        if self.regex:
            return self._pattern.search(text) is not None
        return text.endswith(self.when)

    def describe(self) -> dict:
        """JSON-ready; a tool is described by its name, never serialised."""
        value = {"insert": self.insert, "choose": list(self.choose or ()), "tool": tool_name(self.tool)}
        return {"when": self.when, "regex": self.regex, "action": self.action, self.action: value[self.action]}


def tool_name(tool) -> str | None:
    if tool is None:
        return None
    return getattr(tool, "name", None) or getattr(tool, "__name__", None) or type(tool).__name__


class CommandTool:
    """A tool that runs a program (an argument list, never a shell) and returns its output as text.

    The text so far is passed on the program's standard input. A timeout, a non-zero exit or a missing
    program becomes readable text such as "[command timed out after 10 s]", never an exception. With
    `on_exit`, the exit status picks the text instead: {0: " passed"} plus `otherwise=" failed"`."""

    def __init__(self, argv, timeout=10.0, max_output=4096, on_exit=None, otherwise=None, name=None):
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("a command must be a non-empty list of argument strings (no shell)")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not isinstance(max_output, int) or isinstance(max_output, bool) or max_output < 1:
            raise ValueError(f"max_output must be a positive int, got {max_output!r}")
        self.argv = list(argv)
        self.timeout = timeout
        self.max_output = max_output
        self.on_exit = dict(on_exit or {})
        self.otherwise = otherwise
        self.name = name or "command: " + " ".join(self.argv)

    def __call__(self, text_so_far: str) -> str:
        try:
            done = subprocess.run(
                self.argv, input=text_so_far, capture_output=True, text=True, timeout=self.timeout,
                errors="replace",
            )
        except subprocess.TimeoutExpired:
            return f"[command timed out after {self.timeout:g} s]"
        except OSError as error:  # missing program, not executable, ...
            return f"[command could not run: {error.strerror or error}]"
        if done.returncode in self.on_exit:
            return self.on_exit[done.returncode]
        if self.on_exit and self.otherwise is not None:
            return self.otherwise
        if done.returncode != 0:
            return f"[command exited with status {done.returncode}]"
        return done.stdout[: self.max_output]
