"""Trigger rules: when the text ends with a trigger, insert text, make a constrained choice, or call a tool.
A regex trigger is matched within bounds (engine/core/patterns.py)."""

import itertools
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.core.checks import checked_float, checked_int, checked_text
from engine.core.patterns import SlowRule, compile_trigger, trigger_matches


@dataclass(frozen=True)
class Rule:
    """When the text ends with `when` (with regex=True: a match of it, starting among the text's last
    RULE_REACH characters, ends at the end of the text), do exactly one of: insert fixed text, choose among
    options, or insert what a tool returns."""

    when: str
    insert: str | None = None
    choose: tuple[str, ...] | None = None
    tool: Callable[[str], str] | None = None
    regex: bool = False

    def __post_init__(self):
        if not isinstance(self.when, str) or not self.when:
            raise ValueError(f"a rule's trigger must be a non-empty string, got {self.when!r}")
        checked_text(self.when, "a rule's trigger")  # a lone surrogate would fail the trace's save
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
            object.__setattr__(self, "_pattern", compile_trigger(self.when))

    @property
    def action(self) -> str:
        return "insert" if self.insert is not None else "choose" if self.choose is not None else "tool"

    def matches(self, text: str) -> bool:
        """Whether the trigger ends the text; SlowRule (a ValueError) when a regex one takes too long to tell."""
        if self.regex:
            return trigger_matches(self._pattern, self.when, text)
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
    `on_exit`, the exit status picks the text instead: {0: " passed"} plus `otherwise=" failed"`.

    The program runs in a process group of its own, ended as soon as the program exits or times out, so
    nothing it started in the background outlives the call. Output is read as it comes and kept only up
    to max_output characters (the rest is read and dropped), so a runaway program costs no memory."""

    _running: set = set()  # live processes, for end_all() when the app closes
    _lock = threading.Lock()

    def __init__(self, argv, timeout=10.0, max_output=4096, on_exit=None, otherwise=None, name=None):
        if (
            isinstance(argv, str)
            or not isinstance(argv, (list, tuple))
            or not argv
            or not all(isinstance(a, str) for a in argv)
        ):
            raise ValueError("a command must be a non-empty list of argument strings (no shell)")
        self.timeout = checked_float("timeout", timeout, lambda t: 0 < t <= MAX_TIMEOUT,
                                     f"a number of seconds in (0, {MAX_TIMEOUT}]")  # fmt: skip
        self.max_output = checked_int("max_output", max_output, 1, MAX_OUTPUT, f"an int from 1 to {MAX_OUTPUT}")
        if on_exit is not None and not (isinstance(on_exit, dict) and all(
            isinstance(k, int) and not isinstance(k, bool) and isinstance(v, str) for k, v in on_exit.items()
        )):  # fmt: skip
            raise ValueError(f"on_exit must map exit statuses (ints) to text, got {on_exit!r:.60}")
        if otherwise is not None and not isinstance(otherwise, str):
            raise ValueError(f"otherwise must be text or None, got {otherwise!r:.60}")
        if name is not None and not isinstance(name, str):
            raise ValueError(f"name must be text or None, got {name!r:.60}")
        self.argv = list(argv)
        self.on_exit = dict(on_exit or {})
        self.otherwise = otherwise
        self.name = name or "command: " + " ".join(self.argv)

    def __call__(self, text_so_far: str) -> str:
        marker = f"{os.getpid()}-{next(_calls)}"  # inherited by every descendant, detached or not
        env = dict(os.environ, **{MARKER: marker})
        try:
            process = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, start_new_session=True, env=env)  # fmt: skip
        except (OSError, ValueError) as error:  # missing program, not executable, a NUL in an argument
            return f"[command could not run: {getattr(error, 'strerror', None) or error}]"
        process.marker = marker
        with self._lock:
            self._running.add(process)
        try:
            output, finished = self._collect(process, text_so_far.encode("utf-8", "replace"))
        finally:
            _end_group(process)
            with self._lock:
                self._running.discard(process)
        if not finished:
            return f"[command timed out after {self.timeout:g} s]"
        if process.returncode in self.on_exit:
            return self.on_exit[process.returncode]
        if self.on_exit and self.otherwise is not None:
            return self.otherwise
        if process.returncode < 0:
            return f"[command was ended by signal {-process.returncode}]"
        if process.returncode != 0:
            return f"[command exited with status {process.returncode}]"
        return output.decode("utf-8", "replace")[: self.max_output]

    def _collect(self, process, stdin: bytes) -> tuple[bytes, bool]:
        """(the first bytes of its output, whether it exited in time). Reading stops when the program
        exits, not at end of file: a background child may hold the pipe open for as long as it likes."""
        deadline = time.monotonic() + self.timeout
        threading.Thread(target=_feed, args=(process.stdin, stdin), daemon=True).start()
        keep = self.max_output * 4  # bytes enough for max_output characters of UTF-8
        output = bytearray()
        fd = process.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                exited = process.poll() is not None
                left = deadline - time.monotonic()
                if left <= 0 and not exited:
                    return bytes(output), False
                ready = selector.select(timeout=0 if exited else min(left, 0.05))
                chunk = os.read(fd, 65536) if ready else b""
                if len(output) < keep:
                    output += chunk[: keep - len(output)]
                if exited and not chunk:  # exited, and nothing more is waiting in the pipe
                    return bytes(output), True
                if ready and not chunk:  # end of file: wait for the exit status
                    try:
                        process.wait(timeout=max(0.0, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        return bytes(output), False
                    selector.unregister(fd)
                    return bytes(output), True

    @classmethod
    def end_all(cls) -> None:
        """End every command running now (the window calls this as it closes): its call returns at once."""
        with cls._lock:
            running = list(cls._running)
        for process in running:
            _end_group(process)


MAX_TIMEOUT = 3600.0  # seconds: a tool that needs longer is not a tool for a step
EMPTY_RETRIES = 5  # reads of an empty environment (a process mid-exec) before it is let be: 10 ms at most
MAX_OUTPUT = 1_000_000  # characters


def _marked_processes(entry: bytes, first: int | None = None) -> list[int]:
    """Pids whose environment holds `entry` (Linux's /proc; elsewhere the process group must do); with `first`,
    the command's own pid, only the processes started after it are read (_started_since). A process in the
    middle of an exec shows an empty environment for a moment: those are read again, a few times."""
    found, blank = [], _started_since(first)
    for attempt in range(EMPTY_RETRIES + 1):
        if attempt:
            time.sleep(0.002)
        again = []
        for pid in blank:
            try:
                with open(f"/proc/{pid}/environ", "rb") as environ:
                    data = environ.read()
            except OSError:
                continue  # gone, or not ours to read
            if entry in data.split(b"\0"):
                found.append(pid)
            elif not data:
                again.append(pid)  # mid-exec, or a kernel thread (whose environment is always empty)
        if not again:
            break
        blank = again
    return found


def _started_since(first: int | None) -> list[int]:
    """The pids in /proc, those from `first` to the last pid the kernel gave out where it has not wrapped
    around since (its pids only grow until pid_max): reading every process's environment took 1.5-4 ms with
    77 processes here, and grows with a desktop's hundreds."""
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    try:
        last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    except (OSError, ValueError):
        return pids
    if first is None or last < first:  # wrapped around since the command started: any pid may be its
        return pids
    return [pid for pid in pids if first <= pid <= last]


def _feed(pipe, data: bytes) -> None:
    """Write the text so far to the program's stdin (in a thread: a program that never reads must not
    block us), then close it so the program sees the end."""
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass  # the program exited or closed its input: it did not want the text
    finally:
        try:
            pipe.close()
        except (BrokenPipeError, OSError):
            pass


MARKER = "TOKEN_PLAYGROUND_TOOL"  # an environment variable naming one call (as Jenkins' BUILD_ID does)
_calls = itertools.count()


def _end_group(process) -> None:
    """Kill the process group the command leads, then every process that still carries the call's marker
    in its environment (children that left the group with setsid or a double fork), and reap the command."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already
    for pid in _marked_processes(f"{MARKER}={process.marker}".encode(), process.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for pipe in (process.stdout, process.stdin):
        try:
            pipe.close()
        except OSError:
            pass


# --- what a session does with its rules (Session asks; it carries the plan out) ---------------------------
def checked_rules(model, rules) -> tuple[Rule, ...]:
    """The rules as a tuple, each a Rule whose texts the model's tokenizer encodes; else ValueError."""
    if isinstance(rules, (str, bytes, Rule)) or not hasattr(rules, "__iter__"):
        raise ValueError(f"rules must be a list of engine.Rule objects, got {type(rules).__name__}")
    rules = tuple(rules)
    for rule in rules:
        if not isinstance(rule, Rule):
            raise ValueError(f"rules must be engine.Rule objects, got {type(rule).__name__}")
        for text in ([rule.insert] if rule.insert is not None else []) + list(rule.choose or ()):
            if not text:
                raise ValueError(f"rule {rule.when!r}: empty option")
            model.tokenizer.encode(text)  # ValueError names an unknown character
    return rules


def rule_matches(rule: Rule, text: str, slow_rules: list, events: list) -> bool:
    """Whether the rule's trigger ends the text; a regex one too slow to tell is disabled, with an event."""
    if rule in slow_rules:
        return False
    try:
        return rule.matches(text)
    except SlowRule as error:
        slow_rules.append(rule)
        events.append(f"{error}: disabled for this session")
        return False


@dataclass(frozen=True)
class RulePlan:
    """What a firing rule adds: its options to choose from (encoded), or tokens to insert (source "rule"/"tool")."""

    source: str
    options: tuple = ()
    encoded: tuple = ()
    token_ids: tuple = ()


def rule_plan(rule: Rule, text: str, tokenizer, room: int, events: list) -> RulePlan | None:
    """What the rule adds after the text, in `room` positions; None (with an event saying why) where it adds
    nothing: options that do not fit, a tool that fails or returns no text, text the tokenizer refuses."""
    if rule.action == "choose":
        encoded = [tokenizer.encode(o) for o in rule.choose]
        if max(map(len, encoded)) > room:
            events.append(f"rule {rule.when!r}: its options do not fit in the context")
            return None
        return RulePlan("rule", options=tuple(rule.choose), encoded=tuple(encoded))
    source, added = "rule", rule.insert
    if rule.action == "tool":
        source = "tool"
        try:
            added = rule.tool(text)
        except Exception as error:  # a tool is someone else's code: its failure must not end the session
            events.append(f"rule {rule.when!r}: the tool failed: {type(error).__name__}: {error}")
            return None
        if not isinstance(added, str):
            events.append(f"rule {rule.when!r}: the tool returned {type(added).__name__}, not text")
            return None
    try:
        token_ids = tokenizer.encode(added)
    except ValueError as error:
        events.append(f"rule {rule.when!r}: cannot insert {added[:40]!r}: {error}")
        return None
    if len(token_ids) > room:
        events.append(f"rule {rule.when!r}: only {room} of {len(token_ids)} tokens fit in the context")
        token_ids = token_ids[:room]
    return RulePlan(source, token_ids=tuple(token_ids)) if token_ids else None
