"""The settings trace's workers (issue 30): one per core the machine's other work leaves at least a tenth free,
at least one; the table is the same whatever their number."""

import pytest

from engine.story import corpus as stories
from engine.story.settings_trace import SETTINGS, machine_workers, settings_table, trace_workers


@pytest.mark.parametrize(
    ("cores", "busy", "workers"),
    [
        (2, 0.0, 2),  # a quiet machine: both cores
        (2, 0.3, 2),  # a little background work leaves both mostly free
        (2, 0.7, 2),  # a core partly busy still gives its turns (2 workers 2.1 s, one 3.7-4.0 s, measured)
        (2, 1.0, 1),  # one core busy beside it: one worker (two were 1.8x slower)
        (2, 1.8, 1),  # a busy machine: still one
        (2, 7.5, 1),  # overloaded: never fewer than one
        (1, 0.0, 1),
        (16, 12.2, 4),
        (64, 0.0, len(SETTINGS)),  # no more workers than settings to share out
    ],
)
def test_the_trace_takes_no_more_workers_than_idle_cores_and_at_least_one(cores, busy, workers):
    assert trace_workers(cores, busy) == workers


@pytest.mark.parametrize(("cores", "busy"), [(0, 0.0), (2.0, 0.0), (True, 0.0), (2, -1.0), (2, float("nan")),
                                             (2, float("inf")), (2, "1")])  # fmt: skip
def test_bad_cores_or_busy_figures_are_refused(cores, busy):
    with pytest.raises(ValueError, match="cores must be|busy must be"):
        trace_workers(cores, busy)


def test_this_machine_gets_between_one_worker_and_its_cores():
    import os

    assert 1 <= machine_workers() <= len(os.sched_getaffinity(0))


def test_the_settings_table_is_the_same_with_one_worker_or_two(story_model):
    _train, dev, _test = stories.split()
    assert settings_table(story_model, dev[:3], workers=2) == settings_table(story_model, dev[:3], workers=1)
