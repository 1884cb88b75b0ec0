"""Many clients at once (issue 45): our server with `--parallel N` against llama.cpp's llama-server with `-np N`
(continuous batching on: its default), side by side in one run, rounds interleaved.

    python bench/serve_parallel.py [--clients 1,4,16] [--rounds 2] [--tokens 64]

Each side is a process of its own on SmolLM2's GGUF file, 1 thread, a context of 4,096 positions (each of N
sequences gets 4,096 // N on both). N clients start at once, each streaming a completion of --tokens tokens at
T 0.8, top-k 40, top-p 0.95 with its own seed and prompt (the end token biased off, so every answer is whole).
Printed per N: time to first token (p50 / p95 over the clients of every round) and the tokens/s of all clients
together (streamed tokens / the wall time from the first request to the last token). Before the rounds, one
short request to each server warms both it and this process's client (the first request in a process paid
~0.5 s of imports and first calls, which fell on whichever side went first).
"""

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from serve_speed import child_server, free_port  # noqa: E402

import engine  # noqa: E402

PROMPTS = ["The old lighthouse keeper", "Once upon a time", "The history of the bicycle", "My grandmother's garden",
           "The city at night", "A letter to my younger self", "The first day of school", "How bread is made"]  # fmt: skip
CONTEXT = 4096


def ours(n: int):
    port = free_port()
    command = [sys.executable, "-m", "engine", "serve", "-m", "smollm2", "--backend", "llama.cpp", "-t", "1",
               "-c", str(CONTEXT), "-np", str(n), "--port", str(port)]  # fmt: skip
    return child_server(f"engine serve -np {n}", command, port)


def theirs(n: int):
    sys.path.insert(0, str(ROOT / "tests"))
    from llama_server_build import llama_server_binary

    port = free_port()
    command = [str(llama_server_binary()), "-m", str(engine.smollm2_path()), "--host", "127.0.0.1", "--port",
               str(port), "-c", str(CONTEXT), "-t", "1", "-tb", "1", "-np", str(n), "-cb"]  # fmt: skip
    return child_server(f"llama-server -np {n}", command, port)


def clients_round(url: str, n: int, tokens: int, end_id: int) -> tuple[list[float], float]:
    """n clients at once -> (each one's time to its first token, all tokens / the round's wall time)."""
    first, counts, errors = [0.0] * n, [0] * n, []
    start = time.perf_counter()

    def client(i: int) -> None:
        try:
            api = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
            stream = api.completions.create(model=api.models.list().data[0].id, prompt=PROMPTS[i % len(PROMPTS)],
                                            max_tokens=tokens, temperature=0.8, top_p=0.95, seed=i, stream=True,
                                            logit_bias={str(end_id): -100}, extra_body={"top_k": 40})  # fmt: skip
            for chunk in stream:
                if chunk.choices and chunk.choices[0].text:
                    if not counts[i]:
                        first[i] = time.perf_counter() - start
                    counts[i] += 1
        except Exception as error:  # noqa: BLE001 - said after the round
            errors.append(error)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} clients failed: {errors[0]}")
    return first, sum(counts) / (time.perf_counter() - start)


def in_process(n: int, tokens: int, end_id: int) -> tuple[float, float]:
    """The scheduler without a server: n Sessions on threads of this process -> (tokens/s, tokens a decode)."""
    from engine.backends.llamacpp.scheduler import Shared

    shared = Shared(engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=CONTEXT), n)

    def run(i: int) -> None:
        engine.Session(shared, PROMPTS[i % len(PROMPTS)], max_new_tokens=tokens, temperature=0.8, top_k=40,
                       top_p=0.95, seed=i, logit_bias=((end_id, -100.0),)).run()  # fmt: skip

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rate = n * tokens / (time.perf_counter() - start)
    scheduler = shared.scheduler
    shared.close()
    return rate, scheduler.tokens / scheduler.rounds


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--in-process", action="store_true", help="also the scheduler without a server")
    args = parser.parse_args()
    end_id = sorted(engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=256).end_token_ids)[0]
    print(f"SmolLM2 Q4_1, 1 thread, context {CONTEXT}, {args.tokens} tokens a client (T 0.8, top-k 40, top-p 0.95)")
    for n in (int(c) for c in args.clients.split(",")):
        with ours(n) as our_url, theirs(n) as their_url:
            for url in (our_url, their_url):
                clients_round(url, 1, 2, end_id)
            firsts, rates = {"ours": [], "llama-server": []}, {"ours": [], "llama-server": []}
            for r in range(args.rounds):
                order = [("ours", our_url), ("llama-server", their_url)]
                for name, url in order if r % 2 == 0 else order[::-1]:
                    first, rate = clients_round(url, n, args.tokens, end_id)
                    firsts[name] += first
                    rates[name].append(rate)
        o, t = firsts["ours"], firsts["llama-server"]
        ratios = [a / b for a, b in zip(rates["ours"], rates["llama-server"])]
        print(f"  {n:2d} clients: first token p50 / p95 {quantile(o, 0.5):.2f} / {quantile(o, 0.95):.2f} s against "
              f"{quantile(t, 0.5):.2f} / {quantile(t, 0.95):.2f} s; tokens/s {min(rates['ours']):.0f}-"
              f"{max(rates['ours']):.0f} against {min(rates['llama-server']):.0f}-{max(rates['llama-server']):.0f} "
              f"({min(ratios):.2f}-{max(ratios):.2f}x)")  # fmt: skip
    if args.in_process:
        for n in (int(c) for c in args.clients.split(",")):
            rate, per_decode = in_process(n, args.tokens, end_id)
            print(f"  in-process, {n:2d} Sessions on threads: {rate:.0f} tokens/s, {per_decode:.1f} tokens a decode")
    print("command: python bench/serve_parallel.py" + "".join(f" {arg}" for arg in sys.argv[1:]))


if __name__ == "__main__":
    main()
