"""GGUF files that killed the process through llama.cpp, and headers that made discovery and loading walk for
minutes (issue 25, items 1, 8 and 10's context length).

Every load that could crash runs in a child process (sys.executable), so that a crash is a failed test and
not a dead test run: before the fix each variant here ended its child with SIGABRT (or loaded with a context
of 0 or -1, or took minutes)."""

import json
import os
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import tiny_gguf

import engine
from engine.backends.gguf.reader import file_sha256

pytest.importorskip("llama_cpp")

TOKENS, _ = tiny_gguf.vocabulary()
REPEATED = TOKENS[:100] + [TOKENS[101]] + TOKENS[101:]  # token 100 spelled as token 101 is
ROOT = str(Path(__file__).resolve().parents[1])
LOAD_IN_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import engine
    try:
        model = engine.load_model(sys.argv[2], backend=sys.argv[3], threads=1) if sys.argv[3] == "llama.cpp" \\
            else engine.load_model(sys.argv[2], backend=sys.argv[3])
        ids = model.tokenizer.encode("Hello, wörld")
        print("LOADED", model.context_length, model.scores(ids[:2]).shape)
    except ValueError as error:
        print("REFUSED", error)
""")


def write(tmp_path, name, metadata):
    return tiny_gguf.write(tmp_path / f"{name}.gguf", tiny_gguf.random_weights(seed=1), metadata=metadata)


def in_child(path, backend="llama.cpp", code=LOAD_IN_CHILD, timeout=60) -> str:
    """Load the file in a child process -> what it printed; the test fails when the child dies."""
    done = subprocess.run([sys.executable, "-c", code, ROOT, str(path), backend], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "GGML_NO_BACKTRACE": "1"})  # fmt: skip
    assert done.returncode == 0, f"the child ended with {done.returncode}: {done.stderr[-600:]}"
    return done.stdout.strip()


def probe_store(cache_dir) -> Path:
    return cache_dir / "llama.cpp-probes.json"


# --- refused before llama.cpp opens them (each aborted the process before) ----------------------------

ABORTS = {  # name -> (metadata, what the message must say)
    "block_count 0": ({"llama.block_count": 0}, r"llama\.block_count is 0; it must be a positive integer"),
    "block_count 513": ({"llama.block_count": 513}, r"llama\.block_count is 513; .* no larger than 512"),
    "expert_count 1000 without a used count": ({"llama.expert_count": 1000},
                                               r"llama\.expert_used_count is missing; a model with experts"),
    "expert_count 1025": ({"llama.expert_count": 1025, "llama.expert_used_count": 2},
                          r"llama\.expert_count is 1025; .* no larger than 1024"),
    "expert_used_count above expert_count": ({"llama.expert_count": 4, "llama.expert_used_count": 5},
                                             r"llama\.expert_used_count is 5; .* no larger than 4"),
    "experts used where there are none": ({"llama.expert_used_count": 2},
                                          r"llama\.expert_used_count is 2, but the model has no experts"),
    "a token spelled twice": ({"tokenizer.ggml.tokens": REPEATED},
                              r"tokenizer\.ggml\.tokens holds 'b' twice \(tokens 100 and 101\)"),
    "rms epsilon nan": ({"llama.attention.layer_norm_rms_epsilon": float("nan")},
                        r"llama\.attention\.layer_norm_rms_epsilon is nan; it must be a finite positive number"),
    "rms epsilon negative": ({"llama.attention.layer_norm_rms_epsilon": -0.5},
                             r"layer_norm_rms_epsilon is -0\.5; it must be a finite positive number"),
    "SentencePiece on a byte-level vocabulary": ({"tokenizer.ggml.model": "llama"},
                                                 r"tokenizer\.ggml\.model is 'llama' \(SentencePiece\), but the "
                                                 r"vocabulary has no token for 162 of the 256 bytes"),
    "context_length 0": ({"llama.context_length": 0}, r"llama\.context_length is 0; it must be a positive integer"),
    "context_length 2**32 - 1": ({"llama.context_length": 2**32 - 1},
                                 r"llama\.context_length is 4294967295; .*32 signed bits.* no larger than 2147483647"),
}  # fmt: skip


@pytest.mark.parametrize("metadata, message", ABORTS.values(), ids=ABORTS.keys())
def test_a_gguf_llamacpp_aborts_on_is_refused_before_llamacpp_opens_it(tmp_path, cache_dir, metadata, message):
    path = write(tmp_path, "hostile", metadata)
    said = in_child(path)
    assert said.startswith(f"REFUSED {path}: "), said
    assert __import__("re").search(message, said), said
    assert not probe_store(cache_dir).exists()  # refused by the header's checks: no probe was needed


def test_a_gguf_with_a_token_spelled_twice_is_listed_refused_and_not_for_llamacpp(tmp_path, cache_dir):
    folder = tmp_path / "lmstudio" / "someone" / "repo"
    folder.mkdir(parents=True)
    write(folder, "repeated", {"tokenizer.ggml.tokens": REPEATED})
    write(folder, "fine", {})
    found = {m.name: m for m in engine.find_models(hf_cache=tmp_path / "none", lmstudio_dirs=[tmp_path / "lmstudio"],
                                                   ollama_dir=tmp_path / "none", packages=False)}  # fmt: skip
    repeated, fine = found["someone/repo/repeated.gguf"], found["someone/repo/fine.gguf"]
    assert "tokens 100 and 101" in repeated.refused and "llama.cpp" not in repeated.backends
    assert fine.refused is None and fine.backends == ("llama.cpp", "numpy")


def test_smollm2s_own_header_passes_the_llamacpp_checks():
    from engine.backends.llamacpp.checks import llamacpp_refusal

    assert llamacpp_refusal(engine.smollm2_path()) is None


# --- the probe: a new file is tried in a separate process first ------------------------------------------


def test_a_new_file_is_probed_once_then_its_verdict_is_remembered(cache_dir, monkeypatch):
    from engine.backends.llamacpp import probe

    model = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=64)
    model.close()
    (sha, verdict), *others = probe.read_verdicts().items()
    assert not others and sha == model.weights_sha256 == file_sha256(engine.smollm2_path())
    assert verdict["ok"] and verdict["seconds"] > 0 and verdict["path"] == str(engine.smollm2_path().resolve())

    def no_child(*args, **kwargs):
        raise AssertionError("a file with a verdict is not probed again")

    monkeypatch.setattr(probe.subprocess, "Popen", no_child)
    engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=64).close()


CRASH_NO_CHECK_FORESAW = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import engine
    from engine.backends.llamacpp import checks
    checks.check_fields = lambda fields: None  # as for a crash no check foresaw
    for attempt in (1, 2):
        try:
            engine.load_model(sys.argv[2], backend="llama.cpp", threads=1)
            print("LOADED")
        except ValueError as error:
            print("REFUSED", error)
""")


