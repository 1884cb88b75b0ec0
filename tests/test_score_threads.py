"""Scoring on llama.cpp under contention (issue 30): a scoring context computes with no more threads than the
cores the rest of the machine leaves idle (2 threads beside other work lost up to 3.8x against llama.cpp's own
evaluation), at least one, with the same scores; its passes are as large as 128 MiB of rows allows."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import engine
from engine.backends.llamacpp.cache import threads_for
from engine.backends.local import score_chunk
from engine.core.cpu_load import OtherWork, _cpu_times, busy_cores, idle_cores, usable_cores

LONG_TEXT = (
    "The history of computing is longer than the history of computing hardware and modern computing technology. " * 40
)
TEXT = "The history of computing is longer than the history of computing hardware and modern computing. " * 8


@pytest.fixture(scope="module")
def smollm2_two_threads():
    pytest.importorskip("llama_cpp")
    loaded = engine.load_model("smollm2", backend="llama.cpp", threads=2, context_length=1024)
    yield loaded
    loaded.close()


@pytest.fixture
def every_core_busy():
    """A spinning child process on each core this process may use (each ends by itself within 60 s)."""
    spin = "import time\nend = time.time() + 60\nwhile time.time() < end: pass"
    children = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(usable_cores())]
    time.sleep(0.5)  # they are running
    yield
    for child in children:
        child.kill()
        child.wait()


@pytest.mark.parametrize(("threads", "idle", "chosen"), [(2, 2, 2), (2, 1, 1), (2, 0, 1), (8, 3, 3), (1, 5, 1)])
def test_a_pass_takes_no_more_threads_than_idle_cores_and_at_least_one(threads, idle, chosen):
    assert threads_for(threads, idle) == chosen


@pytest.mark.parametrize(("cores", "busy", "idle"), [(2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 1.0, 1), (2, 2.0, 0),
                                                     (2, 9.0, 0), (16, 4.2, 12)])  # fmt: skip
def test_a_core_is_idle_when_the_other_work_leaves_at_least_half_of_it(cores, busy, idle):
    assert idle_cores(cores, busy) == idle


def test_the_machines_busy_cores_count_spinning_processes(every_core_busy):
    assert busy_cores() >= usable_cores() - 0.5


def test_the_other_work_is_read_while_this_process_sleeps_or_computes_without_counting_this_process(every_core_busy):
    meter = OtherWork()
    time.sleep(0.5)  # the spinning children have every core
    assert meter.cores() >= usable_cores() - 0.5
    before, own_before, wall_before = _cpu_times(), time.process_time(), time.perf_counter()
    while time.perf_counter() < wall_before + 0.5:  # this process takes its share of a core from them
        pass
    after, own = _cpu_times(), (time.process_time() - own_before) / (time.perf_counter() - wall_before)
    machine = (os.cpu_count() or 1) * ((after[0] - before[0]) - (after[1] - before[1])) / (after[0] - before[0])
    assert own > 0.2
    assert meter.cores() <= machine - own / 2  # the machine's busy cores less this process's own (give or take)


def test_a_scoring_pass_takes_the_threads_the_last_pass_left_idle(smollm2_two_threads):
    """The load arrives while a long text is scored: the next pass computes with one thread, the same scores."""
    model = smollm2_two_threads
    ids = model.tokenizer.encode(LONG_TEXT)[:600]
    assert score_chunk(model.vocab_size) < len(ids) - 1  # two passes
    context = model.open_context()
    passes = context.score_chunks(ids, engine.Settings())
    first, _rows = next(passes)
    spin = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"
    children = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(usable_cores())]
    try:
        time.sleep(3.0)  # the other work outweighs the first pass in what the meter read
        second, _rows = next(passes)
        assert context.cache.threads == 1
        passes.close()
    finally:
        for child in children:
            child.kill()
            child.wait()
    alone = model.open_context().score(ids, engine.Settings())
    assert [step.to_dict() for step in first + second] == [step.to_dict() for step in alone]


def test_a_busy_machine_scores_with_one_thread_and_the_same_scores(smollm2_two_threads, smollm2_llamacpp,
                                                                    every_core_busy):  # fmt: skip
    ids = smollm2_two_threads.tokenizer.encode(TEXT)
    context = smollm2_two_threads.open_context()
    busy = [step.to_dict() for step in context.score(ids, engine.Settings(temperature=0.8))]
    assert context.cache.threads == 1  # beside a spinning process on every core: one thread, not the model's 2
    one = smollm2_llamacpp.open_context().score(ids, engine.Settings(temperature=0.8))
    assert busy == [step.to_dict() for step in one]


def test_scoring_passes_hold_at_most_128_mib_of_rows_from_128_to_512_positions():
    assert score_chunk(49_152) == 512  # SmolLM2: 96 MiB
    assert score_chunk(262_144) == 128  # Gemma 3: 128 MiB
    assert score_chunk(150) == 512  # the story model
    assert score_chunk(2_000_000) == 128  # never fewer than before


def test_a_long_text_scores_as_llamacpps_own_evaluation_of_it(smollm2_two_threads):
    """681 tokens: the surprisals of llama.cpp's own decode of the text (512 positions a batch); 128-position
    passes differed from it by up to 0.14 nats in the last, 40-position pass (llama.cpp's numbers depend on the
    batch)."""
    model = smollm2_two_threads
    ids = model.tokenizer.encode(LONG_TEXT)[:681]
    assert len(ids) == 681
    rows = model.forward_cached(ids[:-1], model.new_cache()).astype(np.float64)
    rows -= rows.max(axis=1, keepdims=True)
    log_probs = rows - np.log(np.exp(rows).sum(axis=1, keepdims=True))
    theirs = -log_probs[np.arange(len(ids) - 1), ids[1:]]
    ours = np.array([step.surprisal for step in engine.score(model, ids).steps])
    assert np.abs(ours - theirs).max() < 1e-5
