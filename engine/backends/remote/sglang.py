"""SGLangModel: a model on an SGLang server, through SGLang's native API, behind the same backend contract as
every other server (RemoteModel). load_remote finds SGLang at connect time by its own /get_model_info.

What the native /generate gives that the OpenAI endpoints do not (its shapes: sglang_answers.py):
- exact token ids everywhere: prompts go as input_ids, and every answer names each token's id (no id is ever
  looked up by its text); /tokenize and /detokenize are SGLang's own (skip_special_tokens off: the end token
  keeps its text);
- forced and inserted tokens scored in ONE request, whatever their number: the whole text as input_ids with
  return_logprob and logprob_start_len at the context's last token gives every new token's own
  log-probability (input_token_logprobs, whatever its rank) and the top 20 it was drawn from, and the forced
  ids are named (token_ids_logprob), so each position's alternatives hold them even outside the top 20;
- a stream of [logprob, id, text] entries (cumulative by default, or incremental: both are read).

What SGLang's log-probabilities are (python/sglang/srt/layers/sampler.py): a token it samples at a temperature
above 0 gets log softmax(logits / temperature), the distribution it draws from ("processed"), unless the
server runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1 ("raw"); at temperature 0 (all greedy) and for prompt
tokens (forced, inserted, scored) they are the model's own log softmax(logits). describe() says which the
server gives, from the same probe as for other servers (server.py logprobs_kind), and this in words.
"""

from contextlib import closing
from dataclasses import replace

from engine.backends.remote.answers import Token, TopN, _at, _models, _string
from engine.backends.remote.model import RemoteModel
from engine.backends.remote.scoring import TOP_N
from engine.backends.remote.server import DEFAULT_CONTEXT, _is_count, logprobs_kind
from engine.backends.remote.sglang_answers import Generated, generated, model_info

LOGPROBS_NOTE = {
    "processed": "SGLang: a sampled token's log-probability is after temperature, log softmax(logits / T), the "
    "distribution it draws from (the server's default); at temperature 0, and for forced and scored tokens, "
    "they are the model's own (raw)",
    "raw": "SGLang: the model's own log-probabilities, before temperature (the server runs with "
    "SGLANG_RETURN_ORIGINAL_LOGPROB=1)",
}


