"""llama.cpp's own server (llama-server), built by tests/llama_server_build.py from the llama.cpp that the
installed llama-cpp-python vendors and started on loopback with SmolLM2 (the llama_cpp_server fixture).

It answers logprobs in the list form (content[i] with id, token, bytes, logprob and top_logprobs with ids),
takes token-id prompts, and does not echo a prompt: forced tokens are scored by one request per position."""

import pytest

import engine
from engine import Rule, Session
from engine.core.replay import replay_session
from engine.core.sampling import softmax

PROMPT = "The capital of France is"
CHAT = "<|im_start|>user\nName a large animal.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def model(llama_cpp_server):
    model = engine.load_model(llama_cpp_server)
    yield model
    model.close()


@pytest.fixture(scope="module")
def smollm2():
    return engine.load_model("smollm2", backend="numpy")


def test_connects_and_detects_what_it_supports(model, llama_cpp_server, smollm2):
    assert model.url == llama_cpp_server and model.context_length == 2048
    assert model.name.startswith("SmolLM2-135M-Instruct.Q4_1.gguf @ http://127.0.0.1:")
    assert model.protocol == {"tokenize": "llama-server", "token_id_prompts": True, "scoring": "per position",
                              "logprobs": "raw", "alternatives": 20, "ids": "every token"}  # fmt: skip
    assert model.tokenizer.encode(CHAT) == smollm2.tokenizer.encode(CHAT)
    trace = Session(model, PROMPT).trace()["model"]
    assert trace["prompt_format"] == "token ids" and trace["scoring"].startswith("one request per position")


def test_a_step_names_its_candidates_by_id(model, smollm2):
    """llama-server names the ids of its top 20: they are the candidates' ids, and its probabilities are the
    model's (against the numpy engine; llama.cpp's 8-bit activations stay within 0.15)."""
    session = Session(model, PROMPT, temperature=0)
    step = session.step()
    assert step.token == " Paris" and step.token_id == smollm2.tokenizer.encode(" Paris")[0] and step.model_rank == 1
    cand = step.candidates
    assert len(cand.tokens) == 20 and step.model_choice_id == cand.token_ids[0] == step.token_id
    assert [smollm2.tokenizer.decode([i]) for i in cand.token_ids] == list(cand.tokens)
    assert cand.stage_names[-1] == "greedy" and cand.final[0] == 1.0  # its numbers are raw: the chain runs here
    expected = softmax(smollm2.scores(session.prompt_ids)[-1])
    assert max(abs(float(expected[i]) - p) for i, p in zip(cand.token_ids, cand.raw)) < 0.15


def test_clicking_a_bar_forces_that_token_with_its_numbers(model):
    """What the chart shows while paused (peek) carries real ids: forcing one gives exactly that token, with
    the probability and rank the bar showed."""
    session = Session(model, PROMPT, temperature=0)
    shown = session.peek()
    assert all(i >= 0 for i in shown.token_ids)
    session.force_token(shown.token_ids[3])
    step = session.step()
    assert (step.token, step.token_id, step.model_rank) == (shown.tokens[3], shown.token_ids[3], 4)
    assert step.probability == pytest.approx(shown.raw[3], abs=1e-6) and step.source == "forced"
    germany = model.tokenizer.encode(" Germany")[0]
    session.force_token(germany)
    outside = session.step()  # " Germany" here is outside the top 20: unknown, not zero
    assert outside.token == " Germany" and outside.probability is None and outside.model_rank == 0


def test_insert_choose_a_rule_and_streaming(model):
    rule = Rule(" Berlin", insert=", a city of music")
    session = Session(model, PROMPT, max_new_tokens=30, temperature=0, rules=[rule])
    session.step()
    inserted = session.insert_text(". The capital of Germany is")
    assert "".join(s.token for s in inserted) == ". The capital of Germany is"
    assert all(s.probability is not None and s.model_rank > 0 for s in inserted[-3:])  # " Germany is" is likely
    taken = [session.step(stream=True) for _ in range(3)]
    assert all(s.token_id >= 0 for s in taken)  # a stream names its ids: nothing to ask afterwards
    session.run(stream=True)
    assert " Berlin, a city of music" in session.text and any(s.source == "rule" for s in session.steps)
    assert session.text == PROMPT + "".join(s.token for s in session.steps)
    session.rewind(len(session.steps))
    chosen = session.choose([" Lyon", " Paris"])
    (lyon, p_lyon), (paris, p_paris) = chosen[0].options
    assert (lyon, paris) == (" Lyon", " Paris") and p_paris > 0.5 > p_lyon
    assert [s.token for s in chosen] == [" Paris"] and chosen[0].probability == pytest.approx(p_paris)


def test_the_end_token_is_a_step_with_its_own_text(model):
    """llama-server reports its end token (as text "") with its probability: it becomes the last step, as in
    the numpy engine, shown as the token's own text."""
    session = Session(model, CHAT + " The blue whale.", max_new_tokens=40, temperature=0)
    session.run()
    assert session.stopped == "end of text"
    last = session.steps[-1]
    assert last.token == "<|im_end|>" and last.token_id == model.tokenizer.encode("<|im_end|>")[0]
    assert last.probability is not None and last.model_rank >= 1


def test_an_exported_trace_replays_with_the_same_tokens(model, tmp_path):
    """Replay repeats the action log on llama-server. Its numbers are not bit for bit: its prefix cache
    evaluates a prompt in other batch shapes when part of it is cached, and with 8-bit activations that
    moves probabilities by up to ~0.04 here, so replay may report a probability difference, with its note;
    the (greedy) tokens are the same."""
    session = Session(model, CHAT, max_new_tokens=10, temperature=0)
    for _ in range(4):
        session.step(stream=True)
    session.interrupt()
    session.insert_text(" Indeed,")
    session.rewind(1)
    session.run()
    path = tmp_path / "llama-server.json"
    engine.save_trace(session.trace(), path)
    replayed, report = replay_session(engine.load_trace(path), model)
    assert [s.token_id for s in replayed.steps] == [s.token_id for s in session.steps]
    assert replayed.actions == session.actions and replayed.text == session.text
    for old, new in zip(session.steps, replayed.steps):
        assert (old.probability is None) == (new.probability is None)
        assert old.probability is None or abs(old.probability - new.probability) < 0.1
    assert report.identical or "do not always promise" in " ".join(report.notes)
