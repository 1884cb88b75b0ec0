"""Hostile input (issue 11): every bad value a ValueError that changes nothing, failed steps leave no trace,
corrupt trace files are refused, commands leave nothing running."""

import json
import math
import os
import subprocess
import sys
import time
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import tiny_gguf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
from engine import CommandTool, Session
from engine.backends.local import LocalContext
from engine.core.files import atomic_write_bytes

FIRST = "mia has a red ball."

# --- values ------------------------------------------------------------------------------------------------
junk = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**400), 10**400), st.integers(-5, 70),
    st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 2),
    st.fractions(), st.decimals(allow_nan=True), st.text(max_size=3),
    st.integers(-3, 70).map(np.int64), st.floats(0, 2, width=32).map(np.float32), st.just([1]),
)  # fmt: skip
SETTING_NAMES = ("max_new_tokens", "temperature", "top_k", "top_p", "min_p", "seed")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.fixed_dictionaries({}, optional={name: junk for name in SETTING_NAMES}))
def test_any_settings_either_work_or_raise_value_error(story_model, values):
    try:
        session = Session(story_model, FIRST, **values)
    except ValueError:
        return
    for name in SETTING_NAMES:  # stored as plain Python numbers, whatever came in
        assert type(getattr(session.settings, name)) in (int, float, type(None))
    session.step()  # numpy's warnings ("overflow encountered in cast") are errors under pytest's config
    assert json.loads(json.dumps(session.trace()))["settings"] == session.settings.to_dict()


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(SETTING_NAMES), value=junk)
def test_update_settings_applies_all_or_nothing(story_model, name, value):
    session = Session(story_model, FIRST, temperature=1.0, seed=3)
    session.step()
    before = (session.settings, list(session.actions), len(session.steps))
    try:
        session.update_settings(**{name: value})
    except ValueError:
        assert (session.settings, session.actions, len(session.steps)) == before
        return
    session.step()
    assert engine.replay(session.trace(), story_model).identical


def test_the_reported_values(story_model):
    for value in (10**400, -(10**400), 1e308):
        with pytest.raises(ValueError, match="temperature must be 0 or a finite number from 0.01 to 100"):
            engine.generate(story_model, FIRST, temperature=value)
    half = engine.generate(story_model, FIRST, temperature=Fraction(1, 2), seed=2, max_new_tokens=8)
    assert half.to_dict() == engine.generate(story_model, FIRST, temperature=0.5, seed=2, max_new_tokens=8).to_dict()
    with pytest.raises(ValueError, match="temperature"):
        engine.generate(story_model, FIRST, temperature=Decimal("0.5"))  # not a Real: refused, not crashed
    session = Session(story_model, FIRST, temperature=1.0, seed=np.int64(5))
    session.update_settings(seed=np.int64(6))
    session.run()
    assert engine.replay(session.trace(), story_model).identical
    session.rewind(3)
    before = list(session.actions)
    with pytest.raises(ValueError, match="a choice's source must be 'forced' or 'rule', got 'bogus'"):
        session.choose([" a", " b"], source="bogus")
    assert session.actions == before
    engine.core.trace.validate_trace(session.trace())  # still exportable


# --- no half-done steps ------------------------------------------------------------------------------------
class PoisonedModel:
    """The story model, except that feeding one token makes its scores NaN (as a damaged weight does)."""

    def __init__(self, model, poison: int):
        self.model, self.poison = model, poison

    def __getattr__(self, name):
        return getattr(self.model, name)

    def open_context(self):
        return LocalContext(self)  # its forward passes go through forward_cached below

    def forward_cached(self, ids, cache, last_only=False):
        rows = self.model.forward_cached(ids, cache, last_only=last_only)
        return np.full_like(rows, np.nan) if self.poison in list(ids) else rows


def test_non_finite_scores_are_a_clear_error_and_the_session_is_unchanged(story_model):
    poison = story_model.tokenizer.ids[" ben"]
    model = PoisonedModel(story_model, poison)
    session = Session(model, FIRST, temperature=1.0, seed=1)
    session.step()
    session.force_token(poison)
    session.step()  # the poisoned token is taken; it is fed to the model by the next step
    before = ([s.to_dict() for s in session.steps], list(session.actions), session.text, list(session.ids))
    cache_length = session._context.cache.length
    for _ in range(2):  # and again: the first failure left nothing behind
        with pytest.raises(ValueError, match=rf"non-finite scores \(NaN or inf\) at position {len(session.ids) - 1}"):
            session.step()
        assert ([s.to_dict() for s in session.steps], session.actions, session.text, session.ids) == before
        assert session._context.cache.length == cache_length
    with pytest.raises(ValueError, match="non-finite"):
        session.insert_text(" goes to")
    assert session.actions == before[1] and session._context.cache.length == cache_length
    session.rewind(1)  # back before the poisoned token: the session works on
    assert session.step() is not None


