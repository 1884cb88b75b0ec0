"""The OpenAI-compatible server (issue 29, engine/serve/): what serving costs, side by side in one run.

    python bench/serve_speed.py [--rounds 5] [--tokens 96] [--requests 1000] [--only smollm2|story|command|memory ...]

1. Tokens/s streamed to the `openai` client (completions, stream=True, greedy) through make_app on uvicorn in a
   thread of this process (the client's: they share the GIL), and through `python -m engine serve` in a process
   of its own (as a person runs it), against the same Session driven in-process (Session(...).run(stream=True), the
   server's own calls): SmolLM2 on llama.cpp (1 thread), --tokens tokens, and the story model (its end token
   biased off with logit_bias on both sides, so both write the whole count: 48 tokens, its context is 64).
2. The same stream through our server against llama.cpp's own llama-server (the tests' build) and llama-cpp-python's
   own server (llama_cpp.server) on the same
   GGUF file, 1 thread (n_threads and n_threads_batch), the same context size, the same raw prompt on
   /v1/completions at temperature 0. Neither server is asked for log-probabilities. The prompt is one SmolLM2
   does not end early on; both answers are checked to hold the whole count (and said to be the same text or not).
3. What a rule's command adds: the story model served with and without a rule whose trigger is the whole prompt
   (so it fires once, before the first token; each request writes 1 token) and whose tool is
   CommandTool([sys.executable, "-c", "pass"]) (this interpreter: a `python3` on PATH may be a pyenv shim, a bash
   script whose start varies by tens of ms); the request time with the rule less without, against subprocess.run of
   the same argv timed in this process;
   beside it a rule whose tool returns at once (the rule's own cost), and CommandTool() called directly less
   subprocess.run (the tool's own cost: its process group, stdin feeder, and the sweep for escaped children).
4. Memory: this process's RSS (the server runs in it) before and after --requests short requests on the story
   model (max_tokens 4, every 5th streamed), sampled every 100 after gc.collect().

Every measurement alternates its sides round by round (the machine is shared): ranges and medians.
Each time includes the whole request (the prompt's read too), as a client sees it.
"""

import argparse
import contextlib
import functools
import gc
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai

import engine
from engine.serve.app import make_app
from engine.serve.threaded import serving

ROOT = Path(__file__).resolve().parent.parent

SMOL_PROMPT = "Once upon a time, in a small village by the sea, there lived"
STORY_PROMPT = "mia has a red ball."
STORY_TOKENS = 48
COMMAND = [sys.executable, "-S", "-c", "pass"]  # -S: no site packages read, a steadier start


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def served(model, **options):
    """make_app(model, **options) on uvicorn in a thread of this process -> its /v1 URL."""
    return serving(make_app(model, **options))


@contextlib.contextmanager
def child_server(name: str, command: list[str], port: int):
    """An OpenAI-compatible server in a process of its own (command), on loopback at port -> its /v1 URL."""
    log = tempfile.TemporaryFile()
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(240):
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                if server.poll() is not None:
                    break
                time.sleep(0.5)
        else:
            raise RuntimeError(f"{name} did not start")
        if server.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"{name} exited: {log.read()[-2000:].decode(errors='replace')}")
        yield url
    finally:
        server.terminate()
        server.wait()


def llama_cpp_python_server(context: int):
    """llama-cpp-python's own OpenAI server on SmolLM2's GGUF file, one thread."""
    port = free_port()
    return child_server("llama-cpp-python's server", [
        sys.executable, "-m", "llama_cpp.server", "--model", str(engine.smollm2_path()), "--host", "127.0.0.1",
        "--port", str(port), "--n_threads", "1", "--n_threads_batch", "1", "--n_ctx", str(context)], port)  # fmt: skip