class SGLangModel(RemoteModel):
    """A model on an SGLang server: its native /generate, with exact ids everywhere (see the module's docstring)."""

    # --- connecting ----------------------------------------------------------------------------------------
    def _connect(self, model_name) -> None:
        self.model_path = self.connection.get("/get_model_info", root=True, check=model_info)
        entry = self._served(model_name)
        self.model_id = entry["id"]
        self.name = f"{self.model_id.rsplit('/', 1)[-1]} @ {self.root}"
        self.protocol.update(tokenize="sglang", token_id_prompts=True, scoring="native", ids="every token")
        self.protocol.update(self._find_logprobs())
        self.context_length = entry["max_model_len"] if _is_count(entry.get("max_model_len")) else DEFAULT_CONTEXT

    def _served(self, model_name) -> dict:
        """The model's /v1/models entry (SGLang serves one: its served model name)."""
        listed = self.connection.get("/models", check=_models)
        names = [entry["id"] for entry in listed]
        if not names:
            raise ValueError(f"server at {self.url} lists no models")
        if model_name is not None and model_name not in names:
            raise ValueError(f"model {model_name!r} not found at {self.url} (it serves: {', '.join(names)})")
        return listed[names.index(model_name) if model_name is not None else 0]

    def _find_logprobs(self) -> dict:
        """What its log-probabilities are (logprobs_kind: one position at temperature 1 and 0.5), how many
        alternatives it gives, and whether it takes a seed (sampling_seed: recent SGLang; an older one refuses
        the field, and then draws unseeded)."""
        ids, tops = self.tokenize("The capital of France is"), []
        try:
            self._generate(ids, {"max_new_tokens": 1, "temperature": 1.0, "sampling_seed": 0})
            seeded = True
        except ValueError:
            seeded = False
        for temperature in (1.0, 0.5):
            output = self._generate(ids, {"max_new_tokens": 1, "temperature": temperature}).output
            tops.append(output[0].top if output else TopN())
        return {"logprobs": logprobs_kind(*tops), "alternatives": max(len(top.entries) for top in tops),
                "seeded": seeded}  # fmt: skip

    # --- tokens -------------------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        payload = {"model": self.model_id, "prompt": text, "add_special_tokens": False}
        return self.connection.post("/tokenize", payload, root=True, check=self._token_ids)

    def detokenize(self, ids: list[int]) -> str:
        payload = {"model": self.model_id, "tokens": ids, "skip_special_tokens": False}
        return self.connection.post("/detokenize", payload, root=True, check=lambda a: _string(_at(a, "text"), "text"))

    # --- requests -----------------------------------------------------------------------------------------
    def sampling(self, settings) -> dict:
        """SGLang's sampling_params for engine Settings (temperature 0 = greedy, 'off' filters left out)."""
        fields = super().sampling(settings)
        seed = fields.pop("seed")
        if self.protocol.get("seeded") and seed is not None:
            fields["sampling_seed"] = seed
        return fields

    def _generate(self, ids, sampling: dict, **fields) -> Generated:
        """One /generate request on token ids, with each token's log-probability and its position's top N."""
        return self.connection.post("/generate", self._payload(ids, sampling, **fields), root=True,
                                    check=lambda answer: generated(answer, self.id_limit))  # fmt: skip

    def _payload(self, ids, sampling: dict, **fields) -> dict:
        if not ids:
            raise ValueError(f"{self.name}: SGLang generates after at least one token; the text is empty")
        return {"input_ids": [int(i) for i in ids], "sampling_params": sampling, "return_logprob": True,
                "top_logprobs_num": TOP_N, "return_text_in_logprobs": True, **fields}  # fmt: skip

    def sample(self, ids, text, settings) -> Token | None:
        """One token drawn by the server; None when it ends the text instead (its end token is not a step)."""
        answer = self._generate(ids, {"max_new_tokens": 1, **self.sampling(settings)})
        tokens = _drawn(answer.output, answer.finish)
        return tokens[0] if tokens else None

    def next_distribution(self, ids, text) -> TopN:
        """The model's own top N for the next token (a greedy one-token request: raw log-probabilities)."""
        output = self._generate(ids, {"max_new_tokens": 1, "temperature": 0}).output
        return output[0].top if output else TopN()

    def stream(self, ids, text, settings, max_tokens: int):
        """Tokens drawn by the server as they arrive (close the generator to stop at once); None where it ends
        the text. A stream that ends without SGLang's finish reason is a ValueError."""
        payload = self._payload(ids, {"max_new_tokens": max_tokens, **self.sampling(settings)}, stream=True)
        url, read = self.root + "/generate", 0
        with closing(self.connection.events(url, payload)) as events:
            for data in events:
                if data == "[DONE]":
                    break
                answer = self.connection.json(data, url)
                chunk = self.connection.checked(lambda a: generated(a, self.id_limit), answer, url)
                new = self._new_tokens(chunk, read)
                read = chunk.completion_tokens
                tokens = _drawn(new, chunk.finish)
                yield from tokens
                if chunk.finish is not None:
                    if chunk.finish["type"] == "stop" and (not tokens or tokens[-1].finish != "stop"):
                        yield None  # the server ended the text at its end token
                    return
        raise ValueError(f"server at {self.root} ended its stream without a finish reason (stop or length): the "
                         "connection was cut or the server failed")  # fmt: skip

    def _new_tokens(self, chunk: Generated, read: int) -> list[Token]:
        """A chunk's tokens not read yet: SGLang repeats them all by default, or sends only the new ones
        (--incremental-streaming-output); completion_tokens says which."""
        total, output = chunk.completion_tokens, chunk.output
        if len(output) == total >= read:
            return output[read:]
        if len(output) == total - read:
            return output
        raise ValueError(f"server at {self.root} streamed {len(output)} token entries with {total} tokens generated "
                         f"and {read} read: expected all {total} or the {total - read} new")  # fmt: skip

    # --- forced tokens: one request ------------------------------------------------------------------------
    def score(self, ids, text, new_ids: list[int]) -> list[Token]:
        """Each new token with its own log-probability (whatever its rank) and the top N it went into, from
        one request: the whole text's prompt log-probabilities from the context's last token on (SGLang gives
        the first entry none: that token is the context's)."""
        new_ids = [int(i) for i in new_ids]
        if not new_ids:
            return []
        start = max(len(ids) - 1, 0)
        answer = self._generate(list(ids) + new_ids, {"max_new_tokens": 1, "temperature": 0},
                                logprob_start_len=start, token_ids_logprob=sorted(set(new_ids)))  # fmt: skip
        entries = answer.prompt[len(ids) - start :]
        if [entry.id for entry in entries] != new_ids:
            raise ValueError(f"server at {self.root} answered /generate with prompt entries for ids "
                             f"{[entry.id for entry in entries]!r:.120}, expected the new tokens {new_ids!r:.120}")  # fmt: skip
        return entries

    # --- the trace's record ---------------------------------------------------------------------------------
    def describe(self) -> dict:
        described = super().describe()
        kind = self.protocol.get("logprobs", "unknown")
        described.update(
            server="SGLang (native /generate)",
            server_model_path=self.model_path,
            scoring="one request: the text as token ids, every new token's own log-probability and the top "
            f"{TOP_N} at its position (input_token_logprobs), the forced ids named (token_ids_logprob)",
            logprobs_note=LOGPROBS_NOTE.get(kind, "SGLang: the probe fit neither raw nor processed"),
            seeded=bool(self.protocol.get("seeded")),
        )
        return described


def _drawn(tokens: list[Token], finish: dict | None) -> list[Token]:
    """The tokens the server drew, less its end token: where SGLang stops at a stop token it sends that token
    too, and on every other server the text just ends there (no step). The last one left carries "stop" where
    the text ends after it."""
    if finish is None or finish["type"] != "stop":
        return tokens
    if tokens and finish.get("matched") == tokens[-1].id:
        return tokens[:-1]
    return [*tokens[:-1], replace(tokens[-1], finish="stop")] if tokens else tokens
