"""RemoteTokenizer: the server's own tokenizer, over HTTP, with what it answered kept (per text, per id)."""

from typing import Protocol

from engine.core.checks import checked_text


class Tokenizing(Protocol):
    """What the tokenizer asks of its Server (server.py; not imported: the Server makes its tokenizer)."""

    def tokenize(self, text: str) -> list[int]: ...

    def detokenize(self, ids: list[int]) -> str: ...


class RemoteTokenizer:
    """The server's own tokenizer, over HTTP (so the chart and the trace show the tokens the model sees)."""

    def __init__(self, server: Tokenizing):
        self.server = server
        self.vocab_size = None
        self._ids: dict[str, list[int]] = {}
        self._pieces: dict[int, str] = {}

    def encode(self, text: str) -> list[int]:
        checked_text(text)
        if text not in self._ids:
            self._ids[text] = self.server.tokenize(text) if text else []
        return list(self._ids[text])

    def decode(self, ids) -> str:
        return self.server.detokenize([int(i) for i in ids])

    def piece(self, token_id: int) -> str:
        """One token's own text (what a step shows and adds to the text), asked once per id."""
        if token_id not in self._pieces:
            self._pieces[token_id] = self.decode([token_id])
        return self._pieces[token_id]

    def token_bytes(self, token_id: int) -> bytes:
        return self.piece(token_id).encode("utf-8")  # a server sends text: a split character is already whole

    def token_id(self, text: str, ask: bool = True) -> int:
        """The id of a token the server reported by its text (-1 if it is not one token on its own, or, with
        ask=False, if the server was not asked yet: during a stream, llama-cpp-python's server ends the
        stream when another request arrives)."""
        if not ask and text not in self._ids:
            return -1
        ids = self.encode(text) if text else []
        return ids[0] if len(ids) == 1 else -1
