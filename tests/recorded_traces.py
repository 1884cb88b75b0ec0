"""Traces recorded by an older engine, kept as fixtures, and how closely they must replay here.

A replay is bit for bit on the machine that recorded it: OpenBLAS picks its matrix kernels by CPU
(threadpoolctl names them: "Haswell" on an AVX2 CPU, "SkylakeX" or later on AVX-512), and another kernel sums
in another order, so the last bits of a probability differ (1e-7 relative, seen between this project's
machines). On a CPU of the recording one's kind a fixture must replay identically; on another, every token,
text and id must be the same and every number within float rounding of the recorded one (the engine's verdict
"within rounding")."""

from pathlib import Path

import threadpoolctl

import engine
from engine.core.verdict import IDENTICAL, WITHIN_ROUNDING

FIXTURES = Path(__file__).parent / "fixtures"
AVX2 = {"Haswell", "Zen"}  # OpenBLAS's AVX2 kernels (the v4 fixture's machine: an AMD EPYC)
RECORDED_ON = {"story-trace-v2.json": "AVX-512", "story-trace-v4.json": "AVX2"}  # (v2: the CI machine, a Xeon)


def blas_kind() -> str:
    architectures = {info.get("architecture") for info in threadpoolctl.threadpool_info()}
    return "AVX2" if architectures & AVX2 else "AVX-512"


def assert_replays_as_recorded(name: str, trace: dict, model) -> engine.ReplayReport:
    """The fixture's replay: identical on its own kind of CPU; elsewhere the engine's own second verdict, the same
    tokens with every number within float rounding (engine/core/verdict.py)."""
    report = engine.replay(trace, model)
    if blas_kind() == RECORDED_ON[name]:
        assert report.identical, report.summary()
    else:
        assert report.verdict in (IDENTICAL, WITHIN_ROUNDING), report.summary()
    return report
