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

A server that misbehaves is a ValueError naming it and what was wrong, and the session stays as it was: every
request goes through one helper (_request, or _events for a stream) that reads the answer as it arrives,
within the model's timeout for the whole answer and under MAX_ANSWER_BYTES, and every answer is checked
field by field (the section at the end) before any of it is used. Only the server's own finish reason ends
the text; a cut connection, a missing field or a stream that stops without a reason is a fault.
"""

import json
import math
import time
from contextlib import closing, contextmanager
from dataclasses import dataclass, replace

import httpx

from engine.core.checks import checked_text
from engine.core.contract import Capabilities
from engine.core.steps import Candidates, Step

TOP_N = 20  # alternatives asked for per token
RETRIES = 3  # connection attempts, with backoff 0.25 s, 0.5 s, ...
DEFAULT_CONTEXT = 2048  # when the server does not say
MAX_ANSWER_BYTES = 8 * 2**20  # one answer (a stream: one token's events); a step's answer is a few KB
MAX_TOKEN_ID = 2**31 - 1  # above any vocabulary: the bound for ids where the server does not say its size
END_REASONS = ("stop", "length", "eos", "eos_token", "stop_sequence")  # finish reasons that end a text


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

    def __init__(self, model: "RemoteModel"):
        self.model = model
        self.vocab_size = None
        self._ids: dict[str, list[int]] = {}
        self._pieces: dict[int, str] = {}

    def encode(self, text: str) -> list[int]:
        checked_text(text)
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


class RemoteModel:
    """A model on an OpenAI-compatible server, behind the backend contract: the server samples, and the
    engine reads its top-N log-probabilities."""

    end_reason = "end of text"
    end_token_ids = frozenset()  # the server says when it stopped
    capabilities = Capabilities(
        full_distribution=False, local_sampling=False, local_tokenizer=False, chat_template=False, streaming=True
    )

    def __init__(self, url: str, model_name: str | None = None, timeout: float = 30.0, retries: int = RETRIES):
        self.url = url.rstrip("/")
        if not self.url.endswith("/v1"):
            self.url += "/v1"
        self.root = self.url[: -len("/v1")]
        self.source = self.url  # what load_model takes to connect again
        self.timeout = timeout
        self.retries = retries
        # uncompressed answers: the size cap then counts what is kept (a small compressed body can inflate)
        self.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(5.0, timeout)),
                                   headers={"Accept-Encoding": "identity"})  # fmt: skip
        self.tokenizer = RemoteTokenizer(self)
        self.vocab_size = None
        self.id_limit = MAX_TOKEN_ID + 1  # ids the server may name are below this (its vocabulary, where it says)
        self.weights_sha256 = ""  # unknown: a trace records the server and model instead
        self._requests = 0  # requests sent (but streams): a stream sees whether others came while it waited
        self.protocol: dict = {}
        try:
            self._connect(model_name)
        except BaseException:
            self.client.close()
            raise

    # --- connecting: find out once what the server supports ------------------------------------------
    def _connect(self, model_name) -> None:
        listed = self._get("/models", check=_models)
        models = [entry["id"] for entry in listed]
        if not models:
            raise ValueError(f"server at {self.url} lists no models")
        if model_name is None:
            model_name = models[0]
        elif model_name not in models:
            raise ValueError(f"model {model_name!r} not found at {self.url} (it serves: {', '.join(models)})")
        entry = listed[models.index(model_name)]
        self.model_id = model_name
        self.name = f"{model_name.rsplit('/', 1)[-1]} @ {self.root}"
        meta = entry.get("meta")
        if isinstance(meta, dict) and _is_count(meta.get("n_vocab")):  # llama-server names its vocabulary's size
            self.id_limit = meta["n_vocab"]
        self.protocol["tokenize"] = self._find_tokenizer()
        self.protocol["token_id_prompts"] = self._accepts_token_ids()
        self.protocol.update(self._find_scoring())
        self.context_length = self._find_context_length(entry)

    def _find_tokenizer(self) -> str:
        probes = (("llama-server", "/tokenize", {"content": "Hello world"}),
                  ("vllm", "/tokenize", {"model": self.model_id, "prompt": "Hello world"}),
                  ("llama-cpp-python", "/extras/tokenize", {"input": "Hello world"}))  # fmt: skip
        for kind, path, payload in probes:
            try:
                self._post(path, payload, root=True, check=self._token_ids)
                return kind
            except ValueError:
                continue
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

    def _find_context_length(self, entry: dict) -> int:
        """llama-server's /props n_ctx, else vLLM's max_model_len in the model's /v1/models entry."""
        try:
            settings = self._get("/props", root=True).get("default_generation_settings")
        except ValueError:
            settings = None
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        return next((n for n in (n_ctx, entry.get("max_model_len")) if _is_count(n)), DEFAULT_CONTEXT)

    # --- tokens ----------------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        kind = self.protocol.get("tokenize", "llama-cpp-python")
        if kind == "llama-server":
            path, payload = "/tokenize", {"content": text, "add_special": False}
        elif kind == "vllm":
            path, payload = "/tokenize", {"model": self.model_id, "prompt": text, "add_special_tokens": False}
        else:
            path, payload = "/extras/tokenize", {"input": text}
        return self._post(path, payload, root=True, check=self._token_ids)

    def detokenize(self, ids: list[int]) -> str:
        kind = self.protocol.get("tokenize")
        if kind == "llama-server":
            path, payload, key = "/detokenize", {"tokens": ids}, "content"
        elif kind == "vllm":
            path, payload, key = "/detokenize", {"model": self.model_id, "tokens": ids}, "prompt"
        else:
            path, payload, key = "/extras/detokenize", {"tokens": ids}, "text"
        return self._post(path, payload, root=True, check=lambda answer: _string(_at(answer, key), key))

    def _token_ids(self, answer: dict) -> list[int]:
        tokens = _list(_at(answer, "tokens"), "tokens", "a list of token ids")
        return [_token_id(t, f"tokens[{i}]", self.id_limit) for i, t in enumerate(tokens)]

    # --- completions ------------------------------------------------------------------------------------
    def _prompt(self, ids, text):
        return list(ids) if self.protocol.get("token_id_prompts") else text

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
        tokens = self._complete({"prompt": self._prompt(ids, text), "max_tokens": 1, "logprobs": TOP_N,
                                 **self.sampling(settings)})  # fmt: skip
        return self._looked_up(tokens[0]) if tokens else None

    def stream(self, ids, text, settings, max_tokens: int):
        """Tokens drawn by the server one by one as they arrive; close the generator to stop at once. A
        stream that ends without the server's finish reason (a cut connection) is a ValueError."""
        payload = {"model": self.model_id, "prompt": self._prompt(ids, text), "max_tokens": max_tokens,
                   "logprobs": TOP_N, "stream": True, **self.sampling(settings)}  # fmt: skip
        url, finished, crossed = self.url + "/completions", False, False
        with closing(self._events(url, payload)) as events:
            for data in events:
                if data == "[DONE]":
                    break
                chunk = self._json(data, url)
                tokens, finish = self._checked(lambda answer: _streamed(answer, self.id_limit), chunk, url)
                finished = finished or finish is not None
                for token in tokens:
                    token, asked = self._looked_up(token, ask=False), self._requests
                    yield token
                    crossed = crossed or self._requests != asked
                if not tokens and finish is not None:
                    yield None  # the server ended the text
                    return
        # a request of ours while the stream waited (a rule that acts mid-stream) ends llama-cpp-python's
        # stream, with no finish reason: not the server's fault
        if not finished and not crossed:
            raise ValueError(f"server at {self.root} ended its stream without a finish reason (expected "
                             f"{', '.join(END_REASONS)}): the connection was cut or the server failed")  # fmt: skip

    def score(self, ids, text, new_ids: list[int]) -> list[Token]:
        """Each new token (after the context), as its id's own text, with its log-probability and the
        server's top N at its position: the distribution each forced token went into. One echoing request
        where the server echoes and its entries line up with the tokens; else one request per position."""
        new_ids = [int(i) for i in new_ids]
        pieces = [self.tokenizer.piece(i) for i in new_ids]
        scored = self._score_by_echo(ids, text, new_ids, pieces) if self.protocol.get("scoring") == "echo" else None
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
        differ (llama-cpp-python leaves its completion token out or not, depending on its cache). Where the
        prompt is token ids, the echo must hold every one of them."""
        prompt = self._prompt(ids, text)
        asked = len(prompt) if isinstance(prompt, list) else None  # a text prompt: the server tokenizes it
        payload = {"model": self.model_id, "prompt": prompt, "max_tokens": 1, "logprobs": TOP_N, "echo": True,
                   "temperature": 0}  # fmt: skip
        return self._post("/completions", payload, check=lambda answer: _echoed(answer, self.id_limit, asked))

    def next_distribution(self, ids, text) -> TopN:
        """The server's top N for the next token (a greedy one-token request; its token is not kept).
        min_tokens 1: where the model would end the text, llama-cpp-python reports nothing for its end token;
        it then draws another and reports the raw distribution, the end token's probability included."""
        tokens = self._complete({"prompt": self._prompt(ids, text), "max_tokens": 1, "logprobs": TOP_N,
                                 "temperature": 0, "min_tokens": 1})  # fmt: skip
        return tokens[0].top if tokens else TopN()

    def _complete(self, payload: dict) -> list[Token]:
        """A one-token completion's tokens, checked: one, or none where the server ended the text."""
        return self._post("/completions", {"model": self.model_id, **payload},
                          check=lambda answer: _completion(answer, self.id_limit, payload["max_tokens"]))  # fmt: skip

    def _looked_up(self, token: Token, ask: bool = True) -> Token:
        """The token with what make_step asks the server made known now (its id by its text; the text of
        tokens the server sent as "", by id), so that a failing request fails here, before the session
        counts a step (ask=False, in a stream: nothing is asked by text, see RemoteTokenizer.token_id)."""
        for text, _, token_id in (*token.top.entries, (token.text, None, -1 if token.id is None else token.id)):
            if not text and token_id >= 0:
                self.tokenizer.piece(token_id)
        if token.id is None and ask:
            token = replace(token, id=self.tokenizer.token_id(token.text))
        return token

    # --- HTTP: every request read within its deadline and the size cap, every fault a ValueError ---------
    def _get(self, path: str, root: bool = False, check=None):
        return self._request("GET", path, None, root, check)

    def _post(self, path: str, payload: dict, root: bool = False, check=None):
        return self._request("POST", path, payload, root, check)

    def _request(self, method: str, path: str, payload, root: bool, check):
        """One request's answer, a JSON object, read whole within the timeout (for the whole answer, not
        per read: a server that drips bytes is cut at the deadline) and MAX_ANSWER_BYTES, then passed
        through `check` (which raises _Malformed for a field it cannot use)."""
        url = (self.root if root else self.url) + path
        deadline = time.monotonic() + self.timeout
        self._requests += 1
        body = bytearray()
        with self._open(method, url, payload) as response:
            for chunk in self._chunks(response):
                body += chunk
                self._within(len(body), deadline)
        answer = self._json(bytes(body), url)
        return self._checked(check, answer, url) if check else answer

    def _events(self, url: str, payload: dict):
        """The data of each server-sent event of a streamed answer, as text. A stream is one step's request
        per token: each event must come within the timeout and MAX_ANSWER_BYTES counted from when the step
        asks for it (keep-alive comments do not extend it), however long the whole generation runs."""
        with self._open("POST", url, payload) as response:
            pending, received, deadline = bytearray(), 0, time.monotonic() + self.timeout
            for chunk in self._chunks(response):
                start = len(pending)
                pending += chunk
                received += len(chunk)
                self._within(received, deadline)
                while (end := pending.find(b"\n", start)) >= 0:
                    line = bytes(pending[:end]).rstrip(b"\r")
                    del pending[: end + 1]
                    start = 0
                    if line.startswith(b"data:"):
                        yield line[5:].strip().decode("utf-8", "replace")
                        received, deadline = len(pending), time.monotonic() + self.timeout

    @contextmanager
    def _open(self, method: str, url: str, payload):
        """The response to a request, its status checked, to read in a with-block (closing it ends the
        server's generation for us)."""
        response = self._send(method, url, payload)
        try:
            if response.status_code >= 400:
                body = next(self._chunks(response), b"")[:200].decode("utf-8", "replace")
                raise ValueError(f"server at {self.root} answered {response.status_code} to {url}: {body}")
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise ValueError(f"server at {self.root} answered {url} compressed ({encoding}), though asked for "
                                 "an uncompressed answer (Accept-Encoding: identity)")  # fmt: skip
            yield response
        finally:
            response.close()

    def _send(self, method: str, url: str, payload):
        delay = 0.25
        for attempt in range(self.retries):
            try:
                return self.client.send(self.client.build_request(method, url, json=payload), stream=True)
            except httpx.ConnectError:
                if attempt == self.retries - 1:
                    raise ValueError(f"server at {self.root} refused the connection ({self.retries} tries)") from None
                time.sleep(delay)
                delay *= 2
            except httpx.TimeoutException:
                raise ValueError(f"server at {self.root} did not answer within {self.timeout:g} s") from None
            except (httpx.HTTPError, httpx.InvalidURL) as error:
                raise ValueError(f"server at {self.root} failed: {type(error).__name__}: {error}") from None
        raise ValueError(f"server at {self.root} was not asked: retries is {self.retries!r}, expected 1 or more")

    def _chunks(self, response):
        """The body as it arrives; httpx's errors (a silence past the timeout, a cut connection) become
        ValueErrors naming the server."""
        try:
            yield from response.iter_raw()
        except httpx.TimeoutException:
            raise ValueError(f"server at {self.root} did not finish answering within {self.timeout:g} s") from None
        except httpx.HTTPError as error:
            raise ValueError(f"server at {self.root} broke off its answer: {type(error).__name__}: {error}") from None

    def _within(self, received: int, deadline: float) -> None:
        if received > MAX_ANSWER_BYTES:
            raise ValueError(f"server at {self.root} sent more than {MAX_ANSWER_BYTES >> 20} MB in one answer "
                             "(a step's answer is a few KB): it was cut off there")  # fmt: skip
        if time.monotonic() > deadline:
            raise ValueError(f"server at {self.root} did not finish answering within {self.timeout:g} s")

    def _json(self, body, url: str) -> dict:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, an int of 4300+ digits, nested too deep
            text = body[:80].decode("utf-8", "replace") if isinstance(body, bytes) else body[:80]
            raise ValueError(f"server at {self.root} answered something that is not JSON: {text!r}") from None
        if not isinstance(data, dict):
            raise ValueError(f"server at {self.root} answered {type(data).__name__}, not a JSON object, to {url}")
        return data

    def _checked(self, check, answer: dict, url: str):
        try:
            return check(answer)
        except _Malformed as bad:
            raise ValueError(f"server at {self.root} answered {url[len(self.root) :]} with {bad}") from None

    def close(self) -> None:
        self.client.close()

    # --- the backend contract ---------------------------------------------------------------------------------
    def open_context(self) -> "RemoteContext":
        return RemoteContext(self)

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
        }

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


