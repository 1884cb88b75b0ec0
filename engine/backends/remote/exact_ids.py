"""Exact token ids from a server, so that no id goes through text (vLLM). Server._find_ids finds which tokens come
with their ids:

- every token: where the server's tokenizer is here too (vLLM's /v1/models names the model's folder or Hugging Face repo
  as its `root`: its tokenizer.json, read with HF `tokenizers`), and it tokenizes and decodes a probe exactly as the
  server does, every request asks `return_tokens_as_token_ids`: the server names every token, alternatives included,
  as "token_id:N", and its text comes from the local tokenizer (so do the prompt's ids: no /tokenize request).
- the drawn tokens: else, where the server answers `return_token_ids` (vLLM 0.10.2 and later), the drawn tokens come with
  their ids (`token_ids`; answers.py reads them); alternatives stay named by text.
- by text: neither; ids are looked up by text (RemoteTokenizer.token_id).
llama-server names every token's id in its answers' list form without being asked.
"""

import re
from dataclasses import replace
from pathlib import Path

from engine.backends.remote.answers import MAX_TOKEN_ID, Token, TopN, _Malformed

NAMED_FIELD = {"return_tokens_as_token_ids": True}  # vLLM: every token named "token_id:N" instead of its text
CHOSEN_FIELD = {"return_token_ids": True}  # vLLM 0.10.2 and later: the completion's ids beside its text
NAMED = re.compile(r"token_id:(\d{1,10})\Z")
PROBE = "Hello wörld: café, 日本語 and <|im_end|> 123"  # non-ASCII, digits and a control token's text


def tokenizer_file(root) -> Path | None:
    """tokenizer.json of the model vLLM names as its root: a folder on this machine, or a Hugging Face repo id in
    this machine's hub cache (where huggingface_hub is installed)."""
    if not isinstance(root, str) or not root:
        return None
    folder = Path(root).expanduser()
    if (folder / "tokenizer.json").is_file():
        return folder / "tokenizer.json"
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        cached = try_to_load_from_cache(root, "tokenizer.json")
    except ValueError:  # not a repo id
        return None
    return Path(cached) if isinstance(cached, str) else None


def local_tokenizer(path: Path, tokenize, detokenize):
    """The tokenizer at path, where it tokenizes PROBE as the server does (tokenize: text -> ids) and decodes each of
    those ids and all of them together as the server does (detokenize: ids -> text); else None."""
    from tokenizers import Tokenizer

    try:
        local = Tokenizer.from_file(str(path))
    except Exception:  # a file that is not a tokenizer (tokenizers raises its own exception types)
        return None
    ids = local.encode(PROBE, add_special_tokens=False).ids
    if ids != tokenize(PROBE) or local.decode(ids, skip_special_tokens=False) != detokenize(ids):
        return None
    if any(local.decode([i], skip_special_tokens=False) != detokenize([i]) for i in sorted(set(ids))):
        return None
    return local


def named_tokens(tokens: list[Token], piece, limit: int) -> list[Token]:
    """Tokens the server named "token_id:N" (return_tokens_as_token_ids), with their ids, and their texts from
    piece(id); a name that is not an id below limit is malformed."""
    return [replace(token, text=piece(i), id=i, top=TopN((piece(j), lp, j) for j, lp in _ids(token.top, limit)))
            for token, i in zip(tokens, (_id(token.text, "token", limit) for token in tokens))]  # fmt: skip


def _ids(top: TopN, limit: int):
    return [(_id(text, "alternative", limit), logprob) for text, logprob, _ in top.entries]


def _id(name: str, what: str, limit: int) -> int:
    match = NAMED.match(name)
    if not match or int(match[1]) >= min(limit, MAX_TOKEN_ID + 1):
        raise _Malformed(f"a {what}'s name", name, f'"token_id:N" with N a token id below {limit}')
    return int(match[1])
