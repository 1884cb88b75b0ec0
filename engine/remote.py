"""Models served by an inference server (vLLM, llama.cpp's llama-server, llama-cpp-python's server, TGI...)
through the OpenAI-compatible /v1/completions endpoint with logprobs.

The server samples, with the session's seed and settings; the engine sends the text so far (or its token
ids, where the server takes them), reads back the chosen token and the server's top-N alternatives, and
turns them into Steps. What the chart shows is honest about its source: the server's top-N raw
log-probabilities; tokens outside the top N are unknown (no probability), not zero, and the sampler's own
stages (after temperature, top-k, ...) are not reported by servers, so they are left empty.

What a server supports is detected once, at connect time: its models, a tokenize endpoint (/tokenize on
vLLM and llama-server, /extras/tokenize on llama-cpp-python's server), whether a prompt may be token ids,
and how forced tokens are scored: by one request that echoes the prompt with its log-probabilities (vLLM,
where its entries line up with the prompt's tokens), or by one one-token request per forced position,
reading its top N: llama-server does not echo, and llama-cpp-python's echo is shifted by a position that
depends on the prompt (see _find_scoring).

Servers answer logprobs in two forms, both read here: the legacy completions form (tokens, token_logprobs,
top_logprobs as text -> logprob) and llama-server's list form (content[i] with id, token, bytes, logprob and
top_logprobs as a list with ids); where a server names token ids, they are kept.
"""

import json
import math
import time
from dataclasses import dataclass, replace

import httpx

from .steps import Candidates, Step

TOP_N = 20  # alternatives asked for per token
RETRIES = 3  # connection attempts, with backoff 0.25 s, 0.5 s, ...
DEFAULT_CONTEXT = 2048  # when the server does not say


class TopN(dict):
    """The server's top N at one position. As a dict: text -> logprob (the likelier where two tokens share a
    text). `entries`: every alternative as (text, logprob, id), most likely first, id -1 where the server
    named text only (llama-server names ids, and its control tokens all have the text "")."""

    def __init__(self, entries=()):
        super().__init__()
        self.entries = tuple(sorted(entries, key=lambda entry: -entry[1]))
        for text, logprob, _ in self.entries:
            self.setdefault(text, logprob)

    def logprob(self, token_id: int, text: str) -> float | None:
        """A token's log-probability here: by id where the server named ids, else by text; None outside."""
        if any(i >= 0 for _, _, i in getattr(self, "entries", ())):  # (a plain dict: by text)
            return next((lp for _, lp, i in self.entries if i == token_id), None)
        return self.get(text)


@dataclass(frozen=True)
class Token:
    """One token as a server reports it: its text, log-probability and the top alternatives."""

    text: str
    logprob: float | None
    top: dict  # a TopN: text -> logprob, the server's top N at this position
    finish: str | None = None  # "stop" (end of text) or "length" on the last token of a request
    id: int | None = None  # when the server names it (or the token was forced)


