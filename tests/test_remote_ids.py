"""Exact ids from a server that names tokens by id (vLLM's return_tokens_as_token_ids) where the model's tokenizer is
on this machine too (engine/backends/remote/exact_ids.py), on the tests' fake server (tests/test_remote_faults.py:
one token per character, id = its code point) with a real HF tokenizers file written for it: used only where it
tokenizes and decodes exactly as the server does; a name that is not an id is a ValueError naming the server."""

import pytest
from test_remote_faults import GOOD_MODELS, PROMPT, running
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from engine import Session
from engine.backends.remote import RemoteModel
from engine.backends.remote.exact_ids import PROBE


@pytest.fixture
def server():
    yield from running()


def char_tokenizer(folder, characters: str):
    """tokenizer.json of a one-token-per-character tokenizer (id = code point) for `characters`."""
    vocab = {c: ord(c) for c in characters}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=characters[0]))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tokenizer.decoder = decoders.Fuse()  # the pieces as they are, joined
    folder.mkdir(exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def serving_from(server, folder):
    server.models = {"object": "list", "data": [{**GOOD_MODELS["data"][0], "root": str(folder)}]}
    server.names_ids = True
    model = RemoteModel(server.url, timeout=5.0, retries=1)
    server.clients.append(model)
    return model


def test_every_token_is_named_by_id_where_the_same_tokenizer_is_here(server, tmp_path):
    characters = "".join(sorted(set(PROBE + PROMPT + "".join(map(chr, range(32, 127))))))
    model = serving_from(server, char_tokenizer(tmp_path / "model", characters))
    assert model.protocol["ids"] == "every token" and model.describe()["ids"] == "every token"
    session = Session(model, PROMPT, max_new_tokens=5, temperature=0)
    before = model.connection.requests
    step = session.step()
    assert model.connection.requests - before == 1  # no /tokenize, no /detokenize: the tokenizer is here
    assert step.token == "t" and step.token_id == ord("t")  # after "is": the fake model's next character
    assert step.candidates.token_ids[:3] == (ord("t"), ord("u"), ord("v")) and step.candidates.tokens[:3] == (
        "t",
        "u",
        "v",
    )
    before = model.connection.requests
    steps = session.insert_text("abc")
    assert model.connection.requests - before == 1 and [s.token_id for s in steps] == [97, 98, 99]


def test_a_tokenizer_that_differs_from_the_servers_is_not_used(server, tmp_path):
    """Without "ö" (PROBE has it) the local file tokenizes the probe otherwise: ids come by text, as before."""
    characters = "".join(sorted(set(PROBE + PROMPT) - {"ö"}))
    model = serving_from(server, char_tokenizer(tmp_path / "model", characters))
    assert model.protocol["ids"] == "by text" and model.local is None


@pytest.mark.parametrize("name", ["token_id:x", "token_id:-1", "token_id:99999999999", "65", "token_id:65 "])
def test_a_token_named_by_something_that_is_not_an_id_is_a_clear_error(server, tmp_path, name):
    characters = "".join(sorted(set(PROBE + PROMPT + "".join(map(chr, range(32, 127))))))
    model = serving_from(server, char_tokenizer(tmp_path / "model", characters))
    session = Session(model, PROMPT, max_new_tokens=5, temperature=0)

    def misnamed(good):
        good["choices"][0]["logprobs"]["tokens"][-1] = name
        return good

    server.names_ids = misnamed
    with pytest.raises(
        ValueError, match=r"server at http://127\.0\.0\.1:\d+ answered /v1/completions with a token's name"
    ):
        session.step()
    assert session.steps == []
