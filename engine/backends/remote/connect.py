"""load_remote: the model at an inference server's address, of the kind the server is: Ollama through its native API
(ollama.py: found by /api/version and /api/tags at the root), SGLang through its native API (sglang.py: found by its
own /get_model_info), every other server through the OpenAI-compatible endpoints (RemoteModel)."""

from engine.backends.remote.connection import ServerConnection
from engine.backends.remote.model import RemoteModel
from engine.backends.remote.ollama import OllamaModel
from engine.backends.remote.ollama_answers import _tags, _version
from engine.backends.remote.sglang import SGLangModel
from engine.backends.remote.sglang_answers import model_info

KINDS = (  # a server's own endpoints at its root, each with its answer's checker, and the model for that server
    (OllamaModel, (("/api/version", _version), ("/api/tags", _tags))),
    (SGLangModel, (("/get_model_info", model_info),)),
)
PROBE_TIMEOUT = 5.0  # s: a probe is one try; a server that refuses it is left to the OpenAI path, which says why


def load_remote(url: str, model_name: str | None = None, timeout: float = 30.0) -> RemoteModel:
    kind = next((kind for kind, probes in KINDS if _answers(url, min(timeout, PROBE_TIMEOUT), probes)), RemoteModel)
    return kind(url, model_name=model_name, timeout=timeout)


def _answers(url: str, timeout: float, probes) -> bool:
    """Whether the server at url (with or without /v1) answers each probe's path at its root as the checker expects."""
    url = url.rstrip("/").removesuffix("/v1")
    connection = ServerConnection(url + "/v1", timeout, retries=1)
    try:
        for path, check in probes:
            connection.get(path, root=True, check=check)
        return True
    except ValueError:
        return False
    finally:
        connection.close()
