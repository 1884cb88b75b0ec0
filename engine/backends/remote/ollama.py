"""A model served by Ollama, through its native API (0.12.11 and later): /api/tags lists the models,
/api/generate with raw: true (no template) generates, with logprobs and the top 20 alternatives.

What Ollama gives and does not, and what follows here:
- Each token as text and bytes, no ids, and no tokenize endpoint: the model's GGUF file must be on this
  machine (ollama_vocab.py), its tokenizer tokenizes prompts (Ollama takes text only) and maps each token
  Ollama sends to an id by its bytes. Where the file is not here, connecting is a ValueError saying where it
  was looked for.
- Log-probabilities from the model's raw logits (not scaled by temperature: "raw", found at connect as on the
  other servers), the top 20 at most per token.
- No prompt log-probabilities (no echo) and no logit bias: a forced or inserted token's probability comes
  from one one-token request per position reading its top 20 (outside them: unknown, None), and engine.score
  is refused (OllamaContext.score), as are logit bias, DRY, XTC, top-n-sigma and grammars.
- Its options' defaults are not neutral (top_k 40, top_p 0.9, repeat_penalty 1.1, temperature 0.8): every
  request sends them all (OllamaModel.options).
- Where Ollama would end the text (its end token drawn greedily), it reports nothing for the position: its
  top 20 there are unknown.
- A token that is part of a character gets no logprobs when the answer ends after it (Ollama's runner drops
  text it cannot show whole, and the logprobs with it): one-token reads ask for up to 4 tokens and close the
  stream after the first (OllamaModel.first).
"""

from contextlib import closing
from pathlib import Path

from engine.backends.remote.answers import TopN
from engine.backends.remote.context import RemoteContext
from engine.backends.remote.model import RemoteModel
from engine.backends.remote.ollama_answers import _chunk, _tags, _version
from engine.backends.remote.ollama_vocab import OllamaTokenizer, local_gguf, ollama_models_dir
from engine.backends.remote.server import TOP_N, logprobs_kind
from engine.core.contract import Capabilities

FIRST_VERSION = (0, 12, 11)  # the first Ollama that answers logprobs
UTF8_MAX = 4  # tokens a one-token read asks for: enough for the bytes of any character
CANNOT = (
    "score a text (engine.score): Ollama gives no prompt log-probabilities",
    "a forced or inserted token's probability outside the top 20 of its position: unknown",
    "the top 20 where the model would end the text: Ollama reports nothing for its end token",
    "logit bias, DRY, XTC, top-n-sigma, grammars: Ollama has no such options",
)


def _version_tuple(text: str) -> tuple[int, ...]:
    numbers = []
    for part in text.lstrip("v").split("-")[0].split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)


class OllamaContext(RemoteContext):
    def score(self, ids, settings):
        raise ValueError(f"{self.server.name}: Ollama gives no log-probabilities for a prompt's tokens (no echo), so "
                         "it cannot score a text; a local model (the same GGUF file through llama.cpp) or a server "
                         "that echoes (vLLM) can")  # fmt: skip


