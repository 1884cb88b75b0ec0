"""The OpenAI-compatible server (issue 29: engine/serve/): a real uvicorn server on a free port, driven by the
official `openai` client and by plain HTTP; the text equals engine.generate's with the same settings and seed,
the log-probabilities equal the session's records, rules and a client's `steer` act between two inference
passes, every request's trace replays identically, bad requests are 400s naming the field."""

import asyncio
import json
import math
import threading
import time

import httpx
import openai
import pytest

import engine
from engine.core.verdict import within_rounding
from engine.serve.app import make_app
from engine.serve.runs import Run
from engine.serve.stepping import AHEAD, FRAME_STEPS, QUICK, stepper_for
from engine.serve.threaded import serving

STORY = "mia has a red ball. she goes to the park. now mia has the"


def served(model, **options):
    """make_app(model, **options) on uvicorn in a thread, at 127.0.0.1 on a free port -> its /v1 URL."""
    return serving(make_app(model, **options))


@pytest.fixture(scope="module")
def story_url(story_model, tmp_path_factory):
    traces = tmp_path_factory.mktemp("traces")
    with served(story_model, traces=traces) as url:
        yield url, traces


def content(model, result, prompt: str) -> tuple[str, str]:
    """engine.generate's text after the prompt as OpenAI's answer holds it (the model's end token left out), and
    the finish reason."""
    text, last = result.text[len(prompt) :], result.steps[-1]
    if last.token_id in model.end_token_ids:
        return text[: len(text) - len(last.token)], "stop"
    return text, "length"


def client(url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=120)


@pytest.mark.parametrize(
    "settings", [dict(temperature=0), dict(temperature=0.8, seed=5), dict(temperature=1.3, seed=11, top_p=0.9)]
)
def test_a_completion_is_engine_generates_text_and_its_log_probabilities_the_records(story_model, story_url, settings):
    url, traces = story_url
    answer = client(url).completions.create(model=story_model.name, prompt=STORY, max_tokens=15, logprobs=5, **settings)
    expected = engine.generate(story_model, STORY, max_new_tokens=15, **settings)
    choice = answer.choices[0]
    assert (choice.text, choice.finish_reason) == content(story_model, expected, STORY)
    assert answer.usage.completion_tokens == len(expected.steps) and answer.usage.prompt_tokens == len(
        story_model.tokenizer.encode(STORY)
    )
    records = expected.steps
    assert choice.logprobs.tokens == [s.token for s in records]
    assert choice.logprobs.text_offset == [sum(len(s.token) for s in records[:i]) for i in range(len(records))]
    assert choice.logprobs.token_logprobs == pytest.approx([math.log(s.model_probability) for s in records], abs=1e-6)
    for top, step in zip(choice.logprobs.top_logprobs, records):
        assert list(top) == list(dict.fromkeys(step.candidates.tokens[:5]))  # most likely first
        assert list(top.values())[0] == pytest.approx(math.log(step.candidates.raw[0]), abs=1e-6)
    # its trace, named in the answer, replays identically
    trace = engine.load_trace(traces / f"{answer.id}.json")
    assert engine.replay(trace, story_model).identical


def test_a_streamed_completion_is_the_same_text_in_pieces(story_model, story_url):
    """Every token once, in order, in events of one token or of several (what piled up while one was sent, or a
    quick model's frame: 1/60 s of the story model's steps may be all 20)."""
    url, _ = story_url
    chunks = list(client(url).completions.create(model=story_model.name, prompt=STORY, max_tokens=20, temperature=0.9,
                                                 seed=3, stream=True, logprobs=1))  # fmt: skip
    expected = engine.generate(story_model, STORY, max_new_tokens=20, temperature=0.9, seed=3)
    text, reason = content(story_model, expected, STORY)
    assert "".join(c.choices[0].text for c in chunks) == text
    sent = [token for c in chunks if c.choices[0].logprobs for token in c.choices[0].logprobs.tokens]
    assert sent == [step.token for step in expected.steps] and len(expected.steps) > 3
    assert chunks[-1].choices[0].finish_reason == reason
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])