class RemoteTokenizer:
    """The server's own tokenizer, over HTTP (so the chart and the trace show the tokens the model sees)."""

    remote = True

    def __init__(self, model: "RemoteModel"):
        self.model = model
        self.vocab_size = None
        self._ids: dict[str, list[int]] = {}
        self._pieces: dict[int, str] = {}

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, got {type(text).__name__}")
        if text not in self._ids:
            self._ids[text] = self.model.tokenize(text) if text else []
        return list(self._ids[text])

    def decode(self, ids) -> str:
        return self.model.detokenize([int(i) for i in ids])

    def piece(self, token_id: int) -> str:
        """One token's own text (what a step shows and adds to the text), asked once per id."""
        if token_id not in self._pieces:
            self._pieces[token_id] = self.decode([token_id])
        return self._pieces[token_id]

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
        self.capabilities.update(self._find_scoring())
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

    def _find_scoring(self) -> dict:
        """How forced tokens get their numbers: "echo" (one request echoes the prompt's log-probabilities,
        entry i the distribution token i was drawn from: vLLM) where the server's echo lines up, else "per
        position" (one request per token). llama-server ignores echo (some versions refuse it with an
        error). llama-cpp-python's echo is shifted:
        its entry i holds the distribution that predicts token i + 1, except when the prompt starts with its
        BOS token, which it drops from the tokens but not from the distributions (SmolLM2's chat prompts
        start with <|im_start|>, its BOS); a per-request guess at that is not worth it, as its echo is also
        slower than one request per token (it ranks the whole vocabulary at every prompt position)."""
        text = "The capital of France is"
        ids = self.tokenize(text)
        following = self.next_distribution(ids, text)  # first: an answer of an unknown shape fails here
        try:
            echoed, extra = self._echo(ids, text)
        except ValueError:  # a server that refuses echo
            return {"scoring": "per position"}
        start = _align(echoed, [self.tokenizer.piece(i) for i in ids], extra)
        last = echoed[start + len(ids) - 1].top if start is not None else {}
        if not last or not following:  # echo ignored (llama-server), or its entries are not the prompt's tokens
            return {"scoring": "per position"}
        best_last, best_next = max(last, key=last.get), max(following, key=following.get)
        if best_last == best_next and abs(last[best_last] - following[best_next]) < 1e-3:
            return {"scoring": "per position"}  # shifted: llama-cpp-python
        return {"scoring": "echo"}

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
        tokens = self._tokens(answer["choices"][0])
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
                tokens = self._tokens(choice)
                yield from tokens
                if not tokens and choice.get("finish_reason"):
                    yield None  # the server ended the text
                    return

    def score(self, ids, text, new_ids: list[int]) -> list[Token]:
        """Each new token (after the context), as its id's own text, with its log-probability and the
        server's top N at its position: the distribution each forced token went into. One echoing request
        where the server echoes and its entries line up with the tokens; else one request per position."""
        new_ids = [int(i) for i in new_ids]
        pieces = [self.tokenizer.piece(i) for i in new_ids]
        scored = self._score_by_echo(ids, text, new_ids, pieces) if self.capabilities.get("scoring") == "echo" else None
        return scored if scored is not None else self._score_per_position(ids, text, new_ids, pieces)

    def _score_by_echo(self, ids, text, new_ids, pieces) -> list[Token] | None:
        """None when the echo cannot be trusted to line up with our tokens: the server re-tokenized the text
        otherwise, or left an entry out, or a token's text is empty (nothing to find it by)."""
        expected = [self.tokenizer.piece(ids[-1]) if ids else "", *pieces]  # the context's last token, then ours
        if not all(expected):
            return None
        echoed, extra = self._echo(list(ids) + new_ids, text + "".join(pieces))
        start = _align(echoed, expected, extra)
        if start is None:
            return None
        tops = [token.top for token in echoed[start + 1 : start + len(expected)]]
        if not all(tops):  # a server's first entry has none
            return None
        return [_scored(token_id, piece, top) for token_id, piece, top in zip(new_ids, pieces, tops)]

    def _score_per_position(self, ids, text, new_ids, pieces) -> list[Token]:
        """One greedy one-token request per new token, on the context so far: its top N is the distribution
        the token went into (a token outside them stays unknown)."""
        scored = []
        for j, (token_id, piece) in enumerate(zip(new_ids, pieces)):
            top = self.next_distribution(list(ids) + new_ids[:j], text + "".join(pieces[:j]))
            scored.append(_scored(token_id, piece, top))
        return scored

    def _echo(self, ids, text) -> tuple[list[Token], int]:
        """The echoed entries of a one-token request, and how many of them may be the completion's: servers
        differ (llama-cpp-python leaves its completion token out or not, depending on its cache)."""
        answer = self._complete_raw({"prompt": self._prompt(ids, text), "max_tokens": 1, "logprobs": TOP_N,
                                     "echo": True, "temperature": 0})  # fmt: skip
        completion = (answer.get("usage") or {}).get("completion_tokens", 1)
        if isinstance(completion, bool) or not isinstance(completion, int) or completion < 0:
            raise ValueError(f"server at {self.root} answered usage.completion_tokens {completion!r}, not a count")
        return self._tokens(answer["choices"][0]), completion

    def next_distribution(self, ids, text) -> TopN:
        """The server's top N for the next token (a greedy one-token request; its token is not kept).
        min_tokens 1: where the model would end the text, llama-cpp-python reports nothing for its end token;
        it then draws another and reports the raw distribution, the end token's probability included."""
        answer = self._complete_raw({"prompt": self._prompt(ids, text), "max_tokens": 1, "logprobs": TOP_N,
                                     "temperature": 0, "min_tokens": 1})  # fmt: skip
        tokens = self._tokens(answer["choices"][0])
        return tokens[0].top if tokens else TopN()

    def _complete_raw(self, payload: dict) -> dict:
        answer = self._post("/completions", {"model": self.model_id, **payload})
        try:
            answer["choices"][0]["logprobs"]
        except (KeyError, IndexError, TypeError):
            raise ValueError(f"server at {self.root} answered without completion logprobs: {str(answer)[:120]}") from None
        return answer

    def _tokens(self, choice) -> list[Token]:
        """The tokens of one answer's choice, in either logprobs form; ValueError for anything else."""
        try:
            return _tokens(choice)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            raise ValueError(
                f"server at {self.root} answered logprobs in neither the completions form (tokens, token_logprobs, "
                f"top_logprobs) nor the list form (content[i] with token, logprob, top_logprobs): {str(choice)[:160]}"
            ) from None

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
        """The server's top N, most likely first, with their ids where the server named them (-1 where it
        named text only); its sampler's stages are not reported, so they stay empty. (Some servers add the
        chosen token to its top N when it is not among them: it is left out here.)"""
        entries = getattr(top, "entries", None) or TopN((t, lp, -1) for t, lp in (top or {}).items()).entries
        ranked = [(self._shown(text, token_id), logprob, token_id) for text, logprob, token_id in entries[:TOP_N]]
        return Candidates(
            token_ids=tuple(i for _, _, i in ranked),
            tokens=tuple(t for t, _, _ in ranked),
            raw=tuple(math.exp(lp) for _, lp, _ in ranked),
            temperature=(), top_k=(), final=(),
        )  # fmt: skip

    def _shown(self, text: str, token_id: int | None) -> str:
        """A token's text as a step shows it: llama-server sends control tokens (its end token) as "", so
        those are asked for by id, once each (llama-server answers mid-stream too)."""
        return self.tokenizer.piece(token_id) if not text and token_id is not None and token_id >= 0 else text

    def make_step(self, token: Token, source: str, options=None, ask: bool = True) -> Step:
        """A Step from the server's numbers: probabilities are its raw log-probabilities, known only for
        its top N (None outside them: unknown, not zero). The chosen token's id is the server's, or the
        forced one, or else asked for (ask=False: only from what is known). Candidates named by text only
        keep id -1 (20 tokenize requests a step would cost more than the step; a click on one inserts its
        text)."""
        candidates = self.candidates(token.top)
        token_id = token.id if token.id is not None else self.tokenizer.token_id(token.text, ask)
        logprob = token.logprob if token.logprob is not None else TopN.logprob(token.top, token_id, token.text)
        probability = math.exp(logprob) if logprob is not None else None
        text = self._shown(token.text, token.id)
        return Step(
            token=text,
            token_id=token_id,
            probability=probability,
            source=source,
            model_probability=probability,
            model_rank=_rank(candidates, text, token_id),
            model_choice=candidates.tokens[0] if candidates.tokens else text,
            model_choice_id=candidates.token_ids[0] if candidates.tokens else -1,
            candidates=candidates,
            options=options,
        )


