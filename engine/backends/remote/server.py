"""Server: one model on an OpenAI-compatible server, the object RemoteModel, RemoteTokenizer and RemoteContext
share (so none of them imports another).

What the server supports is found out once, at connect time (see the package's docstring); then tokens,
completions (one token, or a stream), forced tokens scored (by echo or per position) and Steps from what
the server said. Every request goes through its ServerConnection (connection.py), every answer through a
checker (answers.py).
"""

import math
from contextlib import closing
from dataclasses import replace

from engine.backends.remote import exact_ids
from engine.backends.remote.answers import (
    END_REASONS,
    MAX_TOKEN_ID,
    Token,
    TopN,
    _at,
    _completion,
    _is_count,
    _list,
    _models,
    _streamed,
    _string,
    _token_id,
)
from engine.backends.remote.connection import ServerConnection
from engine.backends.remote.scoring import TOP_N, Scoring, _align
from engine.backends.remote.stages import with_stages
from engine.backends.remote.tokenizer import RemoteTokenizer
from engine.core.steps import Candidates, Step

DEFAULT_CONTEXT = 2048  # when the server does not say


def _on_connection(name: str, doc: str) -> property:
    """An attribute of the model that is its connection's (read and set there)."""
    return property(lambda self: getattr(self.connection, name),
                    lambda self, value: setattr(self.connection, name, value), doc=doc)  # fmt: skip