def test_a_file_llamacpp_crashes_on_is_refused_after_its_probe_and_the_app_lives_on(tmp_path, cache_dir, monkeypatch):
    from engine.backends.llamacpp import checks

    path = write(tmp_path, "repeated", {"tokenizer.ggml.tokens": REPEATED})
    first, second = in_child(path, code=CRASH_NO_CHECK_FORESAW).splitlines()
    assert first.startswith(
        f"REFUSED {path}: llama.cpp crashed on this file when it was tried in a separate "
        "process (it ended with SIGABRT: GGML_ASSERT(id_to_token.size() == token_to_id.size())"
    )
    assert first.endswith("the numpy engine may still open it if it passes its checks (backend='numpy')")
    assert second == first  # the verdict, remembered: no second probe
    (verdict,) = json.loads(probe_store(cache_dir).read_text())["files"].values()
    assert verdict["ok"] is False and verdict["hung"] is False
    monkeypatch.setattr(checks, "check_fields", lambda fields: None)  # discovery knows the crash, not the cause
    monkeypatch.setattr(checks, "_PASSED", set())
    (found,) = engine.find_models(hf_cache=tmp_path / "none", lmstudio_dirs=[tmp_path], ollama_dir=tmp_path / "none",
                                  packages=False, recent=[path])  # fmt: skip
    assert found.refused.startswith("llama.cpp crashed on this file") and found.backends == ("numpy",)


def test_a_probe_that_runs_past_its_time_limit_is_stopped_and_the_file_refused(tmp_path, cache_dir, monkeypatch):
    from engine.backends.llamacpp import probe

    monkeypatch.setattr(probe, "BASE_SECONDS", 0.0)
    monkeypatch.setattr(probe, "SECONDS_PER_GB", 0.0)
    path = write(tmp_path, "slow", {})
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"llama\.cpp hung on this file .*\(it was still running after 0 s and "
                                         r"was stopped\)"):  # fmt: skip
        engine.load_model(path, backend="llama.cpp", threads=1)
    assert time.monotonic() - started < 5
    (verdict,) = probe.read_verdicts().values()
    assert verdict["hung"] is True and verdict["ok"] is False