def test_a_stop_string_ends_the_text_before_it_streamed_or_not(story_model, story_url):
    url, _ = story_url
    whole = engine.generate(story_model, STORY, max_new_tokens=30).text[len(STORY) :]
    stop = whole[8:12]
    expected = whole[: whole.index(stop)]
    answer = client(url).completions.create(
        model=story_model.name, prompt=STORY, max_tokens=30, temperature=0, stop=[stop]
    )
    assert answer.choices[0].text == expected and answer.choices[0].finish_reason == "stop"
    chunks = list(client(url).completions.create(model=story_model.name, prompt=STORY, max_tokens=30, temperature=0,
                                                 stop=stop, stream=True))  # fmt: skip
    assert "".join(c.choices[0].text for c in chunks) == expected and chunks[-1].choices[0].finish_reason == "stop"


def test_a_clients_steer_inserts_text_between_two_inference_passes(story_model, story_url):
    """Greedy, the story model goes on " at the barn, mia gives the pen to kim."; a client's steer at "mia gives
    the" puts " blue" there, as the same rule in a Session does, and the model writes on from it."""
    url, traces = story_url
    prompt = "mia has a red ball. she goes to the park."
    assert "mia gives the pen" in engine.generate(story_model, prompt, max_new_tokens=25).text
    answer = client(url).completions.create(model=story_model.name, prompt=prompt, max_tokens=25, temperature=0,
                                            extra_body={"steer": [{"at": "mia gives the", "insert": " blue"}]})  # fmt: skip
    text = answer.choices[0].text
    assert "mia gives the blue" in text
    trace = engine.load_trace(traces / f"{answer.id}.json")
    assert [step["token"] for step in trace["steps"] if step["source"] == "rule"] == [" blue"]
    session = engine.Session(
        story_model, prompt, max_new_tokens=25, rules=[engine.Rule("mia gives the", insert=" blue")]
    )
    session.run()
    assert (text, answer.choices[0].finish_reason) == content(story_model, session.result(), prompt)
    assert engine.replay(trace, story_model).identical