class Server(Scoring):
    """One model on one OpenAI-compatible server: its connection, what it speaks (found out once, at connect
    time) and every request made of it. The one object the model, its tokenizer and every context hold
    (RemoteModel is a Server with the backend contract's face; RemoteContext and RemoteTokenizer ask it)."""

    # the server's address and the request settings live on the connection (connection.py)
    url = _on_connection("url", "the server's /v1 base")
    root = _on_connection("root", "the server itself: url without /v1")
    timeout = _on_connection("timeout", "seconds for a whole answer (a stream: for each token)")
    retries = _on_connection("retries", "connection attempts per request")

    def __init__(self, url: str, model_name: str | None = None, timeout: float = 30.0, retries: int | None = None):
        url = url.rstrip("/")
        if not url.endswith("/v1"):
            url += "/v1"
        self.connection = ServerConnection(url, timeout, retries)  # retries: RETRIES unless given
        self.source = url  # what load_model takes to connect again
        self.tokenizer = RemoteTokenizer(self)
        self.vocab_size = None
        self.id_limit = MAX_TOKEN_ID + 1  # ids the server may name are below this (its vocabulary, where it says)
        self.weights_sha256 = ""  # unknown: a trace records the server and model instead
        self.protocol: dict = {}
        self.local = None  # the server's own tokenizer, read here (exact_ids.py), where it is on this machine
        self.id_fields: dict = {}  # what every completion request adds for exact ids (_find_ids)
        try:
            self._connect(model_name)
        except BaseException:
            self.connection.close()
            raise

    # --- connecting: find out once what the server supports ------------------------------------------
    def _connect(self, model_name) -> None:
        listed = self.connection.get("/models", check=_models)
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
        self.protocol.update(self._find_logprobs())
        self.protocol["ids"] = self._find_ids(entry)
        self.context_length = self._find_context_length(entry)

    def _find_tokenizer(self) -> str:
        probes = (("llama-server", "/tokenize", {"content": "Hello world"}),
                  ("vllm", "/tokenize", {"model": self.model_id, "prompt": "Hello world"}),
                  ("llama-cpp-python", "/extras/tokenize", {"input": "Hello world"}))  # fmt: skip
        for kind, path, payload in probes:
            try:
                self.connection.post(path, payload, root=True, check=self._token_ids)
                return kind
            except ValueError:
                continue
        raise ValueError(f"server at {self.root} has no tokenize endpoint (tried /tokenize and /extras/tokenize)")

    def _accepts_token_ids(self) -> bool:
        try:
            self.connection.post(
                "/completions", {"model": self.model_id, "prompt": self.tokenize("Hello"), "max_tokens": 1}
            )
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

    def _find_logprobs(self) -> dict:
        """What the server's log-probabilities are (logprobs_kind: "raw", "processed" or "unknown"), found by asking
        one position at temperature 1 and 0.5, and how many alternatives it gives per token (asked: TOP_N)."""
        text = "The capital of France is"
        prompt, tops = self._prompt(self.tokenize(text), text), []
        for temperature in (1.0, 0.5):
            tokens = self._complete({"prompt": prompt, "max_tokens": 1, "logprobs": TOP_N, "temperature": temperature,
                                     "seed": 0, "min_tokens": 1})  # fmt: skip
            tops.append(tokens[0].top if tokens else TopN())
        return {"logprobs": logprobs_kind(*tops), "alternatives": max(len(top.entries) for top in tops)}

    def _find_ids(self, entry: dict) -> str:
        """Which tokens come with their ids (exact_ids.py): "every token" (llama-server names them all; vLLM where its
        tokenizer is here too, asked with return_tokens_as_token_ids), "drawn tokens" (vLLM's return_token_ids), or
        "by text" (looked up by their text). A server that refuses a field does not offer it."""
        probe = {"model": self.model_id, "prompt": self._prompt(self.tokenize("Hello"), "Hello"), "max_tokens": 1,
                 "logprobs": 2, "temperature": 0}  # fmt: skip
        ask = lambda fields: self.connection.post("/completions", {**probe, **fields},  # noqa: E731
                                                  check=lambda answer: _completion(answer, self.id_limit, 1))  # fmt: skip
        try:
            plain = ask({})
            if plain and plain[0].id is not None and all(i >= 0 for *_, i in plain[0].top.entries):
                return "every token"
            path = exact_ids.tokenizer_file(entry.get("root"))
            local = exact_ids.local_tokenizer(path, self.tokenize, self.detokenize) if path else None
            named = ask(exact_ids.NAMED_FIELD) if local is not None else []
            if named and all(exact_ids.NAMED.match(name) for token in named for name in (token.text, *token.top)):
                self.local, self.id_fields = local, exact_ids.NAMED_FIELD
                return "every token"
            chosen = ask(exact_ids.CHOSEN_FIELD)
            if chosen and chosen[0].id is not None:
                self.id_fields = exact_ids.CHOSEN_FIELD
                return "drawn tokens"
        except ValueError:
            pass
        return "by text"

    def _read(self, tokens: list[Token]) -> list[Token]:
        """Tokens as the server named them, with ids and texts where it named every token by id."""
        return exact_ids.named_tokens(tokens, self.tokenizer.piece, self.id_limit) if self.local else tokens

    def _find_context_length(self, entry: dict) -> int:
        """llama-server's /props n_ctx, else vLLM's max_model_len in the model's /v1/models entry."""
        try:
            settings = self.connection.get("/props", root=True).get("default_generation_settings")
        except ValueError:
            settings = None
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        return next((n for n in (n_ctx, entry.get("max_model_len")) if _is_count(n)), DEFAULT_CONTEXT)

    # --- tokens ----------------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        if self.local:
            return self.local.encode(text, add_special_tokens=False).ids
        kind = self.protocol.get("tokenize", "llama-cpp-python")
        if kind == "llama-server":
            path, payload = "/tokenize", {"content": text, "add_special": False}
        elif kind == "vllm":
            path, payload = "/tokenize", {"model": self.model_id, "prompt": text, "add_special_tokens": False}
        else:
            path, payload = "/extras/tokenize", {"input": text}
        return self.connection.post(path, payload, root=True, check=self._token_ids)

    def detokenize(self, ids: list[int]) -> str:
        if self.local:
            return self.local.decode(ids, skip_special_tokens=False)
        kind = self.protocol.get("tokenize")
        if kind == "llama-server":
            path, payload, key = "/detokenize", {"tokens": ids}, "content"
        elif kind == "vllm":
            path, payload, key = "/detokenize", {"model": self.model_id, "tokens": ids}, "prompt"
        else:
            path, payload, key = "/extras/detokenize", {"tokens": ids}, "text"
        return self.connection.post(path, payload, root=True, check=lambda answer: _string(_at(answer, key), key))

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
                   "logprobs": TOP_N, "stream": True, **self.sampling(settings), **self.id_fields}  # fmt: skip
        url, finished, crossed = self.url + "/completions", False, False
        with closing(self.connection.events(url, payload)) as events:
            for data in events:
                if data == "[DONE]":
                    break
                chunk = self.connection.json(data, url)
                tokens, finish = self.connection.checked(self._streamed, chunk, url)
                finished = finished or finish is not None
                for token in tokens:
                    token, asked = self._looked_up(token, ask=False), self.connection.requests
                    yield token
                    crossed = crossed or self.connection.requests != asked
                if not tokens and finish is not None:
                    yield None  # the server ended the text
                    return
        # a request of ours while the stream waited (a rule that acts mid-stream) ends llama-cpp-python's
        # stream, with no finish reason: not the server's fault
        if not finished and not crossed:
            raise ValueError(f"server at {self.root} ended its stream without a finish reason (expected "
                             f"{', '.join(END_REASONS)}): the connection was cut or the server failed")  # fmt: skip

    def next_distribution(self, ids, text) -> TopN:
        """The server's top N for the next token (a greedy one-token request; its token is not kept).
        min_tokens 1: where the model would end the text, llama-cpp-python reports nothing for its end token;
        it then draws another and reports the raw distribution, the end token's probability included."""
        tokens = self._complete({"prompt": self._prompt(ids, text), "max_tokens": 1, "logprobs": TOP_N,
                                 "temperature": 0, "min_tokens": 1})  # fmt: skip
        return tokens[0].top if tokens else TopN()

    def _complete(self, payload: dict) -> list[Token]:
        """A one-token completion's tokens, checked: one, or none where the server ended the text."""
        return self.connection.post("/completions", {"model": self.model_id, **payload, **self.id_fields},
                          check=lambda answer: self._read(_completion(answer, self.id_limit, payload["max_tokens"])))  # fmt: skip

    def _streamed(self, chunk: dict) -> tuple[list[Token], str | None]:
        tokens, finish = _streamed(chunk, self.id_limit)
        return self._read(tokens), finish

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

    # --- Steps from what the server said ------------------------------------------------------------------
    def candidates(self, top: dict | None, settings=None, history=()) -> Candidates:
        """The server's top N, most likely first, with their ids where the server named them (-1 where it
        named text only); its sampler's stages are not reported. (Some servers add the
        chosen token to its top N when it is not among them: it is left out here.) Where the numbers are raw, the
        chain (settings; history: the ids so far) runs on them (stages.py)."""
        entries = getattr(top, "entries", None) or TopN((t, lp, -1) for t, lp in (top or {}).items()).entries
        ranked = [(self._shown(text, token_id), logprob, token_id) for text, logprob, token_id in entries[:TOP_N]]
        candidates = Candidates(
            token_ids=tuple(i for _, _, i in ranked),
            tokens=tuple(t for t, _, _ in ranked),
            raw=tuple(math.exp(lp) for _, lp, _ in ranked),
        )
        if settings is None or self.protocol.get("logprobs") != "raw":
            return candidates
        return with_stages(candidates, settings, history)

    def _shown(self, text: str, token_id: int | None) -> str:
        """A token's text as a step shows it: llama-server sends control tokens (its end token) as "", so
        those are asked for by id, once each (llama-server answers mid-stream too)."""
        return self.tokenizer.piece(token_id) if not text and token_id is not None and token_id >= 0 else text

    def make_step(self, token: Token, source: str, options=None, ask: bool = True, settings=None, history=()) -> Step:
        """A Step from the server's numbers: probabilities are its raw log-probabilities, known only for
        its top N (None outside them: unknown, not zero). The chosen token's id is the server's, or the
        forced one, or else asked for (ask=False: only from what is known). Candidates named by text only
        keep id -1 (20 tokenize requests a step would cost more than the step; a click on one inserts its
        text). Where the numbers are raw, the chain runs on them (candidates)."""
        candidates = self.candidates(token.top, settings, history)
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
            surprisal=-logprob if logprob is not None else None,
            margin=candidates.raw[0] - candidates.raw[1] if len(candidates.raw) > 1 else None,  # the top 2 are known
        )


