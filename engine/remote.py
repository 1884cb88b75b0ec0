"""Models served by an inference server (vLLM, llama.cpp's llama-server, llama-cpp-python's server, TGI...)
through the OpenAI-compatible /v1/completions endpoint with logprobs.

The server samples, with the session's seed and settings; the engine sends the text so far (or its token
ids, where the server takes them), reads back the chosen token and the server's top-N alternatives, and
turns them into Steps. What the chart shows is honest about its source: the server's top-N raw
log-probabilities; tokens outside the top N are unknown (no probability), not zero, and the sampler's own
stages (after temperature, top-k, ...) are not reported by servers, so they are left empty.

What a server supports is detected once, at connect time: its models, a tokenize endpoint (/tokenize on
vLLM and llama-server, /extras/tokenize on llama-cpp-python's server), whether a prompt may be token ids,
and whether its echoed prompt log-probabilities are shifted by one position (llama-cpp-python's are).
"""

import json
import math
import time
from dataclasses import dataclass

import httpx

from .steps import Candidates, Step

TOP_N = 20  # alternatives asked for per token
RETRIES = 3  # connection attempts, with backoff 0.25 s, 0.5 s, ...
DEFAULT_CONTEXT = 2048  # when the server does not say


@dataclass(frozen=True)
class Token:
    """One token as a server reports it: its text, log-probability and the top alternatives."""

    text: str
    logprob: float | None
    top: dict  # text -> logprob, the server's top N at this position
    finish: str | None = None  # "stop" (end of text) or "length" on the last token of a request


class RemoteTokenizer:
    """The server's own tokenizer, over HTTP (so the chart and the trace show the tokens the model sees)."""

    remote = True

    def __init__(self, model: "RemoteModel"):
        self.model = model
        self.vocab_size = None
        self._ids: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, got {type(text).__name__}")
        if text not in self._ids:
            self._ids[text] = self.model.tokenize(text) if text else []
        return list(self._ids[text])

    def decode(self, ids) -> str:
        return self.model.detokenize([int(i) for i in ids])

    def token_id(self, text: str, ask: bool = True) -> int:
        """The id of a token the server reported by its text (-1 if it is not one token on its own, or, with
        ask=False, if the server was not asked yet: during a stream, llama-cpp-python's server ends the
        stream when another request arrives)."""
        if not ask and text not in self._ids:
            return -1
        ids = self.encode(text) if text else []
        return ids[0] if len(ids) == 1 else -1


