"""What runs a loaded model, as the window names it (the picker, the comparison's names, the autosave's request)."""

ENGINE_NAMES = {"llama.cpp": "llama.cpp", "numpy": "numpy reference engine"}


def model_backend(model) -> str | None:
    """What runs a loaded model: "llama.cpp", "numpy" for a GGUF file in the numpy engine, None otherwise."""
    if not model.source or model.source.startswith(("http://", "https://")):
        return None
    return model.describe().get("backend", "numpy")
