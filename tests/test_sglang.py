"""SGLang through its native API (engine/backends/remote/sglang.py), tested against a server on loopback that answers
exactly as SGLang's source defines (tests/sglang_shapes.py: SGLang needs CUDA and has no CPU package), backed by
the real SmolLM2 through llama-cpp-python, so every number is a real model's and can be checked against llama.cpp's
own (the smollm2_llamacpp fixture: the same file, run by the engine's llama.cpp backend)."""

import json
import math

import httpx
import pytest

import engine
from engine import Session
from engine.backends.remote.sglang import SGLangModel

pytest.importorskip("llama_cpp")
import sglang_shapes  # noqa: E402  (needs llama_cpp)

PROMPT = "The capital of France is"
CHAT = "<|im_start|>user\nName a large animal.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def sglang():
    server = sglang_shapes.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def fresh(request):
    """Each test starts from SGLang's defaults: cumulative streams, processed log-probabilities, no fault."""
    if "sglang" in request.fixturenames:
        server = request.getfixturevalue("sglang")
        server.incremental, server.original_logprob, server.fault = False, False, None
        server.log.clear()


@pytest.fixture(scope="module")
def model(sglang):
    loaded = engine.load_model(sglang.url)
    yield loaded
    loaded.close()


def generated(sglang, **payload) -> dict:
    """The server's own answer to a /generate request (the reference the steps must show unchanged)."""
    return httpx.post(sglang.url + "/generate", json=payload, timeout=60).json()


def requests_to(sglang, path: str) -> int:
    return sum(1 for asked, _ in sglang.log if asked == path)


def snapshot(session):
    return (list(session.ids), session.text, list(session.steps), json.dumps(session.actions), session._ended_at)


def test_an_sglang_server_is_found_by_its_own_endpoint_and_spoken_to_in_token_ids(model, sglang, smollm2_llamacpp):
    assert isinstance(model, SGLangModel) and model.name == f"SmolLM2-135M-Instruct @ {sglang.url}"
    assert model.protocol == {"tokenize": "sglang", "token_id_prompts": True, "scoring": "native",
                              "ids": "every token", "logprobs": "processed", "alternatives": 20, "seeded": True}  # fmt: skip
    assert model.context_length == 512
    assert model.tokenizer.encode(CHAT) == smollm2_llamacpp.tokenizer.encode(CHAT)  # SGLang's own /tokenize
    assert model.tokenizer.piece(2) == "<|im_end|>"  # special tokens keep their text (skip_special_tokens off)


@pytest.mark.parametrize("stream", [False, True])
def test_greedy_through_the_playground_equals_llamacpps_own_greedy_by_id(model, smollm2_llamacpp, stream):
    ours = Session(model, CHAT, temperature=0, max_new_tokens=16)
    ours.run(stream=stream)
    theirs = Session(smollm2_llamacpp, CHAT, temperature=0, max_new_tokens=16)
    theirs.run()
    ended = None
    expected = [step.token_id for step in theirs.steps]
    if expected[-1] in smollm2_llamacpp.end_token_ids:  # a server's end token is no step: the text just ends
        expected, ended = expected[:-1], "end of text"
    assert [step.token_id for step in ours.steps] == expected and ours.stopped == ended


@pytest.mark.parametrize("temperature", [0, 0.7])
def test_the_probabilities_shown_are_the_servers_own_log_probabilities(model, sglang, temperature):
    session = Session(model, PROMPT, temperature=temperature, seed=5)
    step = session.step()
    sampling = {"max_new_tokens": 1, "temperature": temperature, "sampling_seed": 5}
    meta = generated(sglang, input_ids=session.prompt_ids, sampling_params=sampling, return_logprob=True,
                     top_logprobs_num=20)["meta_info"]  # fmt: skip
    (logprob, token_id, _), top = meta["output_token_logprobs"][0], meta["output_top_logprobs"][0]
    assert step.token_id == token_id and abs(step.probability - math.exp(logprob)) < 1e-5
    assert list(step.candidates.token_ids) == [i for _, i, _ in top]
    assert all(abs(p - math.exp(lp)) < 1e-5 for p, (lp, _, _) in zip(step.candidates.raw, top))


def llamacpp_surprisals(smollm2_llamacpp, ids) -> list[float]:
    """llama.cpp's own -log p of each of ids[1:] after the ids before it (the engine's llama.cpp backend)."""
    return [step.surprisal for step in engine.score(smollm2_llamacpp, list(ids)).steps]


def test_an_insert_is_scored_in_one_request_with_llamacpps_own_probabilities(model, sglang, smollm2_llamacpp):
    session = Session(model, PROMPT, temperature=0)
    session.step()
    sglang.log.clear()
    inserted = session.insert_text(". The capital of Germany is")
    assert requests_to(sglang, "/generate") == 1 and len(sglang.log) <= 2  # the tokenizing, and one /generate
    assert [s.token for s in inserted] == [".", " The", " capital", " of", " Germany", " is"]
    expected = llamacpp_surprisals(smollm2_llamacpp, session.ids)[-len(inserted) :]
    for ours, theirs in zip(inserted, expected):
        assert ours.source == "forced" and abs(ours.surprisal - theirs) < 1e-4 and 0 < ours.model_rank <= 20
        assert abs(ours.probability - ours.candidates.raw[ours.model_rank - 1]) < 1e-12  # its entry in the top 20


def test_a_forced_token_far_outside_the_top_20_gets_its_exact_probability(model, sglang, smollm2_llamacpp):
    banana = model.tokenizer.encode(" banana")[0]
    session = Session(model, PROMPT, temperature=0)
    session.force_token(banana)
    step = session.step()  # the next step takes the forced token
    asked = next(payload for path, payload in sglang.log if path == "/generate")
    assert asked["token_ids_logprob"] == [banana] and asked["input_ids"][-1] == banana  # named, in one request
    assert step.token == " banana" and step.model_rank == 0 and banana not in step.candidates.token_ids
    theirs = llamacpp_surprisals(smollm2_llamacpp, session.ids)[-1]
    assert step.probability < 1e-4 and abs(step.surprisal - theirs) < 1e-4