def _rank(candidates: Candidates, text: str, token_id: int) -> int:
    """1-based rank among the server's top N (by id where both are known, else by text); 0: outside them."""
    for index, (candidate_id, candidate_text) in enumerate(zip(candidates.token_ids, candidates.tokens)):
        if (candidate_id == token_id) if candidate_id >= 0 and token_id >= 0 else candidate_text == text:
            return index + 1
    return 0


class _Closing:
    """A streamed response usable in a with-block (closing it ends the server's generation for us)."""

    def __init__(self, response):
        self.response = response

    def __enter__(self):
        return self.response

    def __exit__(self, *exc):
        self.response.close()
        return False


def _align(echoed: list[Token], expected: list[str], extra: int) -> int | None:
    """Where `expected` (the prompt's last tokens, by text) sits in an echo that ends with 0 to `extra`
    completion entries; None unless exactly one place fits (a repeated token could fit two)."""
    fits = [start for k in range(extra + 1)
            if (start := len(echoed) - k - len(expected)) >= 0
            and [t.text for t in echoed[start : start + len(expected)]] == expected]  # fmt: skip
    return fits[0] if len(fits) == 1 else None


def _scored(token_id: int, text: str, top: TopN) -> Token:
    """A forced token with its log-probability in the distribution it went into (None outside its top N)."""
    return Token(text, top.logprob(token_id, text), top, id=token_id)


