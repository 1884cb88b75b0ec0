"""`python -m engine serve` / `token-playground serve`: the OpenAI-compatible server on one model."""

import argparse
import ipaddress
import sys
from pathlib import Path

from engine.core.commands import CommandTool, confinement_sentence

LOOPBACK = ("localhost",)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine serve",
        description="Serve a model on an OpenAI-compatible API (/v1/models, /v1/completions, /v1/chat/completions) "
        "whose rules act between two inference passes. Needs the [serve] extra: pip install '.[serve]'.",
    )
    parser.add_argument("-m", "--model", default=None, metavar="MODEL",
                        help="the story model (default), 'smollm2', 'gemma3', a .gguf file, a story-model checkpoint, "
                             "or an OpenAI-compatible server URL (then this is a steering proxy in front of it)")  # fmt: skip
    parser.add_argument("--backend", choices=("llama.cpp", "numpy"), default=None, help="what runs a .gguf file")
    parser.add_argument("-c", "--context", "--ctx-size", type=int, default=None, metavar="N",
                        help="a .gguf file's context size")  # fmt: skip
    parser.add_argument("-t", "--threads", type=int, default=None, help="llama.cpp's CPU threads")
    parser.add_argument(
        "--chat-template-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="a Jinja chat template to use instead of the model file's (as llama-server's)",
    )
    parser.add_argument(
        "-np",
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="requests generated at once, their tokens in one llama.cpp decode, each with the "
        "context // N (as llama-server's -np; default 1: one at a time, the exact path)",
    )
    parser.add_argument("--model-id", default=None, help="the name clients send as `model` (default: the model's own)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default 127.0.0.1: this machine only; any other needs --api-key)")  # fmt: skip
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=None, help="clients must send `Authorization: Bearer KEY`")
    parser.add_argument("--rules", type=Path, default=None, metavar="FILE",
                        help="a JSON list of rules every request runs with (the rules panel's file)")  # fmt: skip
    parser.add_argument("--allow-commands", action="store_true",
                        help="let --rules run command rules (each in its own process group, timed and capped)")  # fmt: skip
    parser.add_argument("--traces", type=Path, default=None, metavar="DIR",
                        help="keep every request's trace in DIR, named by its request id")  # fmt: skip
    return parser


def is_loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def checked_options(args) -> None:
    if not is_loopback(args.host) and not args.api_key:
        also = " and --allow-commands lets whoever reaches it run commands" if args.allow_commands else ""
        raise ValueError(f"--host {args.host} opens the server beyond this machine{also}: give --api-key too")
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be from 1 to 65535, got {args.port}")
    if args.traces is not None:
        args.traces.mkdir(parents=True, exist_ok=True)
        if not args.traces.is_dir():
            raise ValueError(f"--traces {args.traces} is not a folder")


def server_app(args):
    """The app for these arguments (the model loaded, the rules read): ValueError naming what is wrong."""
    from engine.loading import load_model
    from engine.serve.app import make_app

    checked_options(args)
    rules = ()
    if args.rules is not None:
        from engine.core.rules_file import load_rules

        rules = load_rules(args.rules, allow_commands=args.allow_commands)
    model = load_model(args.model, backend=args.backend, context_length=args.context, threads=args.threads)
    if args.chat_template_file is not None:
        use_template_file(model, args.chat_template_file)
    aliases = () if args.model is None else (args.model,)
    return make_app(model, model_id=args.model_id, rules=rules, traces=args.traces, api_key=args.api_key,
                    aliases=aliases, parallel=args.parallel)  # fmt: skip


MAX_TEMPLATE_BYTES = 1 << 20


def use_template_file(model, path: Path) -> None:
    """The model renders chats with this file's template (read within 1 MB, checked as the file's own is)."""
    use = getattr(model.tokenizer, "use_chat_template", None)
    if use is None:
        raise ValueError(f"--chat-template-file: {model.name} renders no chat template here (its server keeps its own)")
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_TEMPLATE_BYTES + 1)
        if len(raw) > MAX_TEMPLATE_BYTES:
            raise ValueError(f"it is over {MAX_TEMPLATE_BYTES >> 20} MB")
        use(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"--chat-template-file {path}: {error}") from None


def who_runs_what(args, commands: list[str]) -> str:
    """The start-up line of a server whose rules run commands: who can now make them run, and how confined."""
    who = "any client on this machine" if is_loopback(args.host) else f"any client that reaches {args.host}"
    who += " that sends the API key" if args.api_key else ""
    return (
        f"commands: {who} can make the model write what {len(commands)} command rule(s) run "
        f"({'; '.join(commands)}); {confinement_sentence()} (docs/serve.md, Security)"
    )


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import uvicorn
    except ImportError:
        print('error: serving needs the [serve] extra: pip install ".[serve]" (from the repository\'s folder)',
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        app = server_app(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"serving on http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    commands = [rule.tool.name for rule in app.state.rules if isinstance(rule.tool, CommandTool)]
    if commands:
        print(who_runs_what(args, commands), file=sys.stderr, flush=True)
    from engine.serve.guard import uvicorn_config

    uvicorn.Server(uvicorn_config(app, args.host, args.port)).run()
    return 0