KIND_TOLERANCE = 0.2  # log-probability: llama-server's move by up to ~0.1 with what its cache holds


def logprobs_kind(at_one: TopN, at_half: TopN) -> str:
    """Whether a server's log-probabilities are "raw" (the model's own: the same at any temperature; vLLM's default,
    llama-server, llama-cpp-python) or "processed" (the distribution it samples from: at temperature 0.5 each is
    about 2 lp - log sum exp(2 lp) of its value at 1, the top N standing in for the vocabulary; vLLM's
    --logprobs-mode processed_logprobs, SGLang), from the same position's top N at temperature 1 and 0.5;
    "unknown" where neither fits (too few alternatives, or numbers that fit neither)."""
    shared = [text for text in list(at_one)[:5] if text in at_half]
    if len(shared) < 2:
        return "unknown"
    doubled = [2 * lp for lp in at_one.values()]
    norm = max(doubled) + math.log(sum(math.exp(d - max(doubled)) for d in doubled))
    raw = max(abs(at_half[t] - at_one[t]) for t in shared)
    processed = max(abs(at_half[t] - (2 * at_one[t] - norm)) for t in shared)
    if min(raw, processed) >= KIND_TOLERANCE:
        return "unknown"
    return "raw" if raw <= processed else "processed"


def _rank(candidates: Candidates, text: str, token_id: int) -> int:
    """1-based rank among the server's top N (by id where both are known, else by text); 0: outside them."""
    for index, (candidate_id, candidate_text) in enumerate(zip(candidates.token_ids, candidates.tokens)):
        if (candidate_id == token_id) if candidate_id >= 0 and token_id >= 0 else candidate_text == text:
            return index + 1
    return 0
