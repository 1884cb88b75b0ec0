"""How many threads BLAS (numpy's OpenBLAS) may use for a forward pass, chosen per kind of pass.

OpenBLAS's worker threads synchronise by spinning. On a machine whose cores are busy with something else
(another program, a compiler, a test run, or the window's own GUI thread), a BLAS thread that loses its
core makes the others spin until the scheduler brings it back, milliseconds per matrix product:
SmolLM2's single-token decode fell from ~25 to 1.3-5 tokens/s with one busy process beside it on 2 cores.

The choices, measured with `python bench/gguf_speed.py` on this 2-core machine (quiet, and with one
process spinning beside it). A row vector's products give the same floats at any count; a matrix product's
do not (the story model's prompt read at 1 and at 2 threads: up to 4e-6 apart), so a count holds while any
thread's pass runs (below):
- DECODE_THREADS = 1: one new token is a row vector times each weight matrix. Two threads are faster on
  an idle machine (SmolLM2: 40 against 24 tokens/s; 32 against 22 in the window), but fall to 18-19.5
  tokens/s beside one busy process and to 1.2-5 when the machine is loaded, while one thread keeps 24
  in all three. One thread is the count that never collapses: 0.6x of the idle best at worst.
- PREFILL_THREADS = every usable core but one, at most 4: a prompt is a real matrix product that more
  cores do speed up, and one core left free (for the window's GUI thread, or whatever else runs) keeps
  a spinning BLAS thread from losing its core. On 2 cores that is 1 thread: the 200-token prompt takes
  0.44 s with 1 in every case, with 2 threads 0.28 s idle, 0.75 s beside a busy process and 2-13 s on
  a loaded machine. Larger machines: not measured here.

Each pass sets its count on entry and puts the previous one back on exit (a ctypes call of ~1 us;
threadpoolctl's context manager re-scans the loaded libraries: 30-220 us a call). OpenBLAS's count is
process-wide, and threadpoolctl lets only the first thread that set it change it again (others are
silently ignored): through it, the window's worker QThread stayed at 2 threads whenever another thread
had set a count first (1.4 tokens/s, measured). So OpenBLAS's own setter is called directly, from
whichever thread runs the pass.
"""

import itertools
import os
import threading


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what this process may run on (taskset, cgroup cpusets)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


DECODE_THREADS = 1
PREFILL_THREADS = max(1, min(4, _usable_cpus() - 1))

_lock = threading.Lock()
_libraries: list | None = None  # [(get_num_threads, set_num_threads)] per loaded BLAS library, found once


def _openblas_functions(controller):
    """OpenBLAS's own get/set functions (any symbol prefix or suffix), or None."""
    dynlib = getattr(controller, "dynlib", None)
    for prefix, suffix in itertools.product(("", "scipy_"), ("", "64_", "_64")):
        get = getattr(dynlib, f"{prefix}openblas_get_num_threads{suffix}", None)
        set_ = getattr(dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
        if get is not None and set_ is not None:
            return get, set_
    return None


def _find_libraries() -> list:
    try:
        from threadpoolctl import ThreadpoolController

        controllers = ThreadpoolController().select(user_api="blas").lib_controllers
    except Exception:  # noqa: BLE001 - no threadpoolctl, or a BLAS it cannot read: leave threads alone
        return []
    found = []
    for controller in controllers:
        direct = None
        if controller.internal_api == "openblas" and getattr(controller, "threading_layer", "") != "openmp":
            direct = _openblas_functions(controller)  # pthreads OpenBLAS: one process-wide pool
        # elsewhere (OpenMP, MKL, BLIS) threadpoolctl's setter acts for the calling thread
        found.append(direct or (controller.get_num_threads, controller.set_num_threads))
    return found


def _blas_libraries() -> list:
    global _libraries
    if _libraries is None:
        with _lock:
            if _libraries is None:
                _libraries = _find_libraries()
    return _libraries


def current() -> list[int]:
    """The thread count of each loaded BLAS library, as the calling thread sees it now."""
    return [get() for get, _set in _blas_libraries()]


class _Held:
    """The count in force while passes run, process-wide. OpenBLAS's count is one for the whole process, so a
    pass that ends must not put the previous count back under another thread's pass (the worker's pass ending
    during a replay's prompt gave that prompt 2 threads: other floats). The first pass sets its count and the
    last one to end puts the previous counts back; a pass that starts while others run takes the count in force
    (it never waits: a pass may wait on a thread whose pass asked another count, as the lens grid's does)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.passes = 0
        self.restore: list[tuple] = []  # (set function, count before the first pass) of each library it lowered

    def enter(self, count: int) -> None:
        with self.lock:
            if self.passes == 0:
                restore = []
                for get, set_ in _blas_libraries():
                    before = get()
                    if before > count:  # never more than allowed before (OPENBLAS_NUM_THREADS, threadpoolctl)
                        set_(count)
                        restore.append((set_, before))
                self.restore = restore
            self.passes += 1

    def exit(self) -> None:
        with self.lock:
            self.passes -= 1
            if self.passes == 0:
                for set_, before in self.restore:
                    set_(before)


_held = _Held()


class blas_threads:  # noqa: N801 - used like a function: `with blas_threads(1): ...`
    """Context manager: BLAS uses at most `count` threads inside (never more than it was allowed before,
    so an OPENBLAS_NUM_THREADS setting or a caller's threadpoolctl limit still holds; where another thread's
    pass is running, the count in force: _Held); the previous counts come back after the last pass."""

    __slots__ = ("count",)

    def __init__(self, count: int):
        self.count = count

    def __enter__(self):
        _held.enter(self.count)
        return self

    def __exit__(self, *exc):
        _held.exit()
        return False


def for_tokens(count: int) -> blas_threads:
    """The limit for a forward pass over `count` new tokens: one token (decode) or a prompt (prefill)."""
    return blas_threads(DECODE_THREADS if count == 1 else PREFILL_THREADS)