class RemoteModel:
    remote = True
    end_reason = "end of text"
    end_token_ids = frozenset()  # the server says when it stopped

    def __init__(self, url: str, model_name: str | None = None, timeout: float = 30.0, retries: int = RETRIES):
        self.url = url.rstrip("/")
        if not self.url.endswith("/v1"):
            self.url += "/v1"
        self.root = self.url[: -len("/v1")]
        self.timeout = timeout
        self.retries = retries
        self.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(5.0, timeout)))
        self.tokenizer = RemoteTokenizer(self)
        self.vocab_size = None
        self.weights_sha256 = ""  # unknown: a trace records the server and model instead
        self.capabilities: dict = {}
        try:
            self._connect(model_name)
        except BaseException:
            self.client.close()
            raise

    # --- connecting: find out once what the server supports ------------------------------------------
    def _connect(self, model_name) -> None:
        models = [m.get("id") for m in self._get("/models").get("data", []) if isinstance(m, dict)]
        if not models:
            raise ValueError(f"server at {self.url} lists no models")
        if model_name is None:
            model_name = models[0]
        elif model_name not in models:
            raise ValueError(f"model {model_name!r} not found at {self.url} (it serves: {', '.join(models)})")
        self.model_id = model_name
        self.name = f"{model_name.rsplit('/', 1)[-1]} @ {self.root}"
        self.capabilities["tokenize"] = self._find_tokenizer()
        self.capabilities["token_id_prompts"] = self._accepts_token_ids()
        self.capabilities["echo_shifted"] = self._echo_is_shifted()
        self.context_length = self._find_context_length()

    def _find_tokenizer(self) -> str:
        probes = (("llama-server", "/tokenize", {"content": "Hello world"}),
                  ("vllm", "/tokenize", {"model": self.model_id, "prompt": "Hello world"}),
                  ("llama-cpp-python", "/extras/tokenize", {"input": "Hello world"}))  # fmt: skip
        for kind, path, payload in probes:
            try:
                answer = self._post(path, payload, root=True)
            except ValueError:
                continue
            if isinstance(answer.get("tokens"), list) and all(isinstance(t, int) for t in answer["tokens"]):
                return kind
        raise ValueError(f"server at {self.root} has no tokenize endpoint (tried /tokenize and /extras/tokenize)")

    def _accepts_token_ids(self) -> bool:
        try:
            self._post("/completions", {"model": self.model_id, "prompt": self.tokenize("Hello"), "max_tokens": 1})
            return True
        except ValueError:
            return False

    def _echo_is_shifted(self) -> bool:
        """llama-cpp-python reports, at prompt position i, the distribution that predicts token i + 1: its
        last echoed entry then equals the distribution of the next token."""
        text = "The capital of France is"
        prompt = self._prompt(self.tokenize(text), text)
        echoed = self._complete_raw({"prompt": prompt, "max_tokens": 1, "logprobs": 5, "echo": True, "temperature": 0})
        prompt_tokens = _prompt_token_count(echoed)
        last = echoed["choices"][0]["logprobs"]["top_logprobs"][prompt_tokens - 1] or {}
        following = self.next_distribution(self.tokenize(text), text)
        if not last or not following:
            return False
        best_last, best_next = max(last, key=last.get), max(following, key=following.get)
        return best_last == best_next and abs(last[best_last] - following[best_next]) < 1e-3

    def _find_context_length(self) -> int:
        for path, pick in (("/props", lambda a: a["default_generation_settings"]["n_ctx"]),
                           ("/v1/models", lambda a: a["data"][0]["max_model_len"])):  # fmt: skip
            try:
                return int(pick(self._get(path, root=True)))
            except (ValueError, KeyError, IndexError, TypeError):
                continue
        return DEFAULT_CONTEXT

    # --- tokens ----------------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        kind = self.capabilities.get("tokenize", "llama-cpp-python")
        if kind == "llama-server":
            return self._post("/tokenize", {"content": text, "add_special": False}, root=True)["tokens"]
        if kind == "vllm":
            return self._post("/tokenize", {"model": self.model_id, "prompt": text, "add_special_tokens": False}, root=True)["tokens"]
        return self._post("/extras/tokenize", {"input": text}, root=True)["tokens"]

    def detokenize(self, ids: list[int]) -> str:
        kind = self.capabilities.get("tokenize")
        if kind == "llama-server":
            return self._post("/detokenize", {"tokens": ids}, root=True)["content"]
        if kind == "vllm":
            return self._post("/detokenize", {"model": self.model_id, "tokens": ids}, root=True)["prompt"]
        return self._post("/extras/detokenize", {"tokens": ids}, root=True)["text"]

    # --- completions ------------------------------------------------------------------------------------
    def _prompt(self, ids, text):
        return list(ids) if self.capabilities.get("token_id_prompts") else text

    def sampling(self, settings) -> dict:
        """The request's sampling fields for engine Settings (0 = greedy, 'off' filters left out)."""
        fields = {"temperature": settings.temperature, "seed": settings.seed}
        if settings.top_k is not None:
            fields["top_k"] = settings.top_k
        if settings.top_p is not None:
            fields["top_p"] = settings.top_p
        if settings.min_p is not None:
            fields["min_p"] = settings.min_p
        return fields

    def sample(self, ids, text, settings) -> Token | None:
        """One token drawn by the server; None when the server ends the text instead."""
        answer = self._complete_raw({"prompt": self._prompt(ids, text), "max_tokens": 1, "logprobs": TOP_N,
                                     **self.sampling(settings)})  # fmt: skip
        tokens = _tokens(answer["choices"][0])
        return tokens[0] if tokens else None

    def stream(self, ids, text, settings, max_tokens: int):
        """Tokens drawn by the server one by one as they arrive; close the generator to stop at once."""
        payload = {"model": self.model_id, "prompt": self._prompt(ids, text), "max_tokens": max_tokens,
                   "logprobs": TOP_N, "stream": True, **self.sampling(settings)}  # fmt: skip
        with self._send("POST", self.url + "/completions", payload, stream=True) as response:
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                try:
                    chunk = json.loads(data)
                    choice = chunk["choices"][0]
                except (json.JSONDecodeError, KeyError, IndexError, TypeError):
                    raise ValueError(f"server at {self.root} streamed something that is not a completion: {data[:80]!r}") from None
                tokens = _tokens(choice)
                yield from tokens
                if not tokens and choice.get("finish_reason"):
                    yield None  # the server ended the text
                    return

    def score(self, ids, text, new_ids: list[int], new_text: str) -> list[Token]:
        """Each new token (after the context) with its log-probability and the server's top N at its
        position, from one request that echoes the prompt: the distribution each forced token went into."""
        full_ids, full_text = list(ids) + list(new_ids), text + new_text
        answer = self._complete_raw({"prompt": self._prompt(full_ids, full_text), "max_tokens": 1,
                                     "logprobs": TOP_N, "echo": True, "temperature": 0})  # fmt: skip
        logprobs = answer["choices"][0]["logprobs"]
        texts, top = logprobs["tokens"], logprobs["top_logprobs"]
        count, prompt_tokens = len(new_ids), _prompt_token_count(answer)
        shift = 1 if self.capabilities.get("echo_shifted") else 0  # entry i may predict token i + 1
        scored = []
        for j in range(count):
            position = prompt_tokens - count + j
            distribution = top[position - shift] if 0 <= position - shift < len(top) else None
            distribution = distribution if isinstance(distribution, dict) else {}
            text = texts[position] if 0 <= position < len(texts) else ""
            scored.append(Token(text, distribution.get(text), distribution))  # None: outside the top N
        return scored

    def next_distribution(self, ids, text) -> dict:
        """The server's top-N for the next token (a greedy one-token request; its token is not kept)."""
        answer = self._complete_raw({"prompt": self._prompt(ids, text), "max_tokens": 1, "logprobs": TOP_N,
                                     "temperature": 0})  # fmt: skip
        logprobs = answer["choices"][0].get("logprobs") or {}
        tops = logprobs.get("top_logprobs") or [{}]
        return tops[0] or {}

    def _complete_raw(self, payload: dict) -> dict:
        answer = self._post("/completions", {"model": self.model_id, **payload})
        try:
            answer["choices"][0]["logprobs"]
        except (KeyError, IndexError, TypeError):
            raise ValueError(f"server at {self.root} answered without completion logprobs: {str(answer)[:120]}") from None
        return answer

    # --- HTTP with timeouts, retries and readable errors ---------------------------------------------------
    def _get(self, path: str, root: bool = False) -> dict:
        return self._json(self._send("GET", (self.root if root else self.url) + path))

    def _post(self, path: str, payload: dict, root: bool = False) -> dict:
        return self._json(self._send("POST", (self.root if root else self.url) + path, payload))

    def _send(self, method: str, url: str, payload=None, stream: bool = False):
        delay = 0.25
        for attempt in range(self.retries):
            try:
                if stream:
                    request = self.client.build_request(method, url, json=payload)
                    response = self.client.send(request, stream=True)
                else:
                    response = self.client.request(method, url, json=payload)
                break
            except httpx.ConnectError:
                if attempt == self.retries - 1:
                    raise ValueError(f"server at {self.root} refused the connection ({self.retries} tries)") from None
                time.sleep(delay)
                delay *= 2
            except httpx.TimeoutException:
                raise ValueError(f"server at {self.root} did not answer within {self.timeout:g} s") from None
            except httpx.HTTPError as error:
                raise ValueError(f"server at {self.root} failed: {type(error).__name__}: {error}") from None
        if response.status_code >= 400:
            body = response.read().decode("utf-8", "replace") if stream else response.text
            response.close()
            raise ValueError(f"server at {self.root} answered {response.status_code} to {url}: {body[:200]}")
        return _Closing(response) if stream else response

    def _json(self, response) -> dict:
        try:
            data = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ValueError(f"server at {self.root} answered something that is not JSON: {response.text[:80]!r}") from None
        if not isinstance(data, dict):
            raise ValueError(f"server at {self.root} answered {type(data).__name__}, not a JSON object")
        return data

    def close(self) -> None:
        self.client.close()

    # --- Steps from what the server said ------------------------------------------------------------------
    def candidates(self, top: dict | None) -> Candidates:
        """The server's top N, most likely first; its sampler's stages are not reported, so they stay empty.
        (Some servers add the chosen token to its top N when it is not among them: it is left out here.)"""
        ranked = sorted((top or {}).items(), key=lambda item: -item[1])[:TOP_N]
        return Candidates(
            token_ids=(-1,) * len(ranked),  # named by text only
            tokens=tuple(t for t, _ in ranked),
            raw=tuple(math.exp(lp) for _, lp in ranked),
            temperature=(), top_k=(), final=(),
        )  # fmt: skip

    def make_step(self, token: Token, source: str, options=None, ask: bool = True) -> Step:
        """A Step from the server's numbers: probabilities are its raw log-probabilities, known only for
        its top N (None outside them: unknown, not zero). The chosen token's id is asked for (ask=False:
        only from what is known). Servers name the candidates by text only; their ids stay -1 (20
        tokenize requests a step would cost more than the step, and a click on one inserts its text)."""
        candidates = self.candidates(token.top)
        logprob = token.logprob if token.logprob is not None else token.top.get(token.text)
        probability = math.exp(logprob) if logprob is not None else None
        choice = candidates.tokens[0] if candidates.tokens else token.text
        return Step(
            token=token.text,
            token_id=self.tokenizer.token_id(token.text, ask),
            probability=probability,
            source=source,
            model_probability=probability,
            model_rank=candidates.tokens.index(token.text) + 1 if token.text in candidates.tokens else 0,
            model_choice=choice,
            model_choice_id=-1,
            candidates=candidates,
            options=options,
        )


