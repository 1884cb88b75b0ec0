"""The vocabulary of a model Ollama serves, read from its GGUF file on this machine (Ollama's blobs are GGUF
files): Ollama names no token ids and has no tokenize endpoint, so the engine's own GGUF tokenizer
(engine/backends/gguf, no weights read) tokenizes the text and maps each token Ollama sends to an id by its
bytes.

The file is found as Ollama finds it: the manifest manifests/HOST/NAMESPACE/MODEL/TAG in Ollama's models
folder ($OLLAMA_MODELS, else ~/.ollama/models) names the model layer's blob, blobs/sha256-HEX. The manifest's
own sha256 is the digest /api/tags lists, so a local copy that is not the one served is refused.
"""

import hashlib
import json
import os
import re
from pathlib import Path

from engine.backends.gguf.checks import tokenizer_spec
from engine.backends.gguf.metadata import read_header
from engine.backends.gguf.tokenizer import GGUFTokenizer, build_tokenizer

OLLAMA_REGISTRY = "registry.ollama.ai"  # as engine/discovery.py (not imported: discovery imports loading)
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_DEFAULT_CONTEXT = 4096  # Ollama's num_ctx unless OLLAMA_CONTEXT_LENGTH or a Modelfile sets another


def ollama_models_dir() -> Path:
    """Ollama's models folder: $OLLAMA_MODELS, else ~/.ollama/models."""
    env = os.environ.get("OLLAMA_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".ollama" / "models"


def manifest_path(name: str, folder: Path) -> Path:
    """Where Ollama keeps the manifest of a model it lists as `name` ("smollm2:135m", "user/model:tag",
    "host/user/model:tag"; no tag: "latest")."""
    path, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "latest")
    parts = path.split("/")
    host, namespace = OLLAMA_REGISTRY, "library"
    if len(parts) == 3:
        host, namespace = parts[0], parts[1]
    elif len(parts) == 2:
        namespace = parts[0]
    return folder / "manifests" / host / namespace / parts[-1] / tag


def local_gguf(name: str, digest: str, folder: Path, server: str) -> Path:
    """The GGUF file of the model `server` lists as `name` with this manifest digest; ValueError saying where
    it was looked for, and how to point there, when it is not on this machine or is another version."""
    manifest = manifest_path(name, folder)
    where = (f"looked for its manifest at {manifest} (Ollama's models folder: $OLLAMA_MODELS, else "
             "~/.ollama/models)")  # fmt: skip
    why = (
        "Ollama names no token ids, so the playground reads the model's tokenizer from its GGUF file: run "
        "the playground where Ollama keeps its models, or set $OLLAMA_MODELS to a folder that holds them"
    )
    if not manifest.is_file():
        raise ValueError(f"{name} at {server}: its GGUF file is not on this machine ({where}). {why}")
    local = hashlib.sha256(manifest.read_bytes()).hexdigest()
    if local != digest.removeprefix("sha256:"):
        raise ValueError(f"{name} at {server} is not the copy on this machine ({manifest} has sha256 {local[:12]}, "
                         f"the server lists {digest[:12]}): pull the same version here, or set $OLLAMA_MODELS")  # fmt: skip
    blob = _model_blob(manifest, folder / "blobs")
    if blob is None or not blob.is_file():
        raise ValueError(f"{name}: its manifest {manifest} names no model file in {folder / 'blobs'}. {why}")
    return blob


def _model_blob(manifest: Path, blobs: Path) -> Path | None:
    """The blob a manifest names as its model layer (None: a manifest that names none)."""
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers")
    except (OSError, ValueError, RecursionError, AttributeError):
        return None
    for layer in layers if isinstance(layers, list) else []:
        digest = (
            re.fullmatch(r"sha256:([0-9a-f]{64})", str(layer.get("digest", ""))) if isinstance(layer, dict) else None
        )
        if digest and layer.get("mediaType") == OLLAMA_MODEL_LAYER:
            return blobs / f"sha256-{digest.group(1)}"
    return None


class OllamaTokenizer:
    """The GGUF file's own tokenizer (the engine's, as the numpy backend builds it) with a bytes -> id table:
    a token's bytes as Ollama sends them (llama.cpp's piece, special tokens as their text, trailing NUL bytes
    cut) name its id."""

    def __init__(self, path: Path, name: str):
        try:
            fields = {key: value.tolist() if hasattr(value, "tolist") else value
                      for key, value in read_header(path, tensors=False).fields.items()}  # fmt: skip
            spec = tokenizer_spec(fields, len(fields.get("tokenizer.ggml.tokens") or []))
            self.gguf = GGUFTokenizer(build_tokenizer(spec), spec)
        except (ValueError, OSError) as error:
            raise ValueError(f"{name}: its GGUF file {path} gives no tokenizer the engine reads: {error}") from None
        self.name = name
        self.vocab_size = self.gguf.vocab_size
        architecture = fields.get("general.architecture")
        trained = fields.get(f"{architecture}.context_length")
        self.context_length = min(trained, OLLAMA_DEFAULT_CONTEXT) if isinstance(trained, int) and trained > 0 \
            else OLLAMA_DEFAULT_CONTEXT  # fmt: skip
        self._ids: dict[bytes, int] = {}
        for token_id in range(self.vocab_size):
            data = self.gguf.token_bytes(token_id).rstrip(b"\x00")
            self._ids[data] = -1 if data in self._ids else token_id  # shared bytes: the id cannot be told
        self._pieces: dict[int, str] = {}

    def id_for(self, data: bytes) -> int | None:
        """The id of the token with these bytes; -1 where several share them; None where none has them."""
        return self._ids.get(bytes(data))

    # --- the contract's tokenizer, and what Server asks of its tokenizer -----------------------------------
    def encode(self, text: str) -> list[int]:
        return self.gguf.encode(text)

    def decode(self, ids) -> str:
        return self.gguf.decode(ids)

    def token_bytes(self, token_id: int) -> bytes:
        return self.gguf.token_bytes(token_id)

    def chat_prompt(self, user_text: str) -> str:
        return self.gguf.chat_prompt(user_text)

    def messages_prompt(self, messages: list[dict], tools: list | None = None) -> str:
        return self.gguf.messages_prompt(messages, tools)

    @property
    def chat_template(self) -> str | None:
        return self.gguf.chat_template

    def piece(self, token_id: int) -> str:
        """A token's own text, as a local model's step shows it."""
        if token_id not in self._pieces:
            self._pieces[token_id] = self.gguf.decode([token_id])
        return self._pieces[token_id]

    def token_id(self, text: str, ask: bool = True) -> int:
        """The id of a text that is one token on its own, else -1 (nothing is asked of the server)."""
        ids = self.gguf.encode_fragment(text.encode("utf-8")) if text else []
        return ids[0] if len(ids) == 1 else -1

    def text_of(self, ids) -> str:
        """The text Ollama is sent for these ids: their bytes (a character split across tokens whole again), without
        the BOS Ollama adds itself; U+FFFD for a character cut at the end (a JSON string cannot hold part of one)."""
        ids = list(ids)
        if self.gguf.add_bos and ids[:1] == [self.gguf.bos_id]:
            ids = ids[1:]
        return b"".join(self.gguf.token_bytes(i) for i in ids).decode("utf-8", "replace")