def test_bad_requests_are_400s_naming_the_field_and_the_server_goes_on(story_model, story_url):
    url, _ = story_url
    good = {"model": story_model.name, "prompt": "mia", "max_tokens": 2}
    cases = [
        ({"model": "gpt-9"}, "model"),
        ({"temperature": 1e9}, "temperature"),
        ({"logit_bias": {str(10**12): 1}}, "logit_bias"),
        ({"logit_bias": {"1": 500}}, "logit_bias"),
        ({"prompt": {"a": 1}}, "prompt"),
        ({"prompt": [1, 2, 10**6]}, "prompt"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"top_k": 0}, "top_k"),
        ({"logprobs": 50}, "logprobs"),
        ({"n": 9}, "n"),
        ({"n": 3, "seed": 2**63 - 1}, "seed"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"samplers": ["temperature", "nonsense"]}, "samplers"),
        ({"steer": [{"at": "x"}]}, "steer"),
        ({"steer": [{"at": "x", "command": ["rm", "-rf", "/"]}]}, "steer"),
        ({"frobnicate": True}, "frobnicate"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
    ]
    for change, field in cases:
        answer = httpx.post(f"{url}/completions", json=dict(good, **change), timeout=60)
        assert answer.status_code == 400, (change, answer.text)
        error = answer.json()["error"]
        assert error["param"] == field and field in error["message"], (change, error)
    broken = httpx.post(f"{url}/completions", content=b'{"model": ', headers={"content-type": "application/json"})
    assert broken.status_code == 400 and "not JSON" in broken.json()["error"]["message"]
    assert httpx.post(f"{url}/chat/completions", json={"model": story_model.name, "messages": []}).status_code == 400
    # the story model has no chat template: said, not guessed
    chat = httpx.post(
        f"{url}/chat/completions", json={"model": story_model.name, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert chat.status_code == 400 and "chat template" in chat.json()["error"]["message"]
    assert httpx.post(f"{url}/completions", json=good, timeout=60).status_code == 200  # still serving


def test_a_client_that_goes_away_mid_stream_stops_the_generation(story_model, story_url):
    """The stream is closed after 3 events of up to 2,000 tokens: the trace the server kept (named by the
    request's id) has the tokens sent and at most the ones taken ahead of the sending and the one in flight."""
    url, traces = story_url
    with httpx.stream("POST", f"{url}/completions", timeout=60, json={
        "model": story_model.name, "prompt": STORY, "max_tokens": 2000, "temperature": 1.0, "seed": 2, "stream": True,
        "logprobs": 0,
    }) as response:  # fmt: skip
        received = []
        for line in response.iter_lines():
            if line.startswith("data: {"):
                received.append(json.loads(line[len("data: ") :]))
                if len(received) == 3:
                    break
    kept = traces / f"{received[0]['id']}.json"
    deadline = time.monotonic() + 30
    while not kept.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    steps = len(json.loads(kept.read_text())["steps"])
    tokens = sum(len((event["choices"][0]["logprobs"] or {"tokens": ()})["tokens"]) for event in received)
    ahead = max(AHEAD, FRAME_STEPS)  # taken ahead of the sending: on the thread, or in the loop's frame
    assert tokens <= steps <= tokens + ahead + 2, (tokens, steps)  # + the socket's event and the step in flight


def test_a_quick_model_steps_on_the_loop_unless_a_rule_runs_a_tool(story_model):
    """stepper_for: the loop itself steps a model whose last request took under QUICK a step; a thread steps a
    slower one, one not measured yet, and any request whose rules run a tool. Both write the session's text."""

    def stepped(pace, rules=()):
        async def made():
            session = engine.Session(story_model, STORY, max_new_tokens=12, temperature=1.0, seed=5, rules=rules)
            stepper = stepper_for(Run(session, (), None), pace)
            pieces = [piece async for piece in stepper]
            await stepper.close()
            return type(stepper).__name__, "".join(piece.text for piece in pieces)

        return asyncio.run(made())

    expected = engine.generate(story_model, STORY, max_new_tokens=12, temperature=1.0, seed=5)
    text = content(story_model, expected, STORY)[0]
    assert stepped(None) == stepped(QUICK * 10) == ("Stepper", text)
    assert stepped(QUICK / 2) == ("InlineStepper", text)
    assert stepped(QUICK / 2, rules=[engine.Rule("zzz", tool=lambda text: "")]) == ("Stepper", text)


def test_an_api_key_is_required_when_given(story_model):
    with served(story_model, api_key="s3cret") as url:
        assert httpx.get(f"{url}/models").status_code == 401
        with pytest.raises(openai.AuthenticationError):
            client(url, "wrong").models.list()
        assert client(url, "s3cret").models.list().data[0].id == story_model.name


def test_a_chat_completion_on_smollm2_is_the_chat_templates_generation(smollm2_llamacpp):
    model = smollm2_llamacpp
    messages = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Name a colour."}]
    with served(model, model_id="smollm2") as url:
        answer = client(url).chat.completions.create(model="smollm2", messages=messages, max_tokens=24, temperature=0,
                                                     logprobs=True, top_logprobs=3)  # fmt: skip
        chunks = list(client(url).chat.completions.create(model="smollm2", messages=messages, max_tokens=24,
                                                          temperature=0, stream=True,
                                                          stream_options={"include_usage": True}))  # fmt: skip
    prompt = model.tokenizer.messages_prompt(messages)
    expected = engine.generate(model, prompt, max_new_tokens=24)
    text, reason = content(model, expected, prompt)
    choice = answer.choices[0]
    assert choice.message.content == text and choice.finish_reason == reason and text
    records = choice.logprobs.content
    assert [r.token for r in records] == [s.token for s in expected.steps]
    assert [r.logprob for r in records] == pytest.approx(
        [math.log(s.model_probability) for s in expected.steps], abs=1e-5
    )
    assert all(len(r.top_logprobs) == 3 for r in records)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(expected.steps)


def test_sixteen_clients_at_once_are_all_answered_correctly(story_model, story_url):
    """16 requests at once, half streamed, each with its own seed: queued for the one model, each answer is
    engine.generate's text for its seed."""
    from concurrent.futures import ThreadPoolExecutor

    url, _ = story_url

    def ask(seed: int) -> str:
        options = dict(model=story_model.name, prompt=STORY, max_tokens=12, temperature=1.0, seed=seed)
        if seed % 2:
            return "".join(c.choices[0].text for c in client(url).completions.create(stream=True, **options))
        return client(url).completions.create(**options).choices[0].text

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, range(16)))
    for seed, text in enumerate(answers):
        expected = engine.generate(story_model, STORY, max_new_tokens=12, temperature=1.0, seed=seed)
        assert text == content(story_model, expected, STORY)[0], seed
    assert len(set(answers)) > 8  # the seeds differ, and so do the texts


