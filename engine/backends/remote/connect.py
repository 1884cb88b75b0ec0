"""load_remote: the model at a server's url, through Ollama's native API where the server is Ollama (ollama.py),
else through the OpenAI-compatible /v1/completions (model.py)."""

from engine.backends.remote.model import RemoteModel
from engine.backends.remote.ollama import OllamaModel, is_ollama


def load_remote(url: str, model_name: str | None = None, timeout: float = 30.0) -> RemoteModel:
    if is_ollama(url, timeout):
        return OllamaModel(url, model_name=model_name, timeout=timeout)
    return RemoteModel(url, model_name=model_name, timeout=timeout)