def test_a_probe_is_cancelled_by_its_progress_and_nothing_is_remembered(tmp_path, cache_dir):
    from engine.backends.llamacpp import probe

    class Cancelled(Exception):
        pass

    def cancel_while_probing(done, total):
        if done == 0 and calls.append(1) is None and len(calls) > 2:  # after the hashing's one block
            raise Cancelled

    calls = []
    with pytest.raises(Cancelled) as raised:
        engine.load_model(write(tmp_path, "tiny", {}), backend="llama.cpp", threads=1, progress=cancel_while_probing)
    assert any(entry.name == "_run_child" for entry in raised.traceback)
    assert probe.read_verdicts() == {}


DAMAGED_STORES = [b"", b"{", b"[]", b"\xff" * 10, b"[" * 100_000, b'{"schema": "token-playground/llamacpp-probes/1", '
                  b'"files": {"x": 5, "y": {"ok": "yes", "why": ""}, "z": {"ok": false}}}']  # fmt: skip


@pytest.mark.parametrize("content", DAMAGED_STORES)
def test_a_damaged_verdict_store_holds_no_verdicts(cache_dir, content):
    from engine.backends.llamacpp import probe

    cache_dir.mkdir()
    probe_store(cache_dir).write_bytes(content)
    assert probe.read_verdicts() == {}


def test_a_damaged_verdict_store_is_rewritten_whole_at_the_next_probe(tmp_path, cache_dir):
    from engine.backends.llamacpp import probe

    cache_dir.mkdir()
    probe_store(cache_dir).write_bytes(b'{"schema": "token-playground/llamacpp-probes/1", "files": {"x": ')
    path = write(tmp_path, "tiny", {})
    engine.load_model(path, backend="llama.cpp", threads=1).close()
    assert list(probe.read_verdicts()) == [file_sha256(path)]
    assert not [entry for entry in cache_dir.iterdir() if entry.name.endswith(".tmp")]  # written atomically


# --- headers read within bounds -------------------------------------------------------------------------

GIB = 1 << 30


def sparse_gguf(path: Path, *, keys=1, tensors=0, body=b"", size=GIB) -> Path:
    """A GGUF file of `size` bytes apparent size (a few KB on disk): its header, then zeros."""
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, tensors, keys) + body)
        f.truncate(size)
    return path


def key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