def test_in_front_of_llama_server_it_is_a_steering_proxy(llama_cpp_server):
    """Serving a server URL: each request a Session on llama-server (one open stream, stopped where a rule acts);
    the text is engine.generate's on the same server, and a client's steer acts mid-generation there too."""
    remote = engine.load_model(llama_cpp_server)
    prompt = "The capital of France is"
    plain = engine.generate(remote, prompt, max_new_tokens=12)
    trigger = plain.text[len(prompt) :][:6]
    with served(remote, model_id="proxied") as url:
        answer = client(url).completions.create(model="proxied", prompt=prompt, max_tokens=12, temperature=0)
        steered = client(url).completions.create(model="proxied", prompt=prompt, max_tokens=12, temperature=0,
                                                 extra_body={"steer": [{"at": trigger, "insert": " Lyon"}]})  # fmt: skip
    assert (answer.choices[0].text, answer.choices[0].finish_reason) == content(remote, plain, prompt)
    # after the insertion the server reads a text it cached part of (llama-server's prompt cache): a near tie can
    # go either way from one request to the next (seen in CI: " a language of" / " a Germanic language"), so the
    # continuation is checked to be there, not to be one request's bit for bit
    text = steered.choices[0].text
    assert text.startswith(trigger + " Lyon") and len(text) > len(trigger + " Lyon")


def test_a_watcher_sees_every_request_start_step_and_end(story_model, story_url):
    """GET /v1/playground/watch: a request's start (prompt, settings), each step as the trace records it, and
    its end with the whole trace, for requests made by others, streamed or not."""
    url, traces = story_url
    events: list[dict] = []
    connected = threading.Event()

    def watch():
        with httpx.stream("GET", f"{url}/playground/watch", timeout=60) as response:
            connected.set()
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[len("data: ") :]))
                    if events[-1]["kind"] == "end" and sum(e["kind"] == "end" for e in events) == 2:
                        return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert connected.wait(30)
    time.sleep(0.3)  # the server has the watcher's queue once its stream has begun
    answers = [client(url).completions.create(model=story_model.name, prompt=STORY, max_tokens=6, temperature=0)]
    stream = client(url).completions.create(model=story_model.name, prompt="mia has", max_tokens=5, seed=4, stream=True)
    answers.append(next(iter(stream)))
    list(stream)
    watcher.join(60)
    assert [e["kind"] for e in events] == ["start"] + ["step"] * 6 + ["end", "start"] + ["step"] * 5 + ["end"]
    assert [e["request"] for e in events if e["kind"] == "start"] == [a.id for a in answers]
    first = events[:8]
    assert first[0]["prompt"] == STORY and first[0]["settings"]["max_new_tokens"] == 6
    trace = first[-1]["trace"]
    assert trace == engine.load_trace(traces / f"{answers[0].id}.json")
    assert [e["step"] for e in first[1:-1]] == trace["steps"]


def test_in_front_of_vllm_it_is_a_steering_proxy(vllm_server):
    """The same in front of a real vLLM server: the text is engine.generate's through vLLM, and a client's steer
    inserts mid-generation with the model going on after it, from vLLM's own scores."""
    remote = engine.load_model(vllm_server)
    prompt = "The capital of France is"
    plain = engine.generate(remote, prompt, max_new_tokens=10)
    trigger = plain.text[len(prompt) :][:6]
    with served(remote, model_id="proxied") as url:
        answer = client(url).completions.create(model="proxied", prompt=prompt, max_tokens=10, temperature=0,
                                                logprobs=3)  # fmt: skip
        steered = client(url).completions.create(model="proxied", prompt=prompt, max_tokens=10, temperature=0,
                                                 extra_body={"steer": [{"at": trigger, "insert": " Lyon"}]})  # fmt: skip
    assert (answer.choices[0].text, answer.choices[0].finish_reason) == content(remote, plain, prompt)
    # vLLM's numbers for the same request differ within float rounding from one request to the next (a prompt
    # it has cached is computed in other shapes than one read whole: 1.7e-5 seen on a logprob of -1.94)
    served_p = [math.exp(lp) for lp in answer.choices[0].logprobs.token_logprobs]
    assert all(within_rounding(a, s.model_probability) for a, s in zip(served_p, plain.steps, strict=True)), served_p
    session = engine.Session(remote, prompt, max_new_tokens=10, rules=[engine.Rule(trigger, insert=" Lyon")])
    session.run()
    assert steered.choices[0].text == content(remote, session.result(), prompt)[0]
    assert steered.choices[0].text.startswith(trigger + " Lyon")