class RemoteContext:
    """One session on a server: the server holds no state of ours but an open stream (engine.core.contract)."""

    def __init__(self, model: RemoteModel):
        self.model = model
        self._stream = None

    def candidates(self, ids, text, settings) -> Candidates:
        return self.model.candidates(self.model.next_distribution(ids, text))

    def sample(self, ids, text, settings, random, stream=False, remaining=0) -> tuple[Step | None, bool]:
        """The server draws (with its own seed: `random` is not used). A stream's tokens come without ids
        where the server sends text only: asking mid-stream would end it; close_stream fills them in."""
        if stream:
            if self._stream is None:
                self._stream = self.model.stream(ids, text, settings, remaining)
            token = next(self._stream, None)
        else:
            token = self.model.sample(ids, text, settings)
        if token is None:  # the server ended the text, or a stream ran out
            return None, True
        return self.model.make_step(token, "model", ask=not stream), token.finish == "stop"

    def force(self, ids, text, token_ids, source, settings, options=None) -> list[Step]:
        """Forced tokens scored in place (their probabilities and the server's top N at each: one echoing
        request, or one per token where the server does not echo); each step is its id's own text."""
        scored = self.model.score(ids, text, token_ids)
        return [self.model.make_step(t, source, options if i == 0 else None) for i, t in enumerate(scored)]

    def option_probabilities(self, ids, text, encoded, settings) -> list[tuple[float, float]]:
        """A server reports raw probabilities only, for its top N: an option with a token outside them
        counts as 0."""
        results = []
        for token_ids in encoded:
            scored = self.model.score(ids, text, token_ids)
            p = math.prod(math.exp(t.logprob) if t.logprob is not None else 0.0 for t in scored)
            results.append((p, p))
        return results

    def truncate(self, length: int) -> None:
        pass  # the next request sends the text as it is now

    def close_stream(self, steps: list[Step]) -> list[Step]:
        if self._stream is None:
            return steps
        self._stream.close()
        self._stream = None
        if not any(step.token_id < 0 and step.source == "model" for step in steps):
            return steps
        return [
            replace(step, token_id=self.model.tokenizer.token_id(step.token))
            if step.token_id < 0 and step.source == "model"
            else step
            for step in steps
        ]


