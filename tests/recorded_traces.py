"""Traces recorded by an older engine, kept as fixtures, and how closely they must replay here.

A replay is bit for bit on the machine that recorded it: OpenBLAS picks its matrix kernels by CPU
(threadpoolctl names them: "Haswell" on an AVX2 CPU, "SkylakeX" or later on AVX-512), and another kernel sums
in another order, so the last bits of a probability differ (1e-7 relative, seen between this project's
machines). On a CPU of the recording one's kind a fixture must replay identically; on another, every token,
text and id must be the same and every number within 1e-5 of the recorded one."""

from pathlib import Path

import threadpoolctl

import engine
from engine.core.steps import Step
from engine.core.trace import SCHEMA_V1, SCHEMA_V2

FIXTURES = Path(__file__).parent / "fixtures"
AVX2 = {"Haswell", "Zen"}  # OpenBLAS's AVX2 kernels (the v4 fixture's machine: an AMD EPYC)
RECORDED_ON = {"story-trace-v2.json": "AVX-512", "story-trace-v4.json": "AVX2"}  # (v2: the CI machine, a Xeon)


def blas_kind() -> str:
    architectures = {info.get("architecture") for info in threadpoolctl.threadpool_info()}
    return "AVX2" if architectures & AVX2 else "AVX-512"


def assert_replays_as_recorded(name: str, trace: dict, model) -> engine.ReplayReport:
    """The fixture's replay: identical on its own kind of CPU, within float rounding elsewhere."""
    report = engine.replay(trace, model)
    if blas_kind() == RECORDED_ON[name]:
        assert report.identical, report.summary()
        return report
    session, _report = engine.replay_session(trace, model)
    as_recorded = {SCHEMA_V1: Step.to_v1_dict, SCHEMA_V2: Step.to_v2_dict}.get(trace["schema"], Step.to_dict)
    replayed = [as_recorded(step) for step in session.steps]
    assert len(replayed) == len(trace["steps"])
    for index, (old, new) in enumerate(zip(trace["steps"], replayed)):
        _assert_close(old, new, f"step {index}")
    return report


def _assert_close(old, new, where: str) -> None:
    if isinstance(old, dict):
        assert isinstance(new, dict) and old.keys() == new.keys(), where
        for key in old:
            _assert_close(old[key], new[key], f"{where}.{key}")
    elif isinstance(old, list):
        assert isinstance(new, list) and len(old) == len(new), where
        for position, (a, b) in enumerate(zip(old, new)):
            _assert_close(a, b, f"{where}[{position}]")
    elif isinstance(old, float) and not isinstance(new, bool) and isinstance(new, (int, float)):
        assert abs(old - new) <= 1e-5 * max(abs(old), 1e-3), f"{where}: recorded {old!r}, replayed {new!r}"
    else:
        assert old == new, f"{where}: recorded {old!r}, replayed {new!r}"
