"""The tokenizer of a GGUF model, built from the file's metadata with Hugging Face `tokenizers`.

Byte-level BPE (tokenizer.ggml.model = "gpt2"): the vocabulary and merges come from the file; control
tokens such as <|im_start|> are added as special tokens, so they stay single tokens in a prompt; the
pre-tokenizer follows tokenizer.ggml.pre (the split rules llama.cpp uses for that name); BOS is added when
the file asks for it. A "chat format" renders a prompt with the file's own chat template (jinja2).
"""

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from engine.backends.gguf.chat_template import TemplateLimit, checked_template, render
from engine.core.checks import checked_text

CONTROL, USER_DEFINED = 3, 4  # llama.cpp token types

# Split rules by tokenizer.ggml.pre (from llama.cpp's llama-vocab.cpp). The GPT-2 rule is ByteLevel's own.
GPT2 = "gpt2"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")  # fmt: skip
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")  # fmt: skip
PRE_TOKENIZERS = {
    "default": (False, GPT2), "gpt2": (False, GPT2),
    "smollm": (True, GPT2),  # every digit on its own, then GPT-2's rule
    "llama-bpe": (False, LLAMA3), "llama3": (False, LLAMA3), "smaug-bpe": (False, LLAMA3),
    "qwen2": (False, QWEN2),
}  # fmt: skip


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte -> the byte (byte-level BPE vocabularies)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + n): b for n, b in enumerate(others)}


_UNICODE_TO_BYTE = _byte_level_alphabet()


def build_tokenizer(spec: dict) -> Tokenizer:
    """spec: tokens, merges, token_types, pre (from the GGUF metadata) -> a Hugging Face Tokenizer."""
    if spec["model"] != "gpt2":
        raise ValueError(f"tokenizer model {spec['model']!r} is not supported (only byte-level BPE, 'gpt2')")
    vocab = {token: index for index, token in enumerate(spec["tokens"])}
    merges = [tuple(merge.split(" ", 1)) for merge in spec["merges"]]
    try:
        return _built(spec, vocab, merges)
    except Exception as error:  # noqa: BLE001 - `tokenizers` raises a bare Exception on a bad vocabulary
        raise ValueError(f"the tokenizer cannot be built from tokenizer.ggml.tokens and .merges: {error}") from None


def _built(spec: dict, vocab: dict, merges: list) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
    digits, rule = PRE_TOKENIZERS.get(spec["pre"], (False, GPT2))
    steps = [pre_tokenizers.Digits(individual_digits=True)] if digits else []
    if rule == GPT2:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    else:
        steps += [pre_tokenizers.Split(Regex(rule), behavior="isolated"),
                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]  # fmt: skip
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tokenizer.decoder = decoders.ByteLevel()
    added = [
        AddedToken(token, special=kind == CONTROL, normalized=False)
        for token, kind in zip(spec["tokens"], spec["token_types"])
        if kind in (CONTROL, USER_DEFINED)
    ]
    tokenizer.add_tokens(added)
    return tokenizer


class GGUFTokenizer:
    """encode(text) -> ids and decode(ids) -> text, with the surface the engine and the window use."""

    def __init__(self, tokenizer: Tokenizer, spec: dict):
        self.hf = tokenizer
        self.vocab_size = len(spec["tokens"])
        self.bos_id = spec.get("bos_id")
        self.add_bos = bool(spec.get("add_bos")) and self.bos_id is not None
        self.bos_text, self.eos_text = spec.get("bos_text", ""), spec.get("eos_text", "")
        self.chat_template, self.chat_template_problem = checked_template(
            spec.get("chat_template"), self.bos_text, self.eos_text
        )
        self.pre = spec["pre"]
        self.special_tokens = {spec["tokens"][i]: i for i, kind in enumerate(spec["token_types"]) if kind == CONTROL}
        self._added_ids = {i for i, kind in enumerate(spec["token_types"]) if kind in (CONTROL, USER_DEFINED)}
        self.special_ids = frozenset(self._added_ids)  # kept whole: token healing never cuts one

    def encode(self, text: str) -> list[int]:
        checked_text(text)  # `tokenizers` raises TypeError on a lone surrogate
        ids = self.hf.encode(text, add_special_tokens=False).ids
        return [self.bos_id] + ids if self.add_bos else ids

    def encode_fragment(self, data: bytes) -> list[int]:
        """A piece of text alone: no BOS (bytes that are not UTF-8 are read as U+FFFD)."""
        return self.hf.encode(data.decode("utf-8", errors="replace"), add_special_tokens=False).ids

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids]
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary (0 to {self.vocab_size - 1})")
        return self.hf.decode(ids, skip_special_tokens=False)

    def token_bytes(self, token_id: int) -> bytes:
        """A token's own bytes: what decode([id]) shows as "\ufffd" when a character's bytes span tokens."""
        token_id = int(token_id)
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} is outside the vocabulary (0 to {self.vocab_size - 1})")
        piece = self.hf.id_to_token(token_id) or ""
        if token_id in self._added_ids:  # control and user-defined tokens are kept as plain text
            return piece.encode("utf-8")
        try:
            return bytes(_UNICODE_TO_BYTE[char] for char in piece)
        except KeyError:  # not a byte-level piece after all
            return self.decode([token_id]).encode("utf-8")

    def chat_prompt(self, user_text: str, system: str | None = None) -> str:
        """The prompt as the model was trained to see a user's turn (the file's chat template, rendered within
        limits: engine/backends/gguf/chat_template.py). A template that runs past one is not run again."""
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user_text}
        ]
        return self.messages_prompt(messages)

    def use_chat_template(self, source: str) -> None:
        """Another chat template than the file's (llama-server's --chat-template-file): ValueError where it fails a
        limit on a plain user's turn."""
        kept, problem = checked_template(source, self.bos_text, self.eos_text)
        if kept is None:
            raise ValueError(problem or "the chat template is empty")
        self.chat_template, self.chat_template_problem = kept, None

    def messages_prompt(self, messages: list[dict], tools: list | None = None) -> str:
        """A conversation ([{"role", "content"}], the assistant's turn next) through the chat template (tools:
        OpenAI's, for a template that writes them itself)."""
        if not self.chat_template:
            raise ValueError(self.chat_template_problem or "this model file has no chat template")
        try:
            return render(self.chat_template, messages, self.bos_text, self.eos_text, tools)
        except TemplateLimit as error:  # the template's fault only where a plain turn fails too
            kept, problem = checked_template(self.chat_template, self.bos_text, self.eos_text)
            if kept is not None:  # this conversation's: the next request is not refused for it
                raise ValueError(f"the conversation is too long for the chat template: {error}") from None
            self.chat_template, self.chat_template_problem = None, problem
            raise ValueError(self.chat_template_problem) from None