def llama_server(context: int):
    """llama.cpp's own llama-server on SmolLM2's GGUF file, one thread: the binary the tests build from the
    llama.cpp that llama-cpp-python vendors (tests/llama_server_build.py; built first where it is not cached:
    ~10 minutes)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from llama_server_build import llama_server_binary

    port = free_port()
    return child_server("llama-server", [
        str(llama_server_binary()), "-m", str(engine.smollm2_path()), "--host", "127.0.0.1", "--port", str(port),
        "-c", str(context), "-t", "1", "-tb", "1"], port)  # fmt: skip


def our_child_server(*model_options: str):
    """Our server as a person runs it: python -m engine serve [model_options]."""
    port = free_port()
    command = [sys.executable, "-m", "engine", "serve", *model_options, "--port", str(port)]
    return child_server("python -m engine serve", command, port)


SMOL_CHILD = ("--model", "smollm2", "--backend", "llama.cpp", "--threads", "1")


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=300)


def model_id(api: openai.OpenAI) -> str:
    return api.models.list().data[0].id


def whole_answer(api: openai.OpenAI, prompt: str, tokens: int, **extra) -> tuple[str, int]:
    """(text, completion tokens) of one greedy request, not streamed: the check that the count is whole."""
    answer = api.completions.create(model=model_id(api), prompt=prompt, max_tokens=tokens, temperature=0, **extra)
    return answer.choices[0].text, answer.usage.completion_tokens


def streamed_rate(api: openai.OpenAI, name: str, prompt: str, tokens: int, **extra) -> float:
    """Tokens/s of one greedy streamed completion, from the request to its last chunk (tokens: checked whole)."""
    started = time.perf_counter()
    stream = api.completions.create(model=name, prompt=prompt, max_tokens=tokens, temperature=0, stream=True, **extra)
    for _chunk in stream:
        pass
    return tokens / (time.perf_counter() - started)


def session_rate(model, prompt: str, tokens: int, **settings) -> float:
    started = time.perf_counter()
    session = engine.Session(model, prompt, max_new_tokens=tokens, temperature=0, seed=1, **settings)
    taken = session.run(stream=True)
    elapsed = time.perf_counter() - started
    if len(taken) != tokens:
        raise RuntimeError(f"the session wrote {len(taken)} tokens, not {tokens}: {session.stopped}")
    return tokens / elapsed


def spread(values, unit: str = "") -> str:
    ordered = sorted(values)
    return f"{ordered[0]:.1f}-{ordered[-1]:.1f}{unit} (median {statistics.median(ordered):.1f}{unit})"


def ratio_spread(tops, bottoms) -> str:
    ratios = sorted(a / b for a, b in zip(tops, bottoms))
    return f"{ratios[0]:.2f}-{ratios[-1]:.2f}x (median {statistics.median(ratios):.2f}x)"


def whole_count(api: openai.OpenAI, who: str, prompt: str, tokens: int, **extra) -> str:
    text, count = whole_answer(api, prompt, tokens, **extra)
    if count != tokens:
        raise RuntimeError(f"{who} wrote {count} tokens, not {tokens}: pick a prompt that goes on")
    return text


def agreement(texts: dict[str, str]) -> str:
    """Which sides wrote the same text, and where the others part from it."""
    groups: dict[str, list[str]] = {}
    for who, text in texts.items():
        groups.setdefault(text, []).append(who)
    if len(groups) == 1:
        return "all wrote the same text"
    common = os.path.commonprefix(list(groups))
    return "; ".join(f"{', '.join(who)} wrote {text[len(common) - 8 : len(common) + 12]!r}..." for text, who in
                     groups.items()) + f" (they part after {len(common)} characters)"  # fmt: skip


def interleaved(sides: dict, rounds: int) -> dict[str, list[float]]:
    """Each side's figure per round, the sides taking turns within every round."""
    out = {name: [] for name in sides}
    for _ in range(rounds):
        for name, measure in sides.items():
            out[name].append(measure())
    return out


def streaming_sides(model, prompt: str, tokens: int, rounds: int, child, llama_cpp_python=False, **settings):
    """Tokens/s per round: the Session in-process, our server in a thread of this process, our server in a
    process of its own (child()), and llama-cpp-python's server (when asked)."""
    bias = {str(i): b for i, b in settings.get("logit_bias", ())}
    extra = {"logit_bias": bias} if bias else {}
    with contextlib.ExitStack() as stack:
        urls = {"server (thread)": stack.enter_context(served(model)), "server (process)": stack.enter_context(child())}
        if llama_cpp_python:
            urls["llama-cpp-python"] = stack.enter_context(llama_cpp_python_server(model.context_length))
            urls["llama-server"] = stack.enter_context(llama_server(model.context_length))
        texts, sides = {}, {"session": lambda: session_rate(model, prompt, tokens, **settings)}
        for who, url in urls.items():
            api = client(url)
            # llama-cpp-python's server penalises repeats by default (1.1): off, as ours and the Session have it
            own = (
                dict(extra, extra_body={"repeat_penalty": 1.0})
                if who in ("llama-cpp-python", "llama-server")
                else extra
            )
            texts[who] = whole_count(api, who, prompt, tokens, **own)
            sides[who] = functools.partial(streamed_rate, api, model_id(api), prompt, tokens, **own)
        return interleaved(sides, rounds), agreement(texts)


