"""Servers the tests start, tied to the test run: each runs in a process group of its own under a small watcher
(this file run as a script), which kills the whole group once the test run that started it is gone. A test run
ended by a signal (SIGKILL, a CI timeout) runs no `finally`; without the watcher its vLLM servers (2.3 GB each,
an engine core and a worker beside the API server) lived on and, with the next run's, filled the machine.

    python tests/tethered.py RUNNER_PID COMMAND...   (what `start` runs)
"""

import os
import signal
import subprocess
import sys
import time

WATCH_SECONDS = 0.5  # how often the watcher looks for its test run


def start(command: list[str], log, env=None) -> subprocess.Popen:
    """Start `command` (output to the open file `log`) in a new process group under a watcher; the Popen is the
    watcher's, whose exit code is the command's. End it with `stop`."""
    watcher = [sys.executable, os.path.abspath(__file__), str(os.getpid()), *command]
    return subprocess.Popen(watcher, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop(server: subprocess.Popen, grace: float) -> None:
    """SIGTERM to the server's whole group (a server shuts its own children down); SIGKILL to whatever of the
    group is left after `grace` seconds."""
    _signal_group(server.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and (server.poll() is None or group_alive(server.pid)):
        time.sleep(0.2)
    _signal_group(server.pid, signal.SIGKILL)
    server.wait()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _watch(runner: int, command: list[str]) -> int:
    """Run the command; when the test run (our parent, `runner`) is gone, kill the group, ourselves included."""
    child = subprocess.Popen(command)
    signal.signal(signal.SIGTERM, lambda *_: None)  # stop() signals the whole group: wait for the child's exit
    while True:
        try:
            return child.wait(timeout=WATCH_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        if os.getppid() != runner:  # re-parented: the test run has ended without stopping us
            os.killpg(0, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(_watch(int(sys.argv[1]), sys.argv[2:]))
