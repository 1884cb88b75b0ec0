"""llama.cpp's own server (llama-server, the C++ one most people run), built for the tests from the llama.cpp
that the installed llama-cpp-python vendors: its sdist from PyPI holds vendor/llama.cpp.

Built once per machine into the user's cache, keyed by the llama-cpp-python version and the build flags, and
reused: the first build takes about 10 minutes on 2 cores. The build runs in a temporary folder beside the
cache entry and is renamed into place (a reader sees a whole binary or none); a lock file keeps two pytest
processes from building at once. A failed build raises RuntimeError with the end of its log.

    python tests/llama_server_build.py      # build (or find) it and print its path
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import platformdirs
from local_servers import locked

# No native build: this machine's CPU reports AMX, and ggml's AMX matmul crashes there. No network at build
# time: no web UI (it would be downloaded), no curl, no OpenSSL. Static, so the binary survives the rename.
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON",
    "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON",
)  # fmt: skip
JOBS = 2
LOG_TAIL = 3000  # characters of the build log a failure shows


def cache_dir() -> Path:
    """<user cache>/llama-server/<llama-cpp-python version>-<hash of the flags>/ (TOKEN_PLAYGROUND_CACHE,
    as for the GGUF cache, overrides the user cache)."""
    root = Path(os.environ.get("TOKEN_PLAYGROUND_CACHE") or platformdirs.user_cache_dir("token-playground"))
    flags = hashlib.sha256(" ".join(CMAKE_FLAGS).encode()).hexdigest()[:12]
    return root / "llama-server" / f"{version('llama_cpp_python')}-{flags}"


def llama_server_binary() -> Path:
    """The cached llama-server, built first if this machine has none for this version and these flags."""
    target = cache_dir()
    binary = target / "llama-server"
    if binary.exists():
        return binary
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target.parent / f"{target.name}.lock"):
        if not binary.exists():  # another process may have built it while we waited
            for stale in target.parent.glob(f"{target.name}.building-*"):  # left by a build that was killed
                shutil.rmtree(stale, ignore_errors=True)
            _build(target)
    return binary


def _build(target: Path) -> None:
    log_path = target.parent / f"{target.name}.build.log"
    work = Path(tempfile.mkdtemp(prefix=f"{target.name}.building-", dir=target.parent))
    started = time.monotonic()
    try:
        with open(log_path, "w") as log:
            source = _vendored_llama_cpp(work, log)
            _run(["cmake", "-S", str(source), "-B", str(work / "build"), *CMAKE_FLAGS], log, log_path)
            _run(["cmake", "--build", str(work / "build"), "--target", "llama-server", "-j", str(JOBS)], log, log_path)
            staged = work / "staged"
            staged.mkdir()
            shutil.copy2(work / "build" / "bin" / "llama-server", staged / "llama-server")
            log.write(f"\nbuilt in {time.monotonic() - started:.0f} s\n")
        shutil.copy2(log_path, staged / "build.log")
        staged.rename(target)  # atomic: the cache entry appears whole
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _vendored_llama_cpp(work: Path, log) -> Path:
    """vendor/llama.cpp from the sdist of the installed llama-cpp-python (PyPI, through pip)."""
    wanted = version("llama_cpp_python")
    download = work / "sdist"
    # --no-binary for this package only: its build backend's own dependencies may come as wheels
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
               f"llama-cpp-python=={wanted}", "-d", str(download)]  # fmt: skip
    _run(command, log, Path(log.name))
    (archive,) = download.glob("*.tar.gz")
    prefix = f"{archive.name[: -len('.tar.gz')]}/vendor/llama.cpp/"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python 3.10.12+ has filters
        tar.extractall(work / "src", members=members, **safe)
    return work / "src" / prefix


def _run(command: list[str], log, log_path: Path) -> None:
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    log.flush()
    if result.returncode != 0:
        tail = log_path.read_text(errors="replace")[-LOG_TAIL:]
        failed = f"{Path(command[0]).name} exited {result.returncode}"
        raise RuntimeError(f"building llama-server failed ({failed}; log {log_path}):\n{tail}")


if __name__ == "__main__":
    print(llama_server_binary())
