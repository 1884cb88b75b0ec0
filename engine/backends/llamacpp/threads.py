"""How many CPU threads llama.cpp computes with when none are asked for: every physical core but one, at least 1.

ggml's threads wait for each other at every operation by spinning. A thread that loses its core (to the
window's own GUI thread, a compiler, a test run, another program) holds up all the others until the
scheduler brings it back, so a count that fills the machine collapses as soon as anything else runs.
Measured on this project's 2-core machine (`python bench/llamacpp_threads.py [--busy 1]`: SmolLM2 through
engine.Session, 1 and 2 threads taking turns in each round; medians, ranges in docs/models.md):
- beside the other work of a shared machine: decode 62-67 tokens/s at 1 thread, 12-15 at 2 (6-97); the
  first token of a chat prompt 0.32-0.35 s at 1 thread, 0.4-1.0 s at 2 (0.2-2.7);
- with one more busy process: 37 against 2.8 tokens/s; first token 0.47 against 5.3 s;
- 2 threads won only in the rounds where the machine happened to be quiet, and by little (best rounds
  93-97 against 73-79 tokens/s).
The load on a machine comes and goes; two threads lose 4-13x (medians) whenever it is there, one thread
slows only by the share of the core it loses. A calibration at load would measure one moment's load and
keep it, so the rule is fixed: one core is left free for the window and the rest of the machine (1 thread
on 2 cores). Machines with more cores were not measured here.
"""

import os
from pathlib import Path

GGML_MAX_THREADS = 512  # ggml's GGML_MAX_N_THREADS: a count above it overran ggml's arrays (100,000: SIGSEGV)


def logical_cpus() -> int:
    """The logical CPUs this process may run on (its affinity; all of the machine's if unknown)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def max_threads() -> int:
    """The most CPU threads llama.cpp is given (the model settings dialog's maximum too): the logical CPUs this
    process may use, at most ggml's 512. ggml's threads spin while they wait for each other, so threads beyond
    the CPUs only slow every step (5,000 threads on 2 cores: 95 s for 3 tokens)."""
    return min(logical_cpus(), GGML_MAX_THREADS)


def check_threads(threads) -> int:
    """threads itself if llama.cpp may be given it; else a ValueError saying what is allowed."""
    high = max_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= high:
        raise ValueError(f"threads must be a whole number from 1 to {high} (the logical CPUs this process may "
                         f"use, at most ggml's {GGML_MAX_THREADS}), got {threads!r}")  # fmt: skip
    return threads


def physical_cores() -> int:
    """Physical cores this process may use (llama.cpp's own default thread count); logical CPUs if unknown."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((topology / "physical_package_id").read_text(), (topology / "core_id").read_text()))
        except OSError:
            return len(cpus) or 1
    return len(cores) or 1


def default_threads() -> int:
    """llama.cpp's threads when none are given: every physical core but one, at least 1 (1 on 2 cores)."""
    return max(1, physical_cores() - 1)


DEFAULT_THREADS_RULE = "every core but one, at least 1"  # how the window and --help name the default
