"""Command line: python -m engine {generate,train} ..."""

import argparse
import sys

from . import load_model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine", description="Token Playground engine")
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="continue a prompt with the story model")
    gen.add_argument("prompt")
    gen.add_argument("--max-new-tokens", type=int, default=60)
    tr = commands.add_parser("train", help="train the story model and write its files")
    tr.add_argument("--out", default=None, help="output directory (default: the shipped resources/)")
    tr.add_argument("--steps", type=int, default=None)
    args = parser.parse_args(argv)

    if args.command == "generate":
        from .generation import greedy_continue

        try:
            text, stopped = greedy_continue(load_model(), args.prompt, args.max_new_tokens)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(text.rstrip("\n"))
        print(f"[stopped: {stopped}]", file=sys.stderr)
        return 0
    if args.command == "train":
        from pathlib import Path

        from .train import TrainSettings, train

        settings = TrainSettings() if args.steps is None else TrainSettings(steps=args.steps)
        out = Path(args.out) if args.out else Path(__file__).resolve().parent.parent / "resources"
        summary = train(out, settings=settings)
        print(summary)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
