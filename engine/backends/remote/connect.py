"""load_remote: the model at an inference server's address, of the kind the server is: Ollama through its native API
(ollama.py: found by /api/version and /api/tags at the root), SGLang through its native API (sglang.py: found by its
own /get_model_info), every other server through the OpenAI-compatible endpoints (RemoteModel)."""

from engine.backends.remote.model import RemoteModel
from engine.backends.remote.ollama import OllamaModel, is_ollama
from engine.backends.remote.sglang import SGLangModel, serves_sglang


def load_remote(url: str, model_name: str | None = None, timeout: float = 30.0) -> RemoteModel:
    if is_ollama(url, timeout):
        kind = OllamaModel
    else:
        kind = SGLangModel if serves_sglang(url, timeout) else RemoteModel
    return kind(url, model_name=model_name, timeout=timeout)
