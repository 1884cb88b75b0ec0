"""Shared by the bench scripts (run as `python bench/<script>.py`, so this file is importable)."""

import time


def timed_steps(session, count: int) -> list[float]:
    """Seconds each of up to `count` session.step() calls took (fewer if the session stops)."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        if session.step() is None:
            break
        times.append(time.perf_counter() - started)
    return times