# --- trace files -------------------------------------------------------------------------------------------
@pytest.fixture
def trace(story_model):
    session = Session(story_model, FIRST, temperature=1.0, seed=2, max_new_tokens=12)
    session.step()
    session.insert_text(" to the")
    session.run()
    return session.trace()


@pytest.mark.parametrize("text, message", [
    ("[" * 1000 + "]" * 1000, "nests arrays or objects too deeply"),
    ("PATCH:actions[0].kind=[]", r"actions\[0\]' must be an object whose kind"),
    ("PATCH:settings.temperature=" + "9" * 401, "temperature must be 0 or a finite number"),
    ("PATCH:settings.seed=" + "1" + "0" * 30, "seed must be an int from 0 to"),
    ("PATCH:steps[0].candidates.tokens[0]=7", "candidates.tokens' must hold strings"),
    ("PATCH:steps[0].candidates.raw[0]=1e999", r"candidates.raw' must hold probabilities"),
])  # fmt: skip
def test_corrupt_trace_files_are_refused_with_a_value_error(trace, tmp_path, text, message):
    if text.startswith("PATCH:"):
        where, value = text[len("PATCH:") :].split("=", 1)
        data = json.loads(json.dumps(trace))
        target = data
        parts = where.replace("]", "").replace("[", ".").split(".")
        for part in parts[:-1]:
            target = target[int(part)] if part.isdigit() else target[part]
        last = parts[-1]
        encoded = json.dumps(data)
        placeholder = "__PATCHED__"
        target[int(last) if last.isdigit() else last] = placeholder
        text = json.dumps(data).replace(json.dumps(placeholder), value)
        assert encoded  # the patch is applied to the JSON text, so values Python would not write get in
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        engine.load_trace(path)


def test_a_stream_count_beyond_what_the_trace_holds_does_not_hang(trace, story_model):
    claimed = json.loads(json.dumps(trace))
    claimed["actions"].append({"kind": "stream", "n": 10**30})
    with pytest.raises(ValueError, match="streams claim 1000000000000000000000000000000 tokens, more than the 12"):
        engine.core.trace.validate_trace(claimed)
    claimed["actions"].append({"kind": "rewind", "n": 10**30})  # "justified" by a rewind: the session bounds it
    started = time.monotonic()
    report = engine.replay(claimed, story_model)
    assert time.monotonic() - started < 10
    assert not report.identical and report.summary().startswith(
        "replay stopped at action 12 (rewind): can rewind 0 to 12"
    )


def test_another_models_trace_says_so_first(story_model, tmp_path, monkeypatch):
    monkeypatch.setenv("TOKEN_PLAYGROUND_CACHE", str(tmp_path / "cache"))
    other = engine.load_model(
        tiny_gguf.write(tmp_path / "tiny.gguf", tiny_gguf.random_weights(seed=1)), backend="numpy"
    )
    session = Session(other, "Ünïcode the story model cannot read", max_new_tokens=3)
    session.run()
    with pytest.raises(engine.OtherModelError, match=r"^This trace was recorded with tiny \(weights \w+\), and the "
                                                     r"loaded model is story model \(weights \w+\): replay it on tiny$"):  # fmt: skip
        engine.replay(session.trace(), story_model)
    with pytest.raises(engine.OtherModelError, match=r"and its token id \d+ \(prompt_token_ids\) is not in the "
                                                     r"loaded story model \(weights \w+\), whose vocabulary has 96"):  # fmt: skip
        engine.replay(session.trace(), story_model, other_model=True)  # asked for, but its ids are not the model's


def test_a_writer_killed_midway_leaves_no_temporary_behind_the_next_save(tmp_path, trace):
    target = tmp_path / "run.json"
    code = (f"import os, engine.core.files as c; c.os.replace = lambda *a: os.kill(os.getpid(), 9); "
            f"c.atomic_write_bytes(__import__('pathlib').Path({str(target)!r}), b'x' * 1000)")  # fmt: skip
    for _ in range(3):
        assert subprocess.run([sys.executable, "-c", code]).returncode == -9
    assert len(list(tmp_path.glob("run.json.*.tmp"))) == 1  # each writer removed its dead forerunner's
    engine.save_trace(trace, target)
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]
    assert engine.load_trace(target) == trace
    live = tmp_path / f"run.json.{os.getpid()}.x.tmp"  # a writer that is still alive keeps its file
    live.write_bytes(b"")
    atomic_write_bytes(target, b"{}")
    assert live.exists()