def _rank(candidates: Candidates, text: str, token_id: int) -> int:
    """1-based rank among the server's top N (by id where both are known, else by text); 0: outside them."""
    for index, (candidate_id, candidate_text) in enumerate(zip(candidates.token_ids, candidates.tokens)):
        if (candidate_id == token_id) if candidate_id >= 0 and token_id >= 0 else candidate_text == text:
            return index + 1
    return 0


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


def load_remote(url: str, model_name: str | None = None, timeout: float = 30.0) -> RemoteModel:
    return RemoteModel(url, model_name=model_name, timeout=timeout)


# --- answers, checked field by field before any of them is used ------------------------------------------


class _Malformed(Exception):
    """A field of an answer that is not what was expected; the request turns it into a ValueError that
    names the server and the request."""

    def __init__(self, field: str, value, expected: str):
        super().__init__(f"{field} = {value!r:.80}, expected {expected}")


class _Missing:
    def __repr__(self):
        return "nothing"


MISSING = _Missing()


def _at(answer, key: str):
    return answer.get(key, MISSING) if isinstance(answer, dict) else MISSING


def _object(value, field: str, expected: str = "a JSON object") -> dict:
    if not isinstance(value, dict):
        raise _Malformed(field, value, expected)
    return value


def _list(value, field: str, expected: str) -> list:
    if not isinstance(value, list):
        raise _Malformed(field, value, expected)
    return value


