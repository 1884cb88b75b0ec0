"""What a tool-call request costs on the server (issue 44): the same chat request with `tools` (tool_choice
"required": the generic JSON form's system text and its grammar on every step) and without, side by side.

    python bench/tool_call_speed.py [--rounds 8]

SmolLM2 on llama.cpp (1 thread), greedy, through the `openai` client against make_app on uvicorn in a thread of
this process. Each round sends one request of each kind, alternating which goes first (the machine is shared).
A third kind sends the tools' prompt (the system text the form adds) without tools, so the grammar's own cost
shows apart from the longer prompt's. Reported per kind: the whole request's seconds and the generated tokens per second (completion tokens / the
request's seconds: the prompt's read is in it, as a client sees it); then the ratio with tools / without. The
request with tools reads a longer prompt (the tools' description) and writes JSON; the one without writes free text
of the same max_tokens (its end token biased off, so both write the whole count).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import engine  # noqa: E402
from engine.serve.app import make_app  # noqa: E402
from engine.serve.threaded import serving  # noqa: E402
from engine.serve.tools import template_messages, tool_plan  # noqa: E402

ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two whole numbers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]},
}}  # fmt: skip
MESSAGES = [{"role": "user", "content": "What is 2 plus 3? Use the add tool."}]
TOKENS = 24


def timed(client, **request) -> tuple[float, int]:
    started = time.perf_counter()
    request = {"model": "smollm2", "messages": MESSAGES, "temperature": 0, **request}
    answer = client.chat.completions.create(**request)
    return time.perf_counter() - started, answer.usage.completion_tokens


def main() -> None:
    import openai

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    rounds = parser.parse_args().rounds
    model = engine.load_model("smollm2", backend="llama.cpp", threads=1, context_length=1024)
    ends = {str(i): -100 for i in model.end_token_ids}
    kinds = {
        "with tools": dict(tools=[ADD], tool_choice="required", max_tokens=TOKENS),
        "tools' prompt, no grammar": dict(
            max_tokens=TOKENS, logit_bias=ends, messages=template_messages(MESSAGES, tool_plan([ADD], "required"))
        ),  # fmt: skip
        "without": dict(max_tokens=TOKENS, logit_bias=ends),
    }
    seen = {name: [] for name in kinds}
    with serving(make_app(model, model_id="smollm2")) as url:
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=120)
        for request in kinds.values():  # warm every path (the grammar's first compile)
            timed(client, **request)
        for r in range(rounds):
            order = list(kinds) if r % 2 == 0 else list(kinds)[::-1]
            for name in order:
                seen[name].append(timed(client, **kinds[name]))
    print(f"SmolLM2 Q4_1 on llama.cpp, 1 thread, greedy, {rounds} rounds alternating")
    rates = {}
    for name, runs in seen.items():
        seconds = [s for s, _ in runs]
        rates[name] = [n / s for s, n in runs]
        print(f"{name:>26}: {min(seconds):.3f}-{max(seconds):.3f} s a request (median {statistics.median(seconds):.3f}),"
              f" {min(rates[name]):.0f}-{max(rates[name]):.0f} tokens/s, {runs[0][1]} tokens")  # fmt: skip
    ratios = [a / b for a, b in zip(rates["with tools"], rates["without"])]
    print(
        f"tokens/s with tools / without: {min(ratios):.2f}-{max(ratios):.2f} (median {statistics.median(ratios):.2f})"
    )
    model.close()


if __name__ == "__main__":
    main()
