"""The seed's case, served (issue 29): an agent's chat completion (the official openai client, examples/agent_result/
agent.py) on SmolLM2 writes a unit test; the server's rules (examples/agent_result/rules.json, the rules panel's
file format) write "Result:" once the code block closes, run the block with pytest and insert the real result
between two inference passes; the model writes on after it. And the server's command line: a malformed rules
file or a command rule without --allow-commands stops it at start-up with a sentence, not a traceback."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_serve import served

import engine

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "agent_result"
sys.path.insert(0, str(EXAMPLE))
import agent  # noqa: E402 - the example's own client


def pytest_status(text: str) -> int:
    """What the example's command returns for this text: pytest's exit status on its last code block."""
    done = subprocess.run([sys.executable, str(EXAMPLE / "run_block.py")], input=text.encode(), capture_output=True,
                          timeout=120)  # fmt: skip
    return done.returncode


def test_the_agents_test_result_is_the_real_one_forced_in_mid_answer(smollm2_llamacpp, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the rules file names its command relative to the repository's root
    rules = engine.load_rules(EXAMPLE / "rules.json", allow_commands=True)
    with served(smollm2_llamacpp, rules=rules, traces=tmp_path) as url:
        answer = agent.ask(url)
    text = answer.choices[0].message.content
    code, result, after = re.fullmatch(r"(```python\n.*?```\n)\nResult:( passed| failed)(.*)", text, re.DOTALL).groups()
    assert result == (" passed" if pytest_status(code) == 0 else " failed")  # the real run's verdict
    assert after.strip()  # the model went on writing after the result
    trace = engine.load_trace(tmp_path / f"{answer.id}.json")
    sources = [(step["token"], step["source"]) for step in trace["steps"] if step["source"] != "model"]
    assert sources == [("\n", "rule"), ("Result", "rule"), (":", "rule"), (result, "tool")]
    assert engine.replay(trace, smollm2_llamacpp).identical


@pytest.mark.parametrize("rules, message", [
    ('[{"when": "Result:", "insert": " failed", "colour": "red"}]', "colour"),
    ('[{"when": "Result:"}]', "rule 1"),
    ("[{", "line 1"),
    ('[{"when": "Result:", "command": ["true"]}]', "allow"),
])  # fmt: skip
def test_a_bad_rules_file_stops_the_server_at_start_up_with_a_sentence(tmp_path, rules, message):
    path = tmp_path / "rules.json"
    path.write_text(rules, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "engine", "serve", "--rules", str(path), "--port", "1"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stderr.startswith("error: ") and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_an_open_host_needs_an_api_key():
    done = subprocess.run([sys.executable, "-m", "engine", "serve", "--host", "0.0.0.0"], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 2 and "--api-key" in done.stderr and "Traceback" not in done.stderr


def test_python_m_engine_serve_answers_and_keeps_traces(tmp_path):
    """The command line itself: `python -m engine serve --traces DIR` on a free port answers a completion and
    keeps its trace; Ctrl+C (SIGINT) ends it."""
    import signal
    import time

    import httpx
    from local_servers import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--port", str(port), "--traces", str(tmp_path)],
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).json()
                break
            except httpx.HTTPError:
                assert server.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        body = {"model": models["data"][0]["id"], "prompt": "mia has a red ball.", "max_tokens": 5, "seed": 1}
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60)
        assert answer.status_code == 200 and answer.headers["x-trace"] == f"{answer.json()['id']}.json"
        assert engine.load_trace(tmp_path / answer.headers["x-trace"])["settings"]["seed"] == 1
    finally:
        server.send_signal(signal.SIGINT)
        _out, said = server.communicate(timeout=30)  # closes the pipe
    assert server.returncode in (0, -signal.SIGINT) and "serving on http://127.0.0.1" in said


def test_a_failing_test_forces_failed_where_the_model_found_it_unlikely(smollm2_llamacpp, tmp_path, monkeypatch):
    """The same rules, the command's verdict forced to a failure (exit 1): " failed" is inserted after "Result:",
    and the answer's log-probabilities show how unlikely the model found it there (its own top token: a newline)."""
    import json

    monkeypatch.chdir(ROOT)
    rules = json.loads((EXAMPLE / "rules.json").read_text(encoding="utf-8"))
    rules[1]["command"] = [sys.executable, "-c", "import sys; sys.exit(1)"]
    with served(smollm2_llamacpp, rules=engine.rules_from_json(rules, allow_commands=True)) as url:
        client = agent.openai.OpenAI(base_url=url, api_key="none")
        answer = client.chat.completions.create(model=smollm2_llamacpp.name, max_tokens=200, temperature=0,
                                                messages=[{"role": "user", "content": agent.QUESTION}],
                                                logprobs=True, top_logprobs=5)  # fmt: skip
    assert "\nResult: failed" in answer.choices[0].message.content
    records = answer.choices[0].logprobs.content
    forced = next(r for i, r in enumerate(records) if r.token == " failed" and records[i - 1].token == ":")
    assert forced.logprob < forced.top_logprobs[0].logprob - 5  # -12.9 against the newline's -0.39 here
    assert " failed" not in {t.token for t in forced.top_logprobs}
