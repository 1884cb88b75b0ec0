"""OpenBLAS's thread count is one for the whole process: a pass's count holds until every thread's pass has
ended (a matrix product's floats depend on it: the story model's prompt read at 1 and 2 threads differed by up
to 4e-6, and a replay beside the window's worker then was not identical)."""

import threading

import numpy as np
import pytest

import engine
from engine.backends.blas_threads import blas_threads, current


@pytest.fixture
def two_blas_threads():
    if not current() or max(current()) < 2:
        pytest.skip("BLAS runs one thread in this process")


def test_a_pass_keeps_its_count_when_another_threads_pass_that_began_first_ends(two_blas_threads):
    before = current()
    other_inside, this_inside, other_done = threading.Event(), threading.Event(), threading.Event()

    def other_pass():
        with blas_threads(1):
            other_inside.set()
            this_inside.wait(10)
        other_done.set()  # it ended while the main thread's pass runs

    worker = threading.Thread(target=other_pass)
    worker.start()
    other_inside.wait(10)
    with blas_threads(1):
        this_inside.set()
        other_done.wait(10)
        seen = current()
    worker.join()
    assert seen == [1] * len(before)  # before: the other pass put the process's count back under this one
    assert current() == before  # and the last pass to end puts it back


def test_the_story_models_prompt_reads_the_same_floats_while_another_thread_steps(two_blas_threads):
    model = engine.load_model()
    ids = model.tokenizer.encode("once upon a time there was a little girl named lily. she loved to play")
    alone = model.forward_cached(ids, model.new_cache())
    stop = threading.Event()

    def stepping():
        session = engine.Session(model, "once upon a time", temperature=1.0, seed=1)
        while not stop.is_set():
            if session.step() is None:
                session = engine.Session(model, "once upon a time", temperature=1.0, seed=1)

    worker = threading.Thread(target=stepping)
    worker.start()
    try:
        reads = [model.forward_cached(ids, model.new_cache()) for _ in range(200)]
    finally:
        stop.set()
        worker.join()
    assert all(np.array_equal(read, alone) for read in reads)