class CountedCommand(engine.CommandTool):
    """The command tool, timing its runs (their count: the check that the rule fired once per request)."""

    times: list[float] = []

    def __call__(self, text_so_far: str, client_spans=()) -> str:
        started = time.perf_counter()
        try:
            return super().__call__(text_so_far, client_spans)
        finally:
            CountedCommand.times.append(time.perf_counter() - started)


def timed(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def nothing(_text_so_far: str) -> str:
    """A tool that returns at once: a rule's own cost, without a command's."""
    return ""


def command_overhead(model, rounds: int) -> dict[str, list[float]]:
    """Seconds per round: requests with the command rule, with a rule whose tool is `nothing`, with no rule; the
    CommandTool called directly, subprocess.run of its argv, and the tool's call inside the ruled request."""
    tool = CountedCommand(COMMAND)
    with contextlib.ExitStack() as stack:
        apis = {
            "command rule": client(stack.enter_context(served(model, rules=[engine.Rule(STORY_PROMPT, tool=tool)]))),
            "nothing rule": client(stack.enter_context(served(model, rules=[engine.Rule(STORY_PROMPT, tool=nothing)]))),
            "no rule": client(stack.enter_context(served(model))),
        }  # fmt: skip
        name = model_id(apis["no rule"])

        def request(api):
            return lambda: timed(lambda: api.completions.create(model=name, prompt=STORY_PROMPT, max_tokens=1,
                                                                  temperature=0))  # fmt: skip

        sides = {who: request(api) for who, api in apis.items()}
        sides["CommandTool()"] = lambda: timed(lambda: tool(STORY_PROMPT))
        sides["subprocess.run"] = lambda: timed(lambda: subprocess.run(COMMAND, check=True))
        interleaved(sides, 1)  # warm: connections open, each path taken once
        CountedCommand.times = []
        out = interleaved(sides, rounds)
    runs = CountedCommand.times
    if len(runs) != 2 * rounds:  # once per request with the rule, once called directly
        raise RuntimeError(f"the command ran {len(runs)} times in {rounds} rounds, not {2 * rounds}")
    out["the tool's call in the request"] = runs[0::2]  # each round: the request's call, then the direct one
    return out


def rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def memory_series(model, requests: int) -> list[int]:
    """RSS (KB) before the first request and after every 100th (gc.collect() first)."""
    with served(model) as url:
        api = client(url)
        name = model_id(api)
        gc.collect()
        series = [rss_kb()]
        for i in range(1, requests + 1):
            prompt = f"{STORY_PROMPT} {'mia' if i % 2 else 'kim'} has"
            if i % 5 == 0:
                for _chunk in api.completions.create(model=name, prompt=prompt, max_tokens=4, temperature=0.8,
                                                     seed=i, stream=True):  # fmt: skip
                    pass
            else:
                api.completions.create(model=name, prompt=prompt, max_tokens=4, temperature=0.8, seed=i)
            if i % 100 == 0:
                gc.collect()
                series.append(rss_kb())
    return series


def print_streaming(label: str, rates: dict) -> None:
    print(f"   {label}:")
    for who, values in rates.items():
        print(f"     {who:18} {spread(values)}")
    for who in ("server (thread)", "server (process)"):
        print(f"     {who} / session: {ratio_spread(rates[who], rates['session'])} (goal >= 0.9x)")
        for other in ("llama-server", "llama-cpp-python"):
            if other in rates:
                print(f"     {who} / {other}: {ratio_spread(rates[who], rates[other])} (goal >= 0.8x)")


def smollm2_part(args) -> None:
    smol = engine.load_model("smollm2", backend="llama.cpp", threads=1)
    rates, same = streaming_sides(smol, SMOL_PROMPT, args.tokens, args.rounds,
                                  functools.partial(our_child_server, *SMOL_CHILD), llama_cpp_python=True)  # fmt: skip
    print(f"1-2. tokens/s streamed to the openai client (completions, stream=True, greedy), {args.rounds} rounds "
          f"interleaved; our server in a thread of this process (the client's process) and as its own process")  # fmt: skip
    print_streaming(f"{smol.name}, llama.cpp 1 thread, {args.tokens} tokens", rates)
    print(f"   (llama-server: same GGUF, -t 1 -tb 1 -c {smol.context_length}; llama-cpp-python: --n_threads 1 "
          f"--n_threads_batch 1 --n_ctx {smol.context_length}; both repeat_penalty 1; {same})")  # fmt: skip


def story_part(args) -> None:
    story = engine.load_model()
    no_end = tuple((i, -100.0) for i in sorted(story.end_token_ids))
    rates, _ = streaming_sides(story, STORY_PROMPT, STORY_TOKENS, args.rounds, our_child_server, logit_bias=no_end)
    print(f"1. tokens/s streamed to the openai client, as above, {args.rounds} rounds interleaved:")
    print_streaming(f"story model, {STORY_TOKENS} tokens (end token biased off)", rates)


def command_part(args) -> None:
    costs = {who: [t * 1000 for t in times] for who, times in command_overhead(engine.load_model(),
                                                                               8 * args.rounds).items()}  # fmt: skip
    with_rule = [c - n for c, n in zip(costs["command rule"], costs["no rule"])]
    run_alone = costs["subprocess.run"]
    print(f"3. a rule firing once per request, before the first token (story model, 1 token per request), "
          f"{len(run_alone)} rounds interleaved, ms (the medians are of each round's difference)")  # fmt: skip
    print(f"   request without a rule {spread(costs['no rule'])}; {' '.join(COMMAND)} on its own "
          f"(subprocess.run) {spread(run_alone)}")  # fmt: skip
    print(f"   request with the command rule less without: {spread(with_rule)}")
    print(f"   that less the command's own time (goal < 5 ms): {spread(a - r for a, r in zip(with_rule, run_alone))}; "
          f"from the fastest of each: {min(costs['command rule']) - min(costs['no rule']) - min(run_alone):.1f}")  # fmt: skip
    in_request = costs["the tool's call in the request"]
    print(f"   of which the rule and the request (less the tool's call timed in that request): "
          f"{spread(a - t for a, t in zip(with_rule, in_request))}; a rule whose tool returns at once, less no rule: "
          f"{spread(d - n for d, n in zip(costs['nothing rule'], costs['no rule']))}")  # fmt: skip
    print(f"   and the tool (CommandTool() called directly less subprocess.run): "
          f"{spread(c - r for c, r in zip(costs['CommandTool()'], run_alone))}; from the fastest of each: "
          f"{min(costs['CommandTool()']) - min(run_alone):.1f}")  # fmt: skip


def memory_part(args) -> None:
    series = memory_series(engine.load_model(), args.requests)
    growth = series[-1] - series[1] if len(series) > 2 else 0
    print(f"4. RSS of the server's process over {args.requests} requests (story model, max_tokens 4, every 5th "
          f"streamed), MB at 0, 100, ...: {' '.join(f'{kb / 1024:.1f}' for kb in series)}")  # fmt: skip
    print(f"   growth after the first 100: {growth / 1024:+.1f} MB ({growth / max(1, args.requests - 100):+.2f} "
          f"KB/request); over all: {(series[-1] - series[0]) / 1024:+.1f} MB (goal: flat)")  # fmt: skip


PARTS = {"smollm2": smollm2_part, "story": story_part, "command": command_part, "memory": memory_part}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=96, help="SmolLM2's streamed tokens per request")
    parser.add_argument("--requests", type=int, default=1000, help="requests for the memory series")
    parser.add_argument("--only", choices=list(PARTS), action="append", help="these parts only (repeatable)")
    args = parser.parse_args()
    for name in args.only or PARTS:
        PARTS[name](args)
    print("command: python bench/serve_speed.py" + "".join(f" {arg}" for arg in sys.argv[1:]))


if __name__ == "__main__":
    main()
