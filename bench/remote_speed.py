"""A model behind an inference server: what one step costs, and streaming, against the server on its own.

    python bench/remote_speed.py [--url http://127.0.0.1:8080/v1] [--tokens 48] [--rounds 5]

Without --url it starts llama-cpp-python's server on loopback with SmolLM2 (the same GGUF file as
bench/gguf_speed.py). Prints the median step latency through the server (one token per request, with the
top-20 log-probabilities), a step right after a rewind (the server's prefix cache makes it cheap),
streaming tokens per second with log-probabilities through engine.Session, and the server's own streaming
rate with and without log-probabilities, all in one run: the Session's streaming and the server's own (with
log-probabilities) alternate for --rounds rounds, and their ratio is given per round. Then the requests an
insert and a forced token cost (one echoing request for a whole insert where the server's echo lines up: vLLM), and
engine.score of a text against the server's own prompt evaluation (vLLM's prompt_logprobs), alternating.
(llama-cpp-python's server spends most of a token on log-probabilities: it sorts the whole vocabulary in Python
for each one.) On vLLM: start its server as tests/vllm_server.py does and pass --url.
"""

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx
from timing import timed_steps

import engine

PROMPT = "Once upon a time, in a small village by the sea, there lived"


def start_server():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tempfile.TemporaryFile()
    server = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(engine.smollm2_path()),
                               "--host", "127.0.0.1", "--port", str(port), "--n_threads", "2"],
                              stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(240):
        try:
            if httpx.get(url + "/models", timeout=2).status_code == 200:
                return server, url
        except httpx.HTTPError:
            time.sleep(0.5)
    server.kill()
    raise RuntimeError("the server did not start")


def step_latency(model, tokens):
    session = engine.Session(model, PROMPT, max_new_tokens=tokens + 1, temperature=0.8, seed=1)
    session.step()  # the prompt's first evaluation is not a step's cost
    times = timed_steps(session, tokens)
    rewinds = []
    for _ in range(8):
        session.rewind(5)
        started = time.perf_counter()
        session.step()
        rewinds.append(time.perf_counter() - started)
    return statistics.median(times), statistics.median(rewinds)


def streaming_rate(model, tokens):
    session = engine.Session(model, PROMPT, max_new_tokens=tokens, temperature=0.8, seed=2)
    started = time.perf_counter()
    taken = session.run(stream=True)
    return len(taken) / (time.perf_counter() - started)


def raw_server_rate(model, tokens, logprobs=None):
    payload = {"model": model.model_id, "prompt": PROMPT, "max_tokens": tokens, "temperature": 0.8, "seed": 2,
               "stream": True}  # fmt: skip
    if logprobs:
        payload["logprobs"] = logprobs
    count = 0
    started = time.perf_counter()
    with httpx.stream("POST", model.url + "/completions", json=payload, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data:") and "[DONE]" not in line and '"text": ""' not in line:
                count += 1
    return count / (time.perf_counter() - started)


INSERTED = " and the old sailor told them a story about the sea"


def requests_per_steer(model) -> tuple[int, int, int]:
    """(tokens inserted, requests the insert cost (its tokenizing included), requests a forced token and the next
    step cost)."""
    session = engine.Session(model, PROMPT, max_new_tokens=8, temperature=0)
    session.step()
    before = model.connection.requests
    session.insert_text(INSERTED)
    inserted = model.connection.requests - before
    count, whale = len(model.tokenizer.encode(INSERTED)), model.tokenizer.encode(" whale")[0]
    before = model.connection.requests
    session.force_token(whale)
    session.step()
    return count, inserted, model.connection.requests - before


SCORED = (
    "The history of computing is longer than the history of computing hardware and includes the history of "
    "methods intended for pen and paper or for chalk and slate, with or without the aid of tables. "
) * 4


def scoring_rounds(model, rounds: int) -> list[tuple[float, float]]:
    """(engine.score of SCORED, the server's own prompt evaluation of the same ids: one request with vLLM's
    prompt_logprobs, the log-likelihood alone) in seconds, alternating; [] where prompts do not go as ids."""
    if not model.protocol.get("token_id_prompts"):
        return []
    ids = model.tokenizer.encode(SCORED)
    own = {"model": model.model_id, "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        engine.score(model, SCORED)
        ours = time.perf_counter() - started
        started = time.perf_counter()
        httpx.post(model.url + "/completions", json=own, timeout=120).raise_for_status()
        timings.append((ours, time.perf_counter() - started))
    return timings


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    server = None
    url = args.url
    if url is None:
        server, url = start_server()
    try:
        model = engine.load_model(url)
        step, after_rewind = step_latency(model, args.tokens)
        rounds = []  # (Session, the server alone with logprobs), alternating: both see the same load
        for _ in range(args.rounds):
            rounds.append((streaming_rate(model, args.tokens), raw_server_rate(model, args.tokens, logprobs=20)))
        streamed, raw_logprobs = (statistics.median(side) for side in zip(*rounds))
        ratios = sorted(s / r for s, r in rounds)
        raw = raw_server_rate(model, args.tokens)
        inserted_tokens, insert_requests, force_requests = requests_per_steer(model)
        scoring = scoring_rounds(model, args.rounds)
        print(f"{model.name} (prompts sent as {'token ids' if model.protocol['token_id_prompts'] else 'text'})")
        print(f"  step through the server (1 token per request, top 20) median {step * 1000:6.1f} ms")
        print(f"  step right after rewinding 5 tokens (prefix cache)         median {after_rewind * 1000:6.1f} ms")
        print(f"  streaming through engine.Session, with top-20 logprobs     {streamed:6.1f} tokens/s")
        print(
            f"  the server streaming on its own, with top-20 logprobs      {raw_logprobs:6.1f} tokens/s"
            f"  (Session: {ratios[0]:.2f}-{ratios[-1]:.2f}x over {len(rounds)} rounds)"
        )
        print(
            f"  the server streaming on its own, no logprobs               {raw:6.1f} tokens/s"
            f"  (Session: {streamed / raw:.2f}x)"
        )
        print(f"  an insert of {inserted_tokens} tokens: {insert_requests} request(s); a forced token and its step: "
              f"{force_requests} request(s) (scoring: {model.protocol['scoring']})")  # fmt: skip
        if scoring:
            score_ratios = sorted(ours / own for ours, own in scoring)
            print(f"  engine.score of {len(model.tokenizer.encode(SCORED))} tokens vs the server's own prompt evaluation: "
                  f"{statistics.median(o for o, _ in scoring) * 1000:.0f} vs {statistics.median(w for _, w in scoring) * 1000:.0f} ms"
                  f" medians ({score_ratios[0]:.2f}-{score_ratios[-1]:.2f}x over {len(scoring)} rounds)")  # fmt: skip
        print("command: python bench/remote_speed.py" + (f" --url {args.url}" if args.url else ""))
    finally:
        if server is not None:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
