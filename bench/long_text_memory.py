"""Memory of a long text (issue 42): what a session's steps cost beyond the model and its KV cache, with the rows of
scores let go (engine/backends/kept_rows.py's RECENT_ROWS) and with every row kept (as before), side by side, each in
a child process of its own; and the decode speed of both.

    python bench/long_text_memory.py [--model gemma3] [--tokens 8000] [--before-tokens 1500] [--rounds 2] [--server]

--server runs the same text as one request to `python -m engine serve`'s app on uvicorn in the child (no
`max_tokens` limit hit: the end token banned), measured the same way. RSS is read from /proc (Linux)."""

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, sys, time
import engine
from engine.backends import kept_rows
spec = json.loads(sys.argv[1])
if spec["keep_all"]:
    kept_rows.RECENT_ROWS = 10**9  # every row kept, as before issue 42
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
model = engine.load_model(spec["model"], backend="llama.cpp", threads=spec["threads"], context_length=spec["context"])
ban = tuple((i, -100) for i in model.end_token_ids)
prompt = "Once upon a time"
if spec["server"]:
    import httpx
    from engine.serve.app import make_app
    from engine.serve.threaded import serving
    with serving(make_app(model)) as url:
        httpx.post(f"{url}/completions", json={"model": model.name, "prompt": prompt, "max_tokens": 1}, timeout=600)
        base, started = rss_mb(), time.perf_counter()
        answer = httpx.post(f"{url}/completions", timeout=3600, json={
            "model": model.name, "prompt": prompt, "max_tokens": spec["tokens"], "temperature": 1.0, "seed": 1,
            "logit_bias": {str(i): -100 for i in model.end_token_ids}}).json()
        steps = answer["usage"]["completion_tokens"]
else:
    session = engine.Session(model, prompt, max_new_tokens=spec["tokens"] + 1, temperature=1.0, seed=1,
                             logit_bias=ban)
    session.step()
    base, started = rss_mb(), time.perf_counter()
    steps = 1
    while session.step() is not None:
        steps += 1
seconds = time.perf_counter() - started
print(json.dumps({"steps": steps, "grown_mb": rss_mb() - base, "tokens_per_s": steps / seconds}))
"""


def measure(spec: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True,
                          env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma3")
    parser.add_argument("--tokens", type=int, default=8000)
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--server", action="store_true", help="one request to the server instead of a Session")
    parser.add_argument("--before-tokens", type=int, default=1500,
                        help="tokens of the side-by-side runs (every row kept grows ~1 MB a Gemma 3 token)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2, help="side-by-side rounds")
    args = parser.parse_args()
    common = {"model": args.model, "context": args.context, "threads": args.threads, "server": args.server}
    where = "server request" if args.server else "Session"
    print(f"{args.model}, {where}, llama.cpp {args.threads} thread(s), context {args.context}:")
    if args.tokens > 0:  # 0: the side-by-side runs only
        show(f"rows let go, {args.tokens} tokens", measure(dict(common, tokens=args.tokens, keep_all=False)))
    pairs = []
    for _ in range(args.rounds):  # the same length both ways, interleaved: the decode speed side by side
        now = measure(dict(common, tokens=args.before_tokens, keep_all=False))
        before = measure(dict(common, tokens=args.before_tokens, keep_all=True))
        show("rows let go (now)", now)
        show("every row kept (before)", before)
        pairs.append(now["tokens_per_s"] / before["tokens_per_s"])
    print(f"  decode speed, now / before, {args.before_tokens} tokens: " + ", ".join(f"{r:.2f}x" for r in pairs))


def show(name: str, run: dict) -> None:
    per_token = run["grown_mb"] * 1024 / run["steps"]
    print(f"  {name:<28} {run['steps']:>6} tokens: +{run['grown_mb']:.0f} MB ({per_token:.1f} KB a token), "
          f"{run['tokens_per_s']:.1f} tokens/s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