def test_n_choices_are_sessions_seeded_one_after_another_streamed_or_not(story_model, story_url):
    """`n` (issue 44): choice i is the session with seed + i, each with its own trace (request id, then -1, -2)."""
    url, traces = story_url
    request = {"model": "story", "prompt": STORY, "max_tokens": 12, "temperature": 1.0, "seed": 5, "n": 3}
    answer = httpx.post(f"{url}/completions", json=request, timeout=60).json()
    results = [engine.generate(story_model, STORY, max_new_tokens=12, temperature=1.0, seed=5 + i) for i in range(3)]
    expected = [content(story_model, result, STORY) for result in results]
    assert [(c["index"], c["text"], c["finish_reason"]) for c in answer["choices"]] == [
        (i, text, reason) for i, (text, reason) in enumerate(expected)
    ]
    assert len({text for text, _ in expected}) > 1  # the seeds differ, so do the texts
    assert answer["usage"]["completion_tokens"] == sum(len(result.steps) for result in results)
    assert answer["traces"] == [answer["id"] + ".json", answer["id"] + "-1.json", answer["id"] + "-2.json"]
    for name, result in zip(answer["traces"], results):
        trace = engine.load_trace(traces / name)
        assert trace["settings"]["seed"] == result.seed and trace["text"] == result.text
        assert engine.replay(trace, story_model).identical
    chunks = list(client(url).completions.create(**dict(request, n=2, stream=True)))
    for index in (0, 1):
        assert "".join(c.choices[0].text for c in chunks if c.choices and c.choices[0].index == index) == expected[
            index][0]  # fmt: skip


def test_echo_gives_the_prompts_own_log_probabilities_as_engine_score_does(story_model, story_url):
    """`echo` with `logprobs` (issue 44; how vLLM answers lm-eval's loglikelihood requests): the answer starts with
    the prompt, the first token's log-probability None, the others engine.score's; `max_tokens: 0` echoes alone;
    a prompt given as [[ids]] reads the same."""
    url, _ = story_url
    scored = engine.score(story_model, STORY)
    ids = list(story_model.tokenizer.encode(STORY))
    for prompt in (STORY, [ids]):
        answer = httpx.post(f"{url}/completions", timeout=60, json={
            "model": "story", "prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0})  # fmt: skip
        choice = answer.json()["choices"][0]
        logprobs = choice["logprobs"]
        assert choice["text"] == STORY and choice["finish_reason"] == "length"
        assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
        assert logprobs["token_logprobs"][1:] == pytest.approx([-s.surprisal for s in scored.steps], abs=1e-5)
        assert "".join(logprobs["tokens"]) == STORY
        assert logprobs["text_offset"] == [len("".join(logprobs["tokens"][:i])) for i in range(len(ids))]
    more = httpx.post(f"{url}/completions", timeout=60, json={
        "model": "story", "prompt": STORY, "max_tokens": 4, "echo": True, "logprobs": 0, "temperature": 0}).json()  # fmt: skip
    generated = content(story_model, engine.generate(story_model, STORY, max_new_tokens=4), STORY)[0]
    assert more["choices"][0]["text"] == STORY + generated
    assert len(more["choices"][0]["logprobs"]["tokens"]) == len(ids) + 4
    streamed = list(client(url).completions.create(model="story", prompt=STORY, max_tokens=4, echo=True,
                                                   temperature=0, stream=True))  # fmt: skip
    assert "".join(c.choices[0].text for c in streamed if c.choices) == STORY + generated
    refused = httpx.post(f"{url}/completions", timeout=60, json={"model": "story", "prompt": STORY, "max_tokens": 0})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "max_tokens"