SPARSE = {  # name -> (sparse_gguf options, what the message says)
    "2**62 strings": ({"body": key("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2**62)},
                      r"tokenizer\.ggml\.tokens claims 4,611,686,018,427,387,904 items; at most 2,097,152 are read"),
    "2**26 strings (fit the file's size)": ({"body": key("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2**26)},
                                            r"claims 67,108,864 items; at most 2,097,152"),
    "2**62 numbers": ({"body": key("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 2**62)},
                      r"tokenizer\.ggml\.scores claims 4,611,686,018,427,387,904 items"),
    "2**62 keys": ({"keys": 2**62}, r"the metadata claims 4,611,686,018,427,387,904 items"),
    "a string of 2**62 bytes": ({"body": key("general.name") + struct.pack("<IQ", 8, 2**62)},
                                r"general\.name claims a string of 4,611,686,018,427,387,904 bytes"),
    "2**62 tensors": ({"keys": 0, "tensors": 2**62}, r"the tensor list claims 4,611,686,018,427,387,904 items"),
    "2**20 tensors of zeros (fit the file's size)": ({"keys": 0, "tensors": 2**20 - 1, "size": 2**25},
                                                     r"tensor '' is listed twice"),
}  # fmt: skip


@pytest.mark.parametrize("options, message", SPARSE.values(), ids=SPARSE.keys())
def test_a_sparse_gguf_claiming_huge_counts_is_refused_at_once(tmp_path, cache_dir, options, message):
    path = sparse_gguf(tmp_path / "sparse.gguf", **options)
    started = time.monotonic()
    for backend in ("numpy", "llama.cpp"):  # in a child, with a time limit: this took minutes (or crashed)
        said = in_child(path, backend=backend, timeout=30)
        assert said.startswith(f"REFUSED {path}: ") and __import__("re").search(message, said), said
    assert time.monotonic() - started < 20


FIND_IN_CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    import engine
    started = time.monotonic()
    (found,) = engine.find_models(hf_cache="/nonexistent", lmstudio_dirs=[sys.argv[2]], ollama_dir="/nonexistent",
                                  packages=False)
    print(round(time.monotonic() - started, 2), found.refused)
""")


def test_finding_models_reads_a_sparse_files_header_within_bounds(tmp_path, cache_dir):
    sparse_gguf(tmp_path / "sparse.gguf", body=key("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2**62))
    seconds, refused = in_child(tmp_path, code=FIND_IN_CHILD, timeout=30).split(" ", 1)  # it took 48-81 s
    assert float(seconds) < 2 and "claims 4,611,686,018,427,387,904 items" in refused


def test_one_deeply_nested_ollama_manifest_hides_only_its_own_model(tmp_path):
    blob = tmp_path / "ollama" / "blobs" / f"sha256-{'a' * 64}"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(tiny_gguf.write(tmp_path / "tiny.gguf", tiny_gguf.random_weights(seed=1)).read_bytes())
    library = tmp_path / "ollama" / "manifests" / "registry.ollama.ai" / "library"
    for model, text in (("good", json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                                         "digest": f"sha256:{'a' * 64}"}]})),
                        ("nested", "[" * 100_000 + "]" * 100_000)):  # fmt: skip
        (library / model).mkdir(parents=True)
        (library / model / "latest").write_text(text)
    found = engine.find_models(hf_cache=tmp_path / "none", lmstudio_dirs=[], ollama_dir=tmp_path / "ollama",
                               packages=False)  # fmt: skip
    assert [m.name for m in found] == ["good:latest"]


def test_a_file_name_that_is_not_utf8_is_found_shown_and_opened(tmp_path, cache_dir):
    folder = tmp_path / "lmstudio" / "someone" / "repo"
    folder.mkdir(parents=True)
    path = Path(os.fsdecode(os.fsencode(folder) + b"/\xff.gguf"))
    tiny_gguf.write(path, tiny_gguf.random_weights(seed=1))
    (found,) = engine.find_models(hf_cache=tmp_path / "none", lmstudio_dirs=[tmp_path / "lmstudio"],
                                  ollama_dir=tmp_path / "none", packages=False)  # fmt: skip
    assert found.name == "someone/repo/\ufffd.gguf" and found.name.encode("utf-8")
    for backend in found.backends:
        model = engine.load_model(found.path, backend=backend, **({"threads": 1} if backend == "llama.cpp" else {}))
        session = engine.Session(model, "Hello", max_new_tokens=2, seed=1)
        session.run()
        engine.save_trace(session.trace(), tmp_path / f"{backend}.json")  # the name, as UTF-8
        assert model.name == "\ufffd" and model.describe()["name"].encode("utf-8")


# --- in the window ---------------------------------------------------------------------------------------


def test_the_picker_offers_no_llamacpp_line_for_a_file_llamacpp_would_abort_on(qtbot, tmp_path, cache_dir, prefs,
                                                                              story_model, monkeypatch):  # fmt: skip
    """It was listed for llama.cpp, and picking it killed the window (exit 134)."""
    from conftest import shown_window
    from PySide6.QtCore import Qt

    folder = tmp_path / "lmstudio" / "someone" / "repo"
    folder.mkdir(parents=True)
    path = write(folder, "repeated", {"tokenizer.ggml.tokens": REPEATED})
    find = engine.find_models
    monkeypatch.setattr(engine, "find_models", lambda recent=(): find(
        hf_cache=tmp_path / "hub", lmstudio_dirs=[tmp_path / "lmstudio"], ollama_dir=tmp_path / "ollama",
        recent=recent, packages=False))  # fmt: skip
    window = shown_window(qtbot, story_model, prefs)
    picker = window.controls.model_picker

    def lines():
        return [picker.itemText(i) for i in range(picker.count())]

    qtbot.waitUntil(lambda: "someone/repo/repeated.gguf — numpy reference engine" in lines(), timeout=30000)
    assert "someone/repo/repeated.gguf — llama.cpp" not in lines()  # checked first: a crash below cannot happen
    tip = picker.itemData(lines().index("someone/repo/repeated.gguf — numpy reference engine"),
                          Qt.ItemDataRole.ToolTipRole)  # fmt: skip
    assert "not offered to llama.cpp: tokenizer.ggml.tokens holds 'b' twice (tokens 100 and 101)" in tip
    with qtbot.waitSignal(window.controller.message, timeout=30000) as shown:
        window.controller.models.open_model(str(path), backend="llama.cpp")  # by hand, as Open GGUF file... does
    assert "holds 'b' twice" in shown.args[0] and "story model" in window.windowTitle()
    window.close()