# --- commands ----------------------------------------------------------------------------------------------
def _marked_alive() -> list[int]:
    from engine.core.commands import MARKER

    alive = []
    for environ in __import__("pathlib").Path("/proc").glob("[0-9]*/environ"):
        try:
            if MARKER.encode() in environ.read_bytes():
                alive.append(int(environ.parent.name))
        except OSError:
            continue
    return alive


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("script, output", [
    ("sleep 30 & echo started", "started\n"),  # a background child holding the pipe
    ("(setsid sleep 30 &); echo double", "double\n"),  # a double fork into a new session
    ("setsid sleep 30 > /dev/null & echo detached", "detached\n"),  # a detached child
])  # fmt: skip
def test_commands_leave_nothing_running(script, output):
    started = time.monotonic()
    assert CommandTool(["sh", "-c", script], timeout=5)("") == output
    assert time.monotonic() - started < 2  # the program exited: its children are not waited for
    killed = time.monotonic() + 10  # each was sent SIGKILL: on a busy machine it ends a moment later
    while _marked_alive() and time.monotonic() < killed:
        time.sleep(0.05)
    assert _marked_alive() == []


def test_runaway_output_is_capped_as_it_is_read():
    started = time.monotonic()
    assert CommandTool(["yes"], timeout=1)("") == "[command timed out after 1 s]"
    assert time.monotonic() - started < 2.5
    text = CommandTool([sys.executable, "-c", "print('é' * 10**6)"], max_output=5)("")
    assert text == "ééééé"


@pytest.mark.parametrize("kwargs, message", [
    (dict(timeout=math.inf), "timeout must be a number of seconds"), (dict(timeout=1e300), "timeout"),
    (dict(timeout=0), "timeout"), (dict(on_exit=[1]), "on_exit must map exit statuses"),
    (dict(on_exit={"0": "x"}), "on_exit"), (dict(max_output=10**400), "max_output"),
    (dict(otherwise=3), "otherwise must be text"),
])  # fmt: skip
def test_command_tool_checks_its_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CommandTool(["true"], **kwargs)


# --- the story checkpoint ------------------------------------------------------------------------------------
@pytest.fixture
def checkpoint_copy(tmp_path):
    import shutil

    from engine.story.checkpoint import TOKENIZER_FILE, WEIGHTS_FILE, resources_dir

    for name in (WEIGHTS_FILE, TOKENIZER_FILE):
        shutil.copy(resources_dir() / name, tmp_path / name)
    return tmp_path / WEIGHTS_FILE


def test_byte_flips_in_the_checkpoint_are_refused_with_value_errors(checkpoint_copy):
    original = checkpoint_copy.read_bytes()
    refused = 0
    for position in range(0, len(original), max(1, len(original) // 300)):
        damaged = bytearray(original)
        damaged[position] ^= 0xFF
        checkpoint_copy.write_bytes(bytes(damaged))
        try:
            engine.load_model(checkpoint_copy)
        except ValueError:
            refused += 1
    assert refused >= 290  # the rest fall in bytes no reader looks at (zip padding, comments)


def test_checkpoint_headers_and_sizes_are_checked_before_use(checkpoint_copy):
    import zipfile

    with np.load(checkpoint_copy) as npz:
        arrays = {name: npz[name] for name in npz.files}
    header = json.loads(str(arrays["header"]))
    np.savez(checkpoint_copy, **dict(arrays, header=np.array(json.dumps(dict(header, signature="x")))))
    with pytest.raises(ValueError, match="has no readable signature"):
        engine.load_model(checkpoint_copy)
    # a member whose array header claims 10**12 floats but holds a few bytes: refused before allocating
    fake = bytearray(b"\x93NUMPY\x01\x00")
    text = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }"
    text += " " * (118 - len(text) - 1) + "\n"
    fake += len(text).to_bytes(2, "little") + text.encode() + b"\0" * 16
    with zipfile.ZipFile(checkpoint_copy, "w") as archive:
        for name, array in arrays.items():
            with archive.open(name + ".npy", "w") as member:
                np.lib.format.write_array(member, array)
        archive.writestr("huge.npy", bytes(fake))
    with pytest.raises(ValueError, match=r"claims shape \(1000000000000,\)"):
        engine.load_model(checkpoint_copy)
    # a zip bomb: a small file that would inflate past the limit is refused from its directory
    with zipfile.ZipFile(checkpoint_copy, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("header.npy", "w") as member:
            zeros = bytes(2**20)
            for _ in range(260):
                member.write(zeros)
    assert checkpoint_copy.stat().st_size < 2 * 2**20
    with pytest.raises(ValueError, match="would inflate to 272,629,760 bytes"):
        engine.load_model(checkpoint_copy)


# --- steering calls and trace fields under hypothesis --------------------------------------------------------
junk_args = st.one_of(
    junk, st.lists(st.integers(-3, 100), max_size=4), st.lists(st.text(" abcmnorst.", max_size=6), max_size=3),
    st.text(" abcdemnorst.,", max_size=12), st.sampled_from(["forced", "rule", "tool", "model", "bogus"]),
    st.lists(junk, max_size=3),
)  # fmt: skip
calls = st.lists(st.tuples(
    st.sampled_from(["step", "force_token", "insert_text", "insert_tokens", "choose", "rewind", "update_settings",
                     "set_rules"]),
    junk_args, junk_args,
), max_size=8)  # fmt: skip


def _state(session):
    return ([s.to_dict() for s in session.steps], list(session.actions), session.text, list(session.ids),
            session.settings, session.rules, session._forced)  # fmt: skip


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=calls)
def test_steering_calls_raise_only_value_errors_and_change_nothing_when_they_do(story_model, sequence):
    session = Session(story_model, FIRST, temperature=1.0, seed=3, max_new_tokens=30)
    for name, a, b in sequence:
        before = _state(session)
        try:
            if name == "step":
                session.step()
            elif name in ("insert_tokens", "choose", "insert_text"):
                getattr(session, name)(a, b if isinstance(b, str) else "forced")
            elif name == "update_settings":
                session.update_settings(**{str(b)[:12]: a} if isinstance(b, str) else {"temperature": a})
            elif name == "set_rules":
                session.set_rules([engine.Rule(str(a) or "x", insert=" a")] if isinstance(a, str) else a)
            else:
                getattr(session, name)(a)
        except ValueError:
            assert _state(session) == before, name
    trace = session.trace()
    engine.core.trace.validate_trace(trace)
    assert engine.replay(trace, story_model).identical


@pytest.fixture(scope="module")
def rich_trace(story_model):
    session = Session(story_model, FIRST, temperature=1.0, seed=2, max_new_tokens=14)
    session.step()
    session.insert_text(" to the")
    session.choose([" park", " barn"])
    session.update_settings(temperature=1.3)
    session.run()
    session.rewind(2)
    session.set_rules([engine.Rule(" has", insert=" the")])
    session.run()
    return session.trace()


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            yield from _paths(item, (*path, index))


json_junk = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**40), 10**40), st.floats(allow_nan=False), st.text(max_size=4)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=6,
)  # fmt: skip


