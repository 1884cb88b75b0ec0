"""A rule's command: a program run on the text so far, confined, its output inserted (engine.CommandTool).

Running what the model writes is the point of a command rule, so a command runs as little trusted as the OS
allows: through the launcher in confine.py (read-only filesystem but for an empty size-capped folder of its own,
no network, resource limits, on Linux; limits only elsewhere), with a cleared environment and no inherited
descriptors. What a client of the server wrote (its prompt, its `steer`) is marked in what the program reads:
CLIENT_TEXT, an environment variable holding JSON [[start, end], ...] character ranges of the text on its
standard input, so that a program that runs code can refuse code the client wrote rather than the model.
docs/serve.md, "Security", says what is and is not confined on each system."""

import functools
import itertools
import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from engine.core.checks import checked_float, checked_int

CONFINE = str(Path(__file__).with_name("confine.py"))
CLIENT_TEXT = "TOKEN_PLAYGROUND_CLIENT_TEXT"
MAX_SPANS = 1000  # client ranges passed one by one; more are passed as one range from the first to the last
# what a command may use, unless its rule says otherwise ("limits"); CPU seconds default to its timeout
LIMITS = {"cpu_seconds": None, "memory_mb": 2048, "file_mb": 64, "folder_mb": 256, "processes": 64, "open_files": 256}
MAX_LIMITS = {"cpu_seconds": 3600, "memory_mb": 1 << 20, "file_mb": 1 << 20, "folder_mb": 1 << 20,
              "processes": 100_000, "open_files": 1 << 20}  # fmt: skip


class CommandTool:
    """A tool that runs a program (an argument list, never a shell) and returns its output as text.

    The text so far is passed on the program's standard input. A timeout, a non-zero exit or a missing
    program becomes readable text such as "[command timed out after 10 s]", never an exception. With
    `on_exit`, the exit status picks the text instead: {0: " passed"} plus `otherwise=" failed"`.

    The program runs confined (confine.py: on Linux a read-only filesystem but for an empty folder of its own, no
    network; `limits` on CPU, memory, file size, open files and processes everywhere POSIX), in a process group
    of its own, ended as soon as the program exits or times out, so nothing it started in the background
    outlives the call. Output is read as it comes and kept only up to max_output characters (the rest is read
    and dropped), so a runaway program costs no memory. A call's client_spans reach the program as CLIENT_TEXT."""

    _running: set = set()  # live processes, for end_all() when the app closes
    _lock = threading.Lock()
    marks_client_text = True  # rule_plan passes the client's ranges (client_spans)

    def __init__(self, argv, timeout=10.0, max_output=4096, on_exit=None, otherwise=None, name=None, limits=None):
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
        self.limits = checked_limits(limits)

    def __call__(self, text_so_far: str, client_spans=()) -> str:
        """The program's text for the text so far; client_spans: [(start, end)] ranges of it a client wrote."""
        program = _resolved(self.argv)
        if isinstance(program, str):
            return program  # why it cannot run
        marker = f"{os.getpid()}-{next(_calls)}"  # inherited by every descendant, detached or not
        folder = tempfile.mkdtemp(prefix="token-playground-command-")
        try:
            launcher = [sys.executable, "-I", "-S", CONFINE, *spec_words(self._spec(folder)), "--", *program]
            process = subprocess.Popen(launcher, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, start_new_session=True, cwd=folder,
                                       env=command_environment(folder, marker, client_spans))  # fmt: skip
            process.marker = marker
            with self._lock:
                self._running.add(process)
            try:
                output, finished = self._collect(process, text_so_far.encode("utf-8", "replace"))
            finally:
                _end_group(process)
                with self._lock:
                    self._running.discard(process)
        except (OSError, ValueError) as error:  # this Python cannot start (a NUL in an argument: refused earlier)
            return f"[command could not run: {getattr(error, 'strerror', None) or error}]"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
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

    def _spec(self, folder: str) -> dict:
        """What confine.py applies: the folder and the limits in the units the OS takes."""
        limits, mb = self.limits, 1 << 20
        cpu = limits["cpu_seconds"] or math.ceil(self.timeout) + 1
        return {"folder": folder, "folder_bytes": limits["folder_mb"] * mb, "cpu_seconds": cpu,
                "memory_bytes": limits["memory_mb"] * mb, "file_bytes": limits["file_mb"] * mb,
                "processes": limits["processes"], "open_files": limits["open_files"]}  # fmt: skip

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


