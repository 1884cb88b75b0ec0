"""Command line: python -m engine {generate,trace,train} ..."""

import argparse
import json
import sys
from pathlib import Path

from . import generate, load_model


def _optional(kind):
    """argparse type: 'none' or 'off' means the filter is off."""

    def parse(text):
        return None if text.lower() in ("none", "off") else kind(text)

    parse.__name__ = kind.__name__
    return parse


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine", description="Token Playground engine")
    commands = parser.add_subparsers(dest="command", required=True)

    gen = commands.add_parser("generate", help="continue a prompt with the story model")
    gen.add_argument("prompt")
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    gen.add_argument("--top-k", type=_optional(int), default=None)
    gen.add_argument("--top-p", type=_optional(float), default=None)
    gen.add_argument("--min-p", type=_optional(float), default=None)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--max-new-tokens", type=int, default=60)
    gen.add_argument("--json", action="store_true", help="print the whole result as JSON")

    tr = commands.add_parser("trace", help="the settings trace (see engine/settings_trace.py)")
    mode = tr.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite resources/generation-trace.json")
    mode.add_argument("--check", action="store_true", help="exit 1 if the output differs from the recorded file")
    tr.add_argument("--record", default=None, help="the recorded file (default: resources/generation-trace.json)")

    train = commands.add_parser("train", help="train the story model and write its files")
    train.add_argument("--out", default=None, help="output directory (default: the shipped resources/)")
    train.add_argument("--steps", type=int, default=None)
    args = parser.parse_args(argv)

    try:
        if args.command == "generate":
            return _generate(args)
        if args.command == "trace":
            return _trace(args)
        return _train(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _generate(args) -> int:
    result = generate(
        load_model(), args.prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, seed=args.seed,
    )  # fmt: skip
    if args.json:
        print(json.dumps(result.to_dict(), indent=1, ensure_ascii=False))
    else:
        print(result.text.rstrip("\n"))
        print(f"[stopped: {result.stopped}]", file=sys.stderr)
    return 0


def _trace(args) -> int:
    from .checkpoint import atomic_write_bytes, resources_dir
    from .settings_trace import render, timed_trace

    trace, seconds = timed_trace(load_model())
    text = render(trace)
    recorded = Path(args.record) if args.record else resources_dir() / "generation-trace.json"
    if args.write:
        atomic_write_bytes(recorded, text.encode("utf-8"))
        timing = json.dumps({"seconds": round(seconds, 2), "command": "python -m engine trace --write"}) + "\n"
        atomic_write_bytes(recorded.with_suffix(".timing.json"), timing.encode("utf-8"))
        print(f"wrote {recorded} ({seconds:.2f} s)")
        return 0
    if args.check:
        same = recorded.is_file() and recorded.read_text(encoding="utf-8") == text
        print(f"{'identical to' if same else 'DIFFERS from'} {recorded} ({seconds:.2f} s)")
        return 0 if same else 1
    print(text, end="")
    print(f"({seconds:.2f} s)", file=sys.stderr)
    return 0


def _train(args) -> int:
    from .train import TrainSettings, train

    settings = TrainSettings() if args.steps is None else TrainSettings(steps=args.steps)
    out = Path(args.out) if args.out else Path(__file__).resolve().parent.parent / "resources"
    print(train(out, settings=settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
