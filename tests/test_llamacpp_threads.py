"""Issue 25, item 3: llama.cpp is given only the CPU threads the model settings dialog offers: 1 to the logical
CPUs this process may use (at most ggml's 512). 100,000 threads crashed the process at the first step (SIGSEGV);
5,000 took 95 s for 3 tokens on 2 cores."""

import subprocess
import sys

import pytest

import engine

pytest.importorskip("llama_cpp")

# A step with 100,000 threads, in a child process: before the limit it died there (SIGSEGV), killing only the child.
HUNDRED_THOUSAND_THREADS = """
import engine
try:
    model = engine.load_model("smollm2", backend="llama.cpp", threads=100_000, context_length=256)
except ValueError as error:
    print("REFUSED:", error)
else:
    print("GENERATED:", engine.generate(model, "Hi", max_new_tokens=3).text)
"""


@pytest.mark.parametrize("threads", [0, -1, "max + 1", 5_000, 100_000, 2.0, True, "2"])
def test_threads_outside_one_to_the_cpus_are_refused_before_llamacpp_opens_the_file(threads, tmp_path):
    threads = engine.max_threads() + 1 if threads == "max + 1" else threads
    missing = tmp_path / "none.gguf"  # refused on the threads alone: the file is never opened
    for source in ("smollm2", missing):
        with pytest.raises(ValueError, match=rf"threads must be a whole number from 1 to {engine.max_threads()} "
                                             r"\(the logical CPUs this process may use, at most ggml's 512\), got "):  # fmt: skip
            engine.load_model(source, backend="llama.cpp", threads=threads)


def test_a_step_with_a_hundred_thousand_threads_is_refused_not_a_crash():
    child = subprocess.run([sys.executable, "-c", HUNDRED_THOUSAND_THREADS], capture_output=True, text=True,
                           timeout=300)  # fmt: skip
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr[-2000:]}"  # was -11 (SIGSEGV)
    assert "REFUSED: threads must be a whole number from 1 to" in child.stdout


def test_the_most_threads_allowed_generate():
    model = engine.load_model("smollm2", backend="llama.cpp", threads=engine.max_threads(), context_length=256)
    try:
        assert model.threads == engine.max_threads() and len(engine.generate(model, "Hi", max_new_tokens=3).steps) == 3
    finally:
        model.close()


def test_the_limit_is_the_cpus_this_process_may_use_and_the_default_keeps_within_it():
    import os

    assert engine.max_threads() == min(len(os.sched_getaffinity(0)), 512)
    assert 1 <= engine.default_threads() <= engine.max_threads()