def _tokens(choice: dict) -> list[Token]:
    """A choice's tokens, from either logprobs form (KeyError/TypeError/ValueError for anything else)."""
    logprobs = choice.get("logprobs") or {}
    if not isinstance(logprobs, dict):
        raise TypeError("logprobs is not an object")
    out = _list_form(logprobs["content"]) if "content" in logprobs else _completions_form(logprobs)
    if out and choice.get("finish_reason"):
        out[-1] = replace(out[-1], finish=choice["finish_reason"])
    return out


def _completions_form(logprobs: dict) -> list[Token]:
    """tokens[i], token_logprobs[i], top_logprobs[i] as text -> logprob (None for an echoed first entry)."""
    texts, values, tops = (logprobs.get(key) or [] for key in ("tokens", "token_logprobs", "top_logprobs"))
    out = []
    for i, text in enumerate(texts):
        top = (tops[i] if i < len(tops) else None) or {}
        value = values[i] if i < len(values) else None
        alternatives = TopN((_text(t), _logprob(lp), -1) for t, lp in top.items() if lp is not None)
        out.append(Token(_text(text), _logprob(value), alternatives))
    return out


def _list_form(content: list) -> list[Token]:
    """llama-server's content[i]: {id, token, bytes, logprob, top_logprobs: [{id, token, bytes, logprob}]}
    (the ids where given: OpenAI's chat form names text only)."""
    out = []
    for entry in content:
        alternatives = entry.get("top_logprobs") or []
        top = TopN((_entry_text(a), _logprob(a["logprob"]), _token_id(a["id"]) if "id" in a else -1)
                   for a in alternatives if a.get("logprob") is not None)  # fmt: skip
        token_id = _token_id(entry["id"]) if "id" in entry else None
        out.append(Token(_entry_text(entry), _logprob(entry.get("logprob")), top, id=token_id))
    return out


def _entry_text(entry: dict) -> str:
    """The token's text from its bytes where given (its "token" drops the bytes of a partial UTF-8
    character), decoded as a tokenizer decodes one token: invalid bytes become U+FFFD."""
    raw = entry.get("bytes")
    if isinstance(raw, list):
        return bytes(raw).decode("utf-8", "replace")
    return _text(entry["token"])


def _text(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"token text {value!r} is not a string")
    return value


def _logprob(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value > 1e-3:
        raise ValueError(f"log-probability {value!r} is not a number <= 0")
    return float(value)


def _token_id(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"token id {value!r} is not a non-negative int")
    return value


def load_remote(url: str, model_name: str | None = None, timeout: float = 30.0) -> RemoteModel:
    return RemoteModel(url, model_name=model_name, timeout=timeout)
