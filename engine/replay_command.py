"""`python -m engine replay TRACE`: replay a trace or a session file on its model (or one given) and say whether
every step came out the same; exit 0 (identical, or within rounding), 1 (differs), 2 (could not replay)."""

import sys
from pathlib import Path

from engine.loading import load_model


def replay_command(args) -> int:
    from engine import replay

    trace, load = _replayable(args.trace)
    model = _replay_model(args, trace["model"], load)
    try:
        report = replay(trace, model, other_model=args.other_model, progress=_progress_printer())
    except KeyboardInterrupt:
        print("replay cancelled (Ctrl+C): no verdict", file=sys.stderr)
        return 2
    print(report.summary())
    for note in report.notes:
        if note != report.summary():  # a replay that stopped says why in both
            print(note)
    return 0 if report.same_tokens else 1


def _progress_printer(every: float = 2.0):
    """progress(done, total) for replay: a line on stderr every few seconds once it has run that long."""
    import time

    started = last = time.monotonic()

    def progress(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= every and done < total:
            print(f"replaying: {done:,} of {total:,} actions done, {now - started:.0f} s (Ctrl+C stops it)",
                  file=sys.stderr, flush=True)  # fmt: skip
            last = now

    return progress


def _replayable(path) -> tuple[dict, dict]:
    """(the trace, where its model came from: a session file's "load", {} for a trace) of a trace or session file."""
    from engine.core.session_file import SCHEMA, load_session_file
    from engine.core.trace import load_trace

    try:
        with open(path, "rb") as f:
            start = f.read(4096)
    except OSError:
        start = b""  # load_trace says why it cannot be read
    if SCHEMA.encode() not in start:
        return load_trace(path), {}
    document = load_session_file(path)
    if document["trace"] is None:
        raise ValueError(f"the session file {path} holds no run yet: nothing to replay")
    return document["trace"], document["model"]["load"]


def _replay_model(args, recorded: dict, load: dict):
    """--model, else the file or server a session file names, else the model the trace names when this machine has
    it (the shipped story model, SmolLM2), on the backend the trace was recorded on unless --backend says otherwise."""
    from engine.loading import SMOLLM2_FILE, smollm2_path
    from engine.story.checkpoint import load_story_model

    backend = args.backend or ("llama.cpp" if recorded.get("backend") == "llama.cpp" else "numpy")
    source = args.model if args.model is not None else load.get("source")
    if source is not None:
        return load_model(source, backend=backend, threads=args.threads, model_name=recorded.get("server_model"))
    if recorded["name"] == Path(SMOLLM2_FILE).stem and smollm2_path() is not None:
        return load_model("smollm2", backend=backend, threads=args.threads)
    if recorded["name"] == "story model":
        story = load_story_model()
        if story.weights_sha256 == recorded["weights_sha256"]:
            return story
    raise ValueError(f"the trace was recorded with {recorded['name']!r} (weights {recorded['weights_sha256'][:12]}), "
                     "which is neither the shipped story model nor SmolLM2: give the model with --model (a .gguf "
                     "file, a story-model checkpoint or a server URL)")  # fmt: skip