class _Closing:
    """A streamed response usable in a with-block (closing it ends the server's generation for us)."""

    def __init__(self, response):
        self.response = response

    def __enter__(self):
        return self.response

    def __exit__(self, *exc):
        self.response.close()
        return False


def _prompt_token_count(answer: dict) -> int:
    """Echoed entries that belong to the prompt (servers differ on whether the completion's follow)."""
    usage = answer.get("usage") or {}
    if isinstance(usage.get("prompt_tokens"), int):
        return usage["prompt_tokens"]
    return len(answer["choices"][0]["logprobs"]["top_logprobs"]) - 1


def _tokens(choice: dict) -> list[Token]:
    logprobs = choice.get("logprobs") or {}
    texts, values, tops = logprobs.get("tokens") or [], logprobs.get("token_logprobs") or [], logprobs.get("top_logprobs") or []
    out = [Token(t, values[i] if i < len(values) else None, (tops[i] if i < len(tops) else None) or {})
           for i, t in enumerate(texts)]  # fmt: skip
    if out and choice.get("finish_reason"):
        out[-1] = Token(out[-1].text, out[-1].logprob, out[-1].top, choice["finish_reason"])
    return out


def load_remote(url: str, model_name: str | None = None, timeout: float = 30.0) -> RemoteModel:
    return RemoteModel(url, model_name=model_name, timeout=timeout)
