"""Scoring: forced and inserted tokens given their log-probabilities and the server's top N at each position, the
mixin Server (server.py) scores with. One request echoes the prompt's log-probabilities where the server's echo lines
up with our tokens (vLLM), else one one-token request per position (llama-server, llama-cpp-python: see
Server._find_scoring)."""

from engine.backends.remote.answers import Token, TopN, _echoed

TOP_N = 20  # alternatives asked for per token


class Scoring:
    """Forced tokens scored, for a Server (which gives connection, protocol, tokenizer, model_id, id_limit, _prompt,
    next_distribution, id_fields, _read)."""

    def score(self, ids, text, new_ids: list[int]) -> list[Token]:
        """Each new token (after the context), as its id's own text, with its log-probability and the
        server's top N at its position: the distribution each forced token went into. One echoing request
        where the server echoes and its entries line up with the tokens; else one request per position."""
        new_ids = [int(i) for i in new_ids]
        if self.protocol.get("scoring") == "echo" and self.protocol.get("token_id_prompts"):
            scored = self._score_by_echoed_ids(ids, new_ids)  # one request, whatever the insert's length
            if scored is not None:
                return scored
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

    def _score_by_echoed_ids(self, ids, new_ids) -> list[Token] | None:
        """Where prompts go as token ids, the echo holds one entry per id, in order (checked: _echoed), so entry
        len(ids) + j is new token j's, with its text as the server decodes it: no request per token for its text.
        None (the caller reads the texts and aligns by them) where an entry has no top N or a text that is not
        the token's whole text (a piece of a character, bytes)."""
        echoed, _ = self._echo(list(ids) + new_ids, "")
        entries = echoed[len(ids) : len(ids) + len(new_ids)]
        if len(entries) != len(new_ids) or not all(e.top for e in entries):
            return None
        if [e.id for e in entries] != new_ids and not all(e.text and "\ufffd" not in e.text for e in entries):
            return None  # (where the server names the echo's ids, they must be ours; their texts are whole then)
        return [_scored(token_id, entry.text, entry.top) for token_id, entry in zip(new_ids, entries)]

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
                   "temperature": 0, **self.id_fields}  # fmt: skip

        def check(answer):
            tokens, extra = _echoed(answer, self.id_limit, asked)
            return self._read(tokens), extra

        return self.connection.post("/completions", payload, check=check)


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
