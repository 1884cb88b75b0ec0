"""tests/tethered.py: a server the tests start dies with the test run, even one killed by SIGKILL (no `finally`)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import tethered

TESTS = Path(__file__).parent

# a stand-in for a test run: starts a tethered child that itself starts a grandchild (as vLLM's API server starts
# its engine core), prints both pids, then waits to be killed
RUNNER = """
import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import tethered
server = tethered.start([sys.executable, "-c",
    "import subprocess, sys, time; g = subprocess.Popen(['sleep', '300']); print(g.pid, flush=True); time.sleep(300)"],
    sys.stdout)
print(server.pid, flush=True)
time.sleep(300)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def gone_within(pids, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def test_a_killed_test_run_takes_its_servers_with_it():
    pids, watcher = set(), None
    with subprocess.Popen([sys.executable, "-c", RUNNER, str(TESTS)], stdout=subprocess.PIPE, text=True) as runner:
        try:
            grandchild, watcher = int(runner.stdout.readline()), int(runner.stdout.readline())
            pids = {grandchild, watcher}
            assert all(alive(pid) for pid in pids)
            runner.send_signal(signal.SIGKILL)
            runner.wait()
            assert gone_within(pids, 10), "the server's group outlived the killed test run"
        finally:
            runner.kill()
            if watcher is not None:  # a failed test leaves nothing running either: the group is the watcher's
                try:
                    os.killpg(watcher, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def test_stop_ends_the_whole_group_and_a_server_exit_code_comes_through(tmp_path):
    with open(tmp_path / "log", "w") as log:
        server = tethered.start([sys.executable, "-c", "import subprocess; subprocess.Popen(['sleep', '300']).wait()"],
                                log)  # fmt: skip
    time.sleep(0.5)
    assert tethered.group_alive(server.pid)
    tethered.stop(server, grace=5)
    assert not tethered.group_alive(server.pid)
    with open(tmp_path / "log", "w") as log:
        done = tethered.start([sys.executable, "-c", "import sys; print('bye'); sys.exit(3)"], log)
    assert done.wait(timeout=30) == 3
    assert (tmp_path / "log").read_text() == "bye\n"
