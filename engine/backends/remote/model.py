"""RemoteModel: a model on an OpenAI-compatible server, behind the backend contract (connect.py's load_remote picks
it, or a kind built on it). All it asks the server is its Server's (server.py), which its tokenizer and contexts
share."""

from engine.backends.remote.context import RemoteContext
from engine.backends.remote.server import TOP_N, Server
from engine.core.contract import Capabilities

__all__ = ["TOP_N", "RemoteModel"]


class RemoteModel(Server):
    """A model on an OpenAI-compatible server, behind the backend contract: the server samples, and the
    engine reads its top-N log-probabilities."""

    end_reason = "end of text"
    end_token_ids = frozenset()  # the server says when it stopped
    capabilities = Capabilities(
        full_distribution=False, local_sampling=False, local_tokenizer=False, chat_template=False, streaming=True
    )

    def close(self) -> None:
        self.connection.close()

    # --- the backend contract ---------------------------------------------------------------------------------
    def open_context(self) -> RemoteContext:
        return RemoteContext(self)

    def has_chat_template(self) -> bool:
        return False  # the server keeps its template

    def chat_prompt(self, user_text: str) -> str:
        raise ValueError(f"{self.name}: the server's chat template is not available here; send the text as it is")

    def describe(self) -> dict:
        """The trace's "model": where the server was, which model, and how prompts were sent and scored."""
        scoring = {
            "echo": "echo: one request echoes the prompt's log-probabilities (one request per token where the echo does not line up)",
            "per position": "one request per position: each forced token read from the top N of a one-token request",
        }
        return {
            "name": self.name,
            "weights_sha256": self.weights_sha256,
            "url": self.root,
            "server_model": self.model_id,
            "prompt_format": "token ids" if self.protocol.get("token_id_prompts") else "text",
            "scoring": scoring.get(self.protocol.get("scoring"), "unknown"),
            "logprobs": self.protocol.get("logprobs", "unknown"),  # raw (before its sampler), processed, or unknown
            "alternatives": self.protocol.get("alternatives", 0),  # the top N it gives per token
            "ids": self.protocol.get("ids", "by text"),  # which tokens come with their ids: every token, drawn tokens
        }