def test_engine_score_equals_llamacpps_log_likelihood_in_one_request(model, sglang, smollm2_llamacpp):
    text = "The quick brown fox jumps over the lazy dog, and the dog sleeps on."
    ours = engine.score(model, text)
    assert requests_to(sglang, "/generate") == 1
    theirs = engine.score(smollm2_llamacpp, text)
    assert ours.token_ids == theirs.token_ids and len(ours.steps) > 15
    assert abs(ours.log_likelihood - theirs.log_likelihood) < 1e-3
    assert all(abs(a.surprisal - b.surprisal) < 1e-4 for a, b in zip(ours.steps, theirs.steps))


@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "incremental"])
def test_a_stream_stopped_midway_keeps_what_it_drew_and_goes_on(model, sglang, smollm2_llamacpp, incremental):
    sglang.incremental = incremental
    session = Session(model, CHAT, temperature=0, max_new_tokens=40)
    for _ in range(4):
        session.step(stream=True)
    session.interrupt()  # Stop: the stream is closed mid-way, 36 tokens before its end
    assert len(session.steps) == 4 and session.stopped is None
    session.step()  # a plain step continues from the text
    reference = Session(smollm2_llamacpp, CHAT, temperature=0, max_new_tokens=5)
    reference.run()
    assert [s.token_id for s in session.steps] == [s.token_id for s in reference.steps]
    streams = [payload for path, payload in sglang.log if path == "/generate" and payload.get("stream")]
    assert len(streams) == 1 and streams[0]["sampling_params"]["max_new_tokens"] == 40


def test_a_stream_to_the_end_token_ends_the_text_without_a_step_for_it(model, smollm2_llamacpp):
    session = Session(model, "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n", temperature=0)
    session.run(stream=True)
    assert session.stopped == "end of text" and 2 not in [s.token_id for s in session.steps]  # 2: <|im_end|>
    assert 0 < len(session.steps) < session.settings.max_new_tokens


def test_describe_says_sglangs_log_probabilities_are_after_temperature_unless_configured(model, sglang):
    described = model.describe()
    assert described["logprobs"] == "processed" and described["alternatives"] == 20
    assert described["server"] == "SGLang (native /generate)" and described["prompt_format"] == "token ids"
    assert "after temperature" in described["logprobs_note"] and described["seeded"]
    sglang.original_logprob = True  # SGLANG_RETURN_ORIGINAL_LOGPROB=1
    raw = engine.load_model(sglang.url)
    assert raw.describe()["logprobs"] == "raw" and "before temperature" in raw.describe()["logprobs_note"]
    raw.close()


def _set_output(entry):
    def fault(path, out):
        if path == "/generate" and out["meta_info"].get("output_token_logprobs"):
            out["meta_info"]["output_token_logprobs"][-1] = entry(out["meta_info"]["output_token_logprobs"][-1])
        return out

    return fault


def _aborted(path, out):
    out["meta_info"]["finish_reason"] = {"type": "abort", "message": "KV cache pool is full"}
    return out


FAULTS = {  # fault -> what the error says
    "id as text": (_set_output(lambda e: [e[0], str(e[1]), e[2]]), r"output_token_logprobs\[\d+\]\[1\] = '\d+', expected a token id"),
    "entry not a triple": (_set_output(lambda e: {"logprob": e[0]}), r"output_token_logprobs\[\d+\] = \{'logprob'.*expected a \[logprob, token id, text\]"),
    "logprob above 0": (_set_output(lambda e: [3.5, e[1], e[2]]), r"output_token_logprobs\[\d+\]\[0\] = 3\.5, expected a log-probability"),
    "aborted": (_aborted, r"finish_reason = \{'type': 'abort'.*KV cache pool is full.*expected type stop or length"),
}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fault", FAULTS)
def test_a_malformed_answer_is_a_value_error_naming_the_server_and_changes_nothing(model, sglang, fault, stream):
    session = Session(model, PROMPT, temperature=0, max_new_tokens=8)
    session.step()
    before = snapshot(session)
    sglang.fault = FAULTS[fault][0]
    with pytest.raises(ValueError, match=rf"^server at {sglang.url} answered /generate with .*{FAULTS[fault][1]}"):
        session.step(stream=stream)
    assert snapshot(session) == before


def test_a_stream_without_sglangs_finish_reason_is_a_fault(model, sglang):
    def cut_short(path, out):
        out["meta_info"]["finish_reason"] = None  # then [DONE]: as if the request vanished
        return out

    session = Session(model, "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n", temperature=0)
    sglang.fault = cut_short  # the server ends its stream (at its end token) with no finish reason
    with pytest.raises(ValueError, match=rf"server at {sglang.url} ended its stream without a finish reason"):
        session.run(stream=True)


def test_a_sampled_session_rewound_and_replayed_from_its_trace_is_identical(model, tmp_path):
    session = Session(model, PROMPT, max_new_tokens=8, temperature=0.8, seed=11)
    for _ in range(5):
        session.step(stream=True)
    session.interrupt()
    session.rewind(2)
    session.run()
    trace = session.trace()
    assert trace["model"]["server"] == "SGLang (native /generate)" and trace["model"]["logprobs"] == "processed"
    engine.save_trace(trace, tmp_path / "sglang.json")
    report = engine.replay(engine.load_trace(tmp_path / "sglang.json"), model)
    assert report.identical, report.summary() + " " + " ".join(report.notes)