@settings(
    max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_trace_fields_of_any_value_load_and_replay_or_raise_value_errors(story_model, rich_trace, tmp_path, data):
    trace = json.loads(json.dumps(rich_trace))
    path = data.draw(st.sampled_from([p for p in _paths(trace) if p]))
    delete, junk = data.draw(st.booleans()), data.draw(json_junk)  # both drawn always: the same draws every run
    target = trace
    for key in path[:-1]:
        target = target[key]
    if delete and isinstance(target, dict):
        del target[path[-1]]
    else:
        target[path[-1]] = junk
    file = tmp_path / "fuzzed.json"
    file.write_text(json.dumps(trace))
    try:
        loaded = engine.load_trace(file)
    except ValueError:
        return
    try:
        engine.replay(loaded, story_model)
    except ValueError:
        pass


@pytest.mark.parametrize("use", [
    lambda model: Session(model, "Paris is\ud800 big"),
    lambda model: Session(model, "Paris", max_new_tokens=3).insert_text("x\udfff"),
    lambda model: Session(model, "Paris", max_new_tokens=3).choose(["yes", "n\ud834o"]),
    lambda model: Session(model, "Paris", rules=[engine.Rule(when="is", insert="\ud800")]),
])  # fmt: skip
def test_a_lone_surrogate_is_a_value_error_for_a_gguf_tokenizer(tmp_path, monkeypatch, use):
    monkeypatch.setenv("TOKEN_PLAYGROUND_CACHE", str(tmp_path / "cache"))
    model = engine.load_model(
        tiny_gguf.write(tmp_path / "tiny.gguf", tiny_gguf.random_weights(seed=1)), backend="numpy"
    )
    with pytest.raises(ValueError, match="holds a lone surrogate"):  # was TypeError from the tokenizers library
        use(model)


def test_the_sweep_for_escaped_children_reads_only_the_processes_started_since_the_command():
    """_end_group reads the environments of the pids the kernel gave out since the command's own (a desktop's
    hundreds of other processes are not read); where the pids wrapped around since, every one."""
    import subprocess
    import sys

    from engine.core.commands import _started_since

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        since = _started_since(child.pid)
        assert child.pid in since and 1 not in since and os.getpid() not in since
        everyone = _started_since(10**9)  # past the last pid given out: wrapped around, as far as it can tell
        assert {1, os.getpid(), child.pid} <= set(everyone)
    finally:
        child.kill()
        child.wait()
