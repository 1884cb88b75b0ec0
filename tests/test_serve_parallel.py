"""Many requests in one llama.cpp decode (issue 45): `serve --parallel N` admits N requests at once, and a
scheduler thread decodes every token they wait for together (engine/backends/llamacpp/scheduler.py). Each request
still samples and records on its own: its answer is, bit for bit, the one it gets alone, and its trace replays
identical on the model alone. A client that leaves mid-batch frees its sequence for the next request."""

import threading
import time

import httpx
import openai
import pytest

import engine
from engine.serve.app import make_app
from engine.serve.threaded import serving

PROMPTS = ["The old lighthouse keeper", "Once upon a time", "def add(a, b):", "The capital of France is",
           "Roses are red,", "The weather today", "Dear Sir or Madam,", "In the beginning"]  # fmt: skip


@pytest.fixture(scope="module")
def wide_smollm2():
    """SmolLM2 on llama.cpp with 4,096 positions: 16 requests get 256 each."""
    model = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=4096)
    yield model
    model.close()


def alone(model, prompt: str, seed: int, max_tokens: int) -> str:
    result = engine.generate(model, prompt, max_new_tokens=max_tokens, temperature=0.8, top_k=40, seed=seed)
    return result.text[len(prompt) :]


def test_sixteen_clients_at_once_get_what_each_gets_alone(wide_smollm2, tmp_path):
    model, answers, errors = wide_smollm2, {}, []
    app = make_app(model, model_id="smollm2", parallel=16, traces=tmp_path)
    with serving(app) as url:

        def ask(i: int) -> None:
            try:
                client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
                prompt = PROMPTS[i % len(PROMPTS)]
                if i % 2:  # half of them streamed
                    chunks = client.completions.create(model="smollm2", prompt=prompt, max_tokens=16, temperature=0.8,
                                                       seed=i, stream=True, extra_body={"top_k": 40})  # fmt: skip
                    answers[i] = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
                else:
                    answer = client.completions.create(model="smollm2", prompt=prompt, max_tokens=16, temperature=0.8,
                                                       seed=i, extra_body={"top_k": 40})  # fmt: skip
                    answers[i] = answer.choices[0].text
            except Exception as error:  # noqa: BLE001 - said by the assertion below
                errors.append(error)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors, errors[:2]
    scheduler = app.state.scheduler
    assert scheduler.tokens > 3 * scheduler.rounds  # many sequences' tokens a decode, not one
    for i in range(16):
        expected = alone(model, PROMPTS[i % len(PROMPTS)], i, 16).removesuffix("<|im_end|>")
        assert answers[i] == expected, i
    traces = sorted(tmp_path.glob("*.json"))
    assert len(traces) == 16
    for path in traces[:4]:  # a batched request's trace replays on the model alone, bit for bit
        assert engine.replay(engine.load_trace(path), model).identical


def test_a_client_that_leaves_mid_batch_frees_its_sequence(wide_smollm2):
    model = wide_smollm2
    app = make_app(model, model_id="smollm2", parallel=2)
    scheduler = app.state.scheduler
    with serving(app) as url:
        with httpx.stream("POST", f"{url}/completions", json={"model": "smollm2", "prompt": PROMPTS[0],
                                                                "max_tokens": 200, "stream": True}) as gone:  # fmt: skip
            next(gone.iter_lines())  # the first event, then the client goes away
            assert len(scheduler._free) == 1  # its sequence taken
        deadline = time.monotonic() + 30
        while len(scheduler._free) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(scheduler._free) == 2  # given back once its generation stopped, not at the end of 200 tokens
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
        for seed in range(3):  # more requests than sequences, after the one that left
            answer = client.completions.create(model="smollm2", prompt=PROMPTS[1], max_tokens=8, temperature=0.8,
                                               seed=seed, extra_body={"top_k": 40})  # fmt: skip
            assert answer.choices[0].text == alone(model, PROMPTS[1], seed, 8).removesuffix("<|im_end|>")
    assert scheduler.rounds > 0


def test_parallel_needs_llamacpp_and_a_sane_count(story_model, wide_smollm2):
    with pytest.raises(ValueError, match="needs the llama.cpp backend"):
        make_app(story_model, parallel=4)
    with pytest.raises(ValueError, match="1 to 64"):
        make_app(wide_smollm2, parallel=0)
