"""A virtualenv of its own for a library the tests drive from outside (vLLM, lm-evaluation-harness): its pins stay
apart from the playground's. Built in a folder beside its place and renamed into place once its imports work, so a
cut install leaves nothing that looks finished; a lock file keeps two processes (two test workers) from building
it at once. It lives in <user cache>/<name>/<version>/ and is built once per machine."""

import os
import shutil
import subprocess
import sys
from pathlib import Path


def venv_dir(name: str, version: str) -> Path:
    from engine.model_packages import cache_root

    return cache_root() / name / version


def installed_python(name: str, version: str) -> Path | None:
    """The finished virtualenv's interpreter (None: not built on this machine)."""
    python = venv_dir(name, version) / "bin" / "python"
    return python if python.exists() else None


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")


def install(name: str, version: str, packages, imports, uninstall=()) -> Path:
    """The virtualenv's interpreter, built first where this machine has none: pip installs `packages`, removes
    `uninstall` (what breaks the others), and the build must import `imports`."""
    from local_servers import locked

    if installed_python(name, version):
        return installed_python(name, version)
    target = venv_dir(name, version)
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target.parent / f"{target.name}.lock"):
        if installed_python(name, version):  # another process built it while we waited
            return installed_python(name, version)
        building = target.parent / f"{target.name}.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(building)])
        python = str(building / "bin" / "python")
        _run([python, "-m", "pip", "install", "--quiet", *packages])
        if uninstall:
            _run([python, "-m", "pip", "uninstall", "--quiet", "-y", *uninstall])
        _run([python, "-c", f"import {', '.join(imports)}"])
        building.rename(target)  # a venv's interpreter finds its packages relative to itself: it may move
    return installed_python(name, version)
