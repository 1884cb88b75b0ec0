"""Scoring on llama.cpp under contention (issue 30): its passes are as large as 128 MiB of rows allows, and they
compute with the model's threads whatever the load (a pass of hundreds of positions loses little to a thread that
waits for its core; engine/backends/local.py's score_chunk has the figures), with the scores of one thread. The
machine's busy cores (the settings trace's workers are chosen from them) are read from /proc/stat."""

import subprocess
import sys
import time

import numpy as np
import pytest

import engine
from engine.backends.llamacpp.library import llama
from engine.backends.local import score_chunk
from engine.core.cpu_load import busy_cores, idle_cores, usable_cores

LONG_TEXT = (
    "The history of computing is longer than the history of computing hardware and modern computing technology. " * 40
)
TEXT = "The history of computing is longer than the history of computing hardware and modern computing. " * 8


TWO = min(2, engine.max_threads())  # 1 where this process may use one CPU only (taskset -c 0)


@pytest.fixture(scope="module")
def smollm2_two_threads():
    pytest.importorskip("llama_cpp")
    loaded = engine.load_model("smollm2", backend="llama.cpp", threads=TWO, context_length=1024)
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


@pytest.mark.parametrize(("cores", "busy", "idle"), [(2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 1.0, 1), (2, 2.0, 0),
                                                     (2, 9.0, 0), (16, 4.2, 12)])  # fmt: skip
def test_a_core_is_idle_when_the_other_work_leaves_at_least_half_of_it(cores, busy, idle):
    assert idle_cores(cores, busy) == idle


def test_the_machines_busy_cores_count_spinning_processes(every_core_busy):
    assert busy_cores() >= usable_cores() - 0.5


def test_a_busy_machine_scores_with_the_models_threads_and_the_scores_of_one_thread(
    smollm2_two_threads, every_core_busy
):
    """Beside a spinning process on every core, a long text (two passes) is scored with the model's 2 threads, as
    llama.cpp itself reports of the context, and every record is the 1-thread model's."""
    if TWO < 2:
        pytest.skip("this process may use one CPU: a model of 2 threads cannot be made here")
    model = smollm2_two_threads
    ids = model.tokenizer.encode(LONG_TEXT)[:600]
    assert score_chunk(model.vocab_size) < len(ids) - 1  # two passes
    context = model.open_context()
    passes = context.score_chunks(ids, engine.Settings(temperature=0.8))
    busy = [step.to_dict() for steps, _rows in passes for step in steps]
    assert llama().llama_n_threads_batch(context.cache.ctx) == 2
    one_thread = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=1024)
    try:
        one = one_thread.open_context().score(ids, engine.Settings(temperature=0.8))
    finally:
        one_thread.close()
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