def _string(value, field: str) -> str:
    if not isinstance(value, str):
        raise _Malformed(field, value, "a string")
    return value


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_TOKEN_ID + 1


def _token_id(value, field: str, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        raise _Malformed(field, value, f"a token id, an int from 0 to {limit - 1}")
    return value


def _logprob(value, field: str) -> float | None:
    """A log-probability, or None where the server gave none (an echo's first entry)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -math.inf < value <= 1e-3:
        raise _Malformed(field, value, "a log-probability: a finite number <= 0")
    return float(value)


def _models(answer: dict) -> list[dict]:
    """/v1/models: data, a list of {"id": name, ...}."""
    data = _list(_at(answer, "data"), "data", "a list of the models served")
    for i, entry in enumerate(data):
        _string(_at(_object(entry, f"data[{i}]", "a model: an object with its id"), "id"), f"data[{i}].id")
    return data


def _choice(answer: dict) -> dict:
    """A completion's first choice, with its text and finish reason checked."""
    choices = _list(_at(answer, "choices"), "choices", "a list of completions")
    if not choices:
        raise _Malformed("choices", choices, "one completion")
    choice = _object(choices[0], "choices[0]")
    _string(choice.get("text", ""), "choices[0].text")
    finish = choice.get("finish_reason")
    if finish is not None and finish not in END_REASONS:
        raise _Malformed("choices[0].finish_reason", finish, f"null or one of {', '.join(END_REASONS)}")
    return choice


def _completion(answer: dict, limit: int, asked: int) -> list[Token]:
    """A completion's tokens: as many as asked, or fewer only where the server says why it stopped."""
    choice = _choice(answer)
    tokens = _tokens(choice, limit)
    if len(tokens) > asked:
        raise _Malformed("choices[0].logprobs", f"{len(tokens)} tokens", f"at most the {asked} asked for")
    if len(tokens) < asked and choice.get("finish_reason") is None:
        raise _Malformed("choices[0].finish_reason", None, f"why it sent {len(tokens)} of the {asked} tokens asked")
    return tokens


def _echoed(answer: dict, limit: int, asked: int | None) -> tuple[list[Token], int]:
    """An echo's entries and how many of them may be the completion's (usage.completion_tokens, 0 or 1).
    A prompt of `asked` token ids is echoed whole (a text prompt: the server's tokens, any number)."""
    tokens = _tokens(_choice(answer), limit)
    completion = _object(answer.get("usage") or {}, "usage").get("completion_tokens", 1)
    if isinstance(completion, bool) or not isinstance(completion, int) or completion not in (0, 1):
        raise _Malformed("usage.completion_tokens", completion, "the completion's token count, 0 or 1")
    if not tokens or asked is not None and not asked <= len(tokens) <= asked + completion:
        expected = f"the prompt's {asked} tokens, then up to {completion} more" if asked else "the prompt's tokens"
        raise _Malformed("choices[0].logprobs", f"{len(tokens)} entries", expected)
    return tokens, completion


def _streamed(answer: dict, limit: int) -> tuple[list[Token], str | None]:
    """A streamed chunk's tokens and finish reason; a chunk without text may carry no logprobs (the last)."""
    choice = _choice(answer)
    if choice.get("logprobs") is None and not choice.get("text"):
        return [], choice.get("finish_reason")
    tokens = _tokens(choice, limit)
    if not tokens and choice.get("text"):
        raise _Malformed("choices[0].logprobs", choice["logprobs"], f"an entry for its text {choice['text']!r:.40}")
    return tokens, choice.get("finish_reason")


def _tokens(choice: dict, limit: int) -> list[Token]:
    """A choice's tokens, from either logprobs form, the finish reason on the last."""
    logprobs = _object(choice.get("logprobs", MISSING), "choices[0].logprobs",
                       "the tokens' log-probabilities (the request asks for them)")  # fmt: skip
    if "content" in logprobs:
        out = _list_form(logprobs["content"], "choices[0].logprobs.content", limit)
    else:
        out = _completions_form(logprobs, "choices[0].logprobs")
    if out and choice.get("finish_reason"):
        out[-1] = replace(out[-1], finish=choice["finish_reason"])
    return out


def _completions_form(logprobs: dict, field: str) -> list[Token]:
    """tokens[i], token_logprobs[i], top_logprobs[i] as text -> logprob (None for an echoed first entry)."""
    texts = _list(logprobs.get("tokens", MISSING), f"{field}.tokens", "a list of the tokens' texts")
    values, tops = (logprobs.get(key, MISSING) for key in ("token_logprobs", "top_logprobs"))
    for key, value in (("token_logprobs", values), ("top_logprobs", tops)):
        if not isinstance(value, list) or len(value) != len(texts):
            raise _Malformed(f"{field}.{key}", value, f"a list with one entry per token ({len(texts)})")
    out = []
    for i, (text, value, top) in enumerate(zip(texts, values, tops)):
        top = _object(top if top is not None else {}, f"{field}.top_logprobs[{i}]", "an object: text -> logprob")
        alternatives = [(t, _logprob(lp, f"{field}.top_logprobs[{i}][{t!r}]"), -1) for t, lp in top.items()]
        out.append(Token(_string(text, f"{field}.tokens[{i}]"), _logprob(value, f"{field}.token_logprobs[{i}]"),
                         TopN(a for a in alternatives if a[1] is not None)))  # fmt: skip
    return out


def _list_form(content, field: str, limit: int) -> list[Token]:
    """llama-server's content[i]: {id, token, bytes, logprob, top_logprobs: [{id, token, bytes, logprob}]}
    (the ids where given: OpenAI's chat form names text only)."""
    out = []
    for i, entry in enumerate(_list(content, field, "a list of the tokens' entries")):
        at = f"{field}[{i}]"
        entry = _object(entry, at)
        top = []
        for j, alternative in enumerate(_list(entry.get("top_logprobs") or [], f"{at}.top_logprobs", "a list")):
            alternative = _object(alternative, f"{at}.top_logprobs[{j}]")
            top.append(_entry(alternative, f"{at}.top_logprobs[{j}]", limit))
        text, logprob, token_id = _entry(entry, at, limit)
        top = TopN(a for a in top if a[1] is not None)
        out.append(Token(text, logprob, top, id=token_id if "id" in entry else None))
    return out


def _entry(entry: dict, field: str, limit: int) -> tuple[str, float | None, int]:
    """(text, logprob, id or -1) of a list-form entry. Its text comes from its bytes where given (its
    "token" drops the bytes of a partial UTF-8 character), decoded as a tokenizer decodes one token:
    invalid bytes become U+FFFD."""
    raw = entry.get("bytes")
    if raw is not None:
        if not isinstance(raw, list) or not all(type(b) is int and 0 <= b < 256 for b in raw):  # (not bool)
            raise _Malformed(f"{field}.bytes", raw, "a list of byte values 0 to 255")
        text = bytes(raw).decode("utf-8", "replace")
    else:
        text = _string(entry.get("token", MISSING), f"{field}.token")
    token_id = _token_id(entry["id"], f"{field}.id", limit) if "id" in entry else -1
    return text, _logprob(entry.get("logprob"), f"{field}.logprob"), token_id
