"""The model's own vocabulary through llama.cpp: encode, decode, a token's bytes and the chat template.

Special tokens are parsed in text (a chat template's <|im_start|> stays one token); BOS is added when the
vocabulary says so. The chat template renders through the numpy engine's jinja2 path (GGUFTokenizer's).
"""

import ctypes
import functools

from engine.backends.gguf.chat_template import checked_template
from engine.backends.gguf.tokenizer import GGUFTokenizer
from engine.core.checks import checked_text


class LlamaCppTokenizer:
    def __init__(self, llama, vocab, chat_template: str | None):
        self._llama = llama
        self._vocab = vocab
        self.vocab_size = llama.llama_vocab_n_tokens(vocab)
        bos = llama.llama_vocab_bos(vocab)
        self.bos_id = bos if 0 <= bos < self.vocab_size else None
        self.add_bos = bool(llama.llama_vocab_get_add_bos(vocab)) and self.bos_id is not None
        eos = llama.llama_vocab_eos(vocab)
        self.bos_text = self._piece(self.bos_id).decode("utf-8", "replace") if self.bos_id is not None else ""
        self.eos_text = self._piece(eos).decode("utf-8", "replace") if 0 <= eos < self.vocab_size else ""
        self.chat_template, self.chat_template_problem = checked_template(chat_template, self.bos_text, self.eos_text)
        self._pieces: dict[int, bytes] = {}

    chat_prompt = GGUFTokenizer.chat_prompt  # the same jinja2 rendering: chat_template, bos_text, eos_text
    messages_prompt = GGUFTokenizer.messages_prompt
    use_chat_template = GGUFTokenizer.use_chat_template

    def encode(self, text: str) -> list[int]:
        ids = self._tokenize(checked_text(text).encode("utf-8"), parse_special=True)
        if self.add_bos and not (ids and ids[0] == self.bos_id):  # a template's own BOS is not doubled
            ids = [self.bos_id] + ids
        return ids

    def encode_fragment(self, data: bytes) -> list[int]:
        """A piece of text (any bytes) alone: no BOS, special tokens' text taken as plain text."""
        return self._tokenize(bytes(data), parse_special=False)

    def _tokenize(self, data: bytes, parse_special: bool) -> list[int]:
        self._check_open()
        size = len(data) + 8
        while True:
            buffer = (self._llama.llama_token * size)()
            count = self._llama.llama_tokenize(self._vocab, data, len(data), buffer, size, False, parse_special)
            if count >= 0:
                return list(buffer[:count])
            if -count <= size:
                raise ValueError(f"llama.cpp could not tokenize the text ({count})")
            size = -count

    def decode(self, ids) -> str:
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """A token's own bytes (special tokens as their text): a character may span tokens."""
        token_id = int(token_id)
        piece = self._pieces.get(token_id)
        if piece is None:
            if not 0 <= token_id < self.vocab_size:
                raise ValueError(f"token id {token_id} is outside the vocabulary (0 to {self.vocab_size - 1})")
            piece = self._pieces[token_id] = self._piece(token_id)
        return piece

    @functools.cached_property
    def special_ids(self) -> frozenset[int]:
        """Control and user-defined tokens (kept whole as their text): token healing never cuts one."""
        self._check_open()
        llama, whole = self._llama, self._llama.LLAMA_TOKEN_ATTR_CONTROL | self._llama.LLAMA_TOKEN_ATTR_USER_DEFINED
        return frozenset(i for i in range(self.vocab_size) if llama.llama_vocab_get_attr(self._vocab, i) & whole)

    def close(self) -> None:
        """The model is freed: its vocabulary must not be read again."""
        self._vocab = None

    def _check_open(self) -> None:
        if self._vocab is None:
            raise ValueError("the model is closed: its vocabulary is gone")

    def _piece(self, token_id: int) -> bytes:
        self._check_open()
        size = 64
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = self._llama.llama_token_to_piece(self._vocab, token_id, buffer, size, 0, True)
            if n >= 0:
                return buffer.raw[:n]
            size = -n