def spec_words(spec: dict) -> list[str]:
    """confine.py's spec as its KEY=VALUE words."""
    return [f"{key}={value}" for key, value in spec.items()]


def checked_limits(limits) -> dict:
    """A rule's "limits" over LIMITS' defaults; ValueError naming the key and the allowed range."""
    if limits is None:
        return dict(LIMITS)
    if not isinstance(limits, dict):
        raise ValueError(f'limits must be an object such as {{"memory_mb": 512}}, got {type(limits).__name__}')
    out = dict(LIMITS)
    for key, value in limits.items():
        if key not in LIMITS:
            raise ValueError(f"limits: unknown limit {key!r:.40} (known: {', '.join(LIMITS)})")
        if value is None and LIMITS[key] is None:  # CPU seconds: from the timeout
            continue
        out[key] = checked_int(f"limits {key}", value, 1, MAX_LIMITS[key], f"an int from 1 to {MAX_LIMITS[key]}")
    return out


def command_environment(folder: str, marker: str, client_spans) -> dict:
    """The program's whole environment: a PATH to find programs by, its folder as home and temporary folder,
    UTF-8, the call's marker, and the client's ranges; nothing else of the app's (no keys, no tokens)."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": folder, "TMPDIR": folder, "TMP": folder, "TEMP": folder,
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONUTF8": "1", MARKER: marker,
           CLIENT_TEXT: json.dumps(merged_spans(client_spans))}  # fmt: skip
    if sys.platform == "win32":  # Windows' own programs (Python included) need these to start
        env.update({name: os.environ[name] for name in ("SYSTEMROOT", "PATHEXT", "COMSPEC") if name in os.environ})
    return env


def merged_spans(spans) -> list[list[int]]:
    """[(start, end)] sorted, overlapping or touching ranges merged; over MAX_SPANS: one range covering them all."""
    out: list[list[int]] = []
    for start, end in sorted((int(s), int(e)) for s, e in spans if e > s):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out if len(out) <= MAX_SPANS else [[out[0][0], out[-1][1]]]


def _resolved(argv: list[str]):
    """The argument list with the program found on PATH and relative paths that name existing files made
    absolute (the program runs in its own empty folder); or the text that says why it cannot run."""
    program = shutil.which(argv[0]) if os.sep not in argv[0] else argv[0]
    if program is None or not os.path.exists(program):
        return f"[command could not run: {argv[0]!r} was not found]"
    rest = [os.path.abspath(a) if a and not a.startswith("-") and not os.path.isabs(a) and os.path.exists(a) else a
            for a in argv[1:]]  # fmt: skip
    return [os.path.abspath(program), *rest]


@functools.cache
def confinement() -> dict:
    """What confines a command on this machine (the launcher run once): {"namespaces": [...], "limits": [...]}."""
    folder = tempfile.mkdtemp(prefix="token-playground-probe-")
    try:
        spec = CommandTool(["true"])._spec(folder)
        done = subprocess.run([sys.executable, "-I", "-S", CONFINE, *spec_words(spec), "--", "--probe"],
                              capture_output=True, text=True, timeout=30, cwd=folder, env={})  # fmt: skip
        return json.loads(done.stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        return {"namespaces": [], "limits": []}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def confinement_sentence() -> str:
    """One line: what holds a command here and what does not."""
    took = confinement()
    held = {"read-only": "a read-only filesystem", "folder": "an empty folder of its own (its only writable place)",
            "network": "no network"}  # fmt: skip
    said = [text for key, text in held.items() if key in took["namespaces"]]
    names = {"cpu_seconds": "CPU seconds", "memory_bytes": "memory", "file_bytes": "file size",
             "open_files": "open files", "processes": "processes"}  # fmt: skip
    if took["limits"]:
        said.append("limits on " + ", ".join(names[name] for name in took["limits"] if name in names))
    missing = [text for key, text in held.items() if key not in took["namespaces"]]
    line = "commands run confined: " + "; ".join(said) if said else "commands run unconfined"
    return line + (" (not here: " + "; ".join(missing) + ")" if missing else "")