class OllamaModel(RemoteModel):
    """A model on an Ollama server, behind the backend contract: Ollama samples, the engine reads its top 20
    raw log-probabilities and names the tokens' ids from the local GGUF file's vocabulary."""

    def __init__(self, url: str, model_name: str | None = None, timeout: float = 30.0, retries: int | None = None,
                 models_dir=None):  # fmt: skip
        self.models_dir = Path(models_dir) if models_dir is not None else ollama_models_dir()
        super().__init__(url, model_name=model_name, timeout=timeout, retries=retries)

    # --- connecting ---------------------------------------------------------------------------------------
    def _connect(self, model_name) -> None:
        self.version = self.connection.get("/api/version", root=True, check=_version)
        if (0, 0, 0) < _version_tuple(self.version) < FIRST_VERSION:
            raise ValueError(f"Ollama {self.version} at {self.root} gives no log-probabilities; 0.12.11 and later do")
        listed = self.connection.get("/api/tags", root=True, check=_tags)
        if not listed:
            raise ValueError(f"Ollama at {self.root} has no models (ollama pull one)")
        names = [entry["name"] for entry in listed]
        if model_name is None:
            model_name = names[0]
        wanted = model_name if ":" in model_name.rsplit("/", 1)[-1] else model_name + ":latest"
        if wanted not in names:
            raise ValueError(f"model {model_name!r} not found at {self.root} (Ollama has: {', '.join(names)})")
        entry = listed[names.index(wanted)]
        self.model_id = wanted
        self.name = f"{wanted} @ {self.root}"
        self.gguf = local_gguf(wanted, entry["digest"], self.models_dir, f"Ollama at {self.root}")
        self.tokenizer = OllamaTokenizer(self.gguf, wanted)
        self.vocab_size = self.id_limit = self.tokenizer.vocab_size
        self.weights_sha256 = self.gguf.name.removeprefix("sha256-")  # Ollama's blobs are named by their sha256
        self.context_length = self.tokenizer.context_length
        self.capabilities = Capabilities(full_distribution=False, local_sampling=False, local_tokenizer=True,
                                         chat_template=bool(self.tokenizer.gguf.chat_template), streaming=True)  # fmt: skip
        self.protocol = {
            "tokenize": "local GGUF",
            "token_id_prompts": False,
            "scoring": "per position",
            "ids": "every token",
        }  # by their bytes, through the GGUF file's tokenizer
        self.protocol.update(self._find_logprobs())

    def _find_logprobs(self) -> dict:
        """As Server._find_logprobs: one position read at temperature 1 and 0.5 (Ollama's are raw)."""
        prompt = "The capital of France is"
        tops = [self.first(prompt, {**self.options(None), "temperature": t, "seed": 0}) for t in (1.0, 0.5)]
        tops = [token.top if token else TopN() for token in tops]
        return {"logprobs": logprobs_kind(*tops), "alternatives": max(len(top.entries) for top in tops)}

    # --- requests -----------------------------------------------------------------------------------------
    def options(self, settings) -> dict:
        """Ollama's options for engine Settings (None: greedy), every one sent: Ollama's defaults are not off.
        Settings Ollama cannot apply are a ValueError, not ignored."""
        if settings is None:
            return {"temperature": 0, "seed": 0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0,
                    "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}  # fmt: skip
        unsupported = [name for name, on in (("logit_bias", settings.logit_bias), ("grammar", settings.grammar),
                                             ("dry_multiplier", settings.dry_multiplier),
                                             ("xtc_probability", settings.xtc_probability),
                                             ("top_n_sigma", settings.top_n_sigma is not None)) if on]  # fmt: skip
        if unsupported:
            raise ValueError(f"{self.name}: Ollama has no {', '.join(unsupported)}; set them off to run on Ollama")
        return {
            "temperature": settings.temperature, "seed": settings.seed,
            "top_k": settings.top_k or 0, "top_p": 1.0 if settings.top_p is None else settings.top_p,
            "min_p": settings.min_p or 0.0, "typical_p": 1.0 if settings.typical_p is None else settings.typical_p,
            "repeat_penalty": settings.repeat_penalty, "repeat_last_n": settings.repeat_last_n,
            "presence_penalty": settings.presence_penalty, "frequency_penalty": settings.frequency_penalty,
        }  # fmt: skip

    def generate(self, prompt: str, options: dict, num_predict: int):
        """Tokens as Ollama streams them (a JSON object a line, each with its tokens' logprobs), each with its id
        from the local vocabulary; close the generator to stop at once. Returns the done_reason ("stop": the
        model ended the text; "length"). A stream that ends before done, or an error line, is a ValueError."""
        url = self.root + "/api/generate"
        payload = {"model": self.model_id, "prompt": prompt, "raw": True, "stream": True, "think": False,
                   "logprobs": True, "top_logprobs": TOP_N, "truncate": False, "shift": False,
                   "options": {**options, "num_predict": num_predict}}  # fmt: skip
        with closing(self.connection.events(url, payload, prefix=b"")) as lines:
            for line in lines:
                answer = self.connection.json(line, url)
                if isinstance(answer.get("error"), str):
                    raise ValueError(f"Ollama at {self.root} failed: {answer['error'][:200]}")
                tokens, reason = self.connection.checked(lambda a: _chunk(a, self.tokenizer), answer, url)
                yield from tokens
                if reason is not None:
                    return reason
        raise ValueError(f"Ollama at {self.root} ended its stream before done (a line with done: true and its "
                         "done_reason): the connection was cut or the server failed")  # fmt: skip

    def first(self, prompt: str, options: dict):
        """The next token Ollama draws, with its top 20; None where it ends the text there. Asks for up to
        UTF8_MAX tokens and closes the stream after the first: where the answer ends after a token that is
        part of a character, Ollama drops that token's logprobs."""
        tokens = self.generate(prompt, options, UTF8_MAX)
        try:
            return next(tokens)
        except StopIteration as end:
            if end.value == "length":  # tokens drawn, none shown: not "the model ended the text"
                raise ValueError(f"Ollama at {self.root} sent no token's logprobs for the {UTF8_MAX} tokens asked "
                                 "(bytes that make no character?)") from None  # fmt: skip
            return None
        finally:
            tokens.close()

    # --- what the context asks (Server's, over Ollama) ------------------------------------------------------
    def _prompt(self, ids, text):
        return self.tokenizer.text_of(ids) if ids and all(i >= 0 for i in ids) else text

    def sample(self, ids, text, settings):
        return self.first(self._prompt(ids, text), self.options(settings))

    def stream(self, ids, text, settings, max_tokens: int):
        return self.generate(self._prompt(ids, text), self.options(settings), max_tokens)  # settings checked now

    def next_distribution(self, ids, text) -> TopN:
        token = self.first(self._prompt(ids, text), self.options(None))
        return token.top if token is not None else TopN()

    # --- the backend contract ---------------------------------------------------------------------------------
    def open_context(self) -> OllamaContext:
        return OllamaContext(self)

    def has_chat_template(self) -> bool:
        return bool(self.tokenizer.chat_template)  # the GGUF file's, rendered here

    def chat_prompt(self, user_text: str) -> str:
        """The GGUF file's own chat template (Ollama is sent raw text: its template is not applied)."""
        return self.tokenizer.chat_prompt(user_text)

    def describe(self) -> dict:
        return {
            **super().describe(),
            "server": f"Ollama {self.version} (native API: /api/generate, raw)",
            "tokenizer": f"the local GGUF file {self.gguf} (Ollama names no token ids: mapped by their bytes)",
            "cannot": list(CANNOT),
        }
