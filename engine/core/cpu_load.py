"""How many of this process's cores the rest of the machine leaves idle now: the settings trace's workers are
never more than those (beside other work, 2 workers were 1.8x slower than one).

The busy share is measured over a short window from /proc/stat (Linux) while this process sleeps, so that
its own recent work does not count against it (the load average would count it for a minute); elsewhere the
1-minute load average stands in."""

import math
import os
import time

WINDOW = 0.1  # seconds /proc/stat is watched


def idle_cores(cores: int, busy: float, free_share: float = 0.5) -> int:
    """The cores of `cores` that `busy` cores' worth of other work leaves idle (a core counts when at least
    free_share of it is free), at least 0. ValueError for a count of cores below 1 or a busy figure not >= 0."""
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise ValueError(f"cores must be an int >= 1, not {cores!r:.40}")
    if isinstance(busy, bool) or not isinstance(busy, (int, float)) or not 0 <= busy < math.inf:
        raise ValueError(f"busy must be a number of cores >= 0, not {busy!r:.40}")
    return max(0, math.floor(cores - busy + 1 - free_share))


def usable_cores() -> int:
    """The logical CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def busy_cores(window: float = WINDOW) -> float:
    """Cores' worth of work the machine did over the next `window` seconds (this thread asleep; the whole
    machine's CPUs, also those outside this process's affinity), or the 1-minute load average where
    /proc/stat cannot be read."""
    try:
        first = _cpu_times()
        time.sleep(window)
        second = _cpu_times()
    except (OSError, ValueError, IndexError):
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    total, idle = second[0] - first[0], second[1] - first[1]
    machine_cores = os.cpu_count() or 1  # /proc/stat's first line sums every CPU of the machine
    return 0.0 if total <= 0 else machine_cores * (total - idle) / total


def _cpu_times() -> tuple[int, int]:
    """(all ticks, idle and iowait ticks) of /proc/stat's line for the whole machine."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    return sum(fields[:8]), fields[3] + fields[4]
