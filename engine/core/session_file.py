"""The session file: everything a person built in one session, as one document (the window's File > Save session,
its autosave and hot exit; `python -m engine replay` reads one as it reads a trace).

    {"schema": "token-playground/session/1", "saved_utc",
     "model": {the trace's "model" (name, weights_sha256; a server's url and model), "load": {"source": the GGUF file
               or server URL it came from (null: the built-in story model), and what opens it the same way:
               "backend", "context_length", "model_name"}},
     "trace": the session's trace (engine/core/trace.py: its text, every branch of the tree, its settings, every
              action, the steering in force as its "heads" and "vector" actions), or null before the first step,
     "rules": the Rules table, as a rules file holds it (engine/core/rules_file.py), command rules too,
     "window": {"prompt": the prompt box as typed, "settings": the controls' settings, "chat_format": bool,
                "conversation": chat mode's turns (optional: engine.Conversation.to_dict)}}

A session file is data, as a trace is: opening one runs nothing. Its command rules are read, but a command runs only
once a person ticks Allow commands (the window opens every session with it off). Written atomically; read within
MAX_FILE_BYTES and checked whole before anything is used: a ValueError names the first bad field.
"""

import json
from datetime import datetime, timezone
from pathlib import Path

from engine.core.files import atomic_write_bytes
from engine.core.rules_file import rules_from_json
from engine.core.settings import Settings
from engine.core.trace import validate_trace

SCHEMA = "token-playground/session/1"
MAX_FILE_BYTES = 512 * 1024 * 1024  # a tree of 100,000 nodes is ~250 MB of JSON
LOAD_KEYS = {"source": (str, type(None)), "backend": str, "context_length": int, "model_name": (str, type(None))}


def session_document(model: dict, trace: dict | None, rules: list, window: dict) -> dict:
    """A session file's contents: model is the model's describe() with its "load" request; rules a rules file's
    JSON (rules_to_json); window the prompt box, settings and chat format as shown."""
    return {
        "schema": SCHEMA,
        "saved_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model": model,
        "trace": trace,
        "rules": rules,
        "window": window,
    }


def save_session_file(document: dict, path) -> None:
    """Check, then write atomically (a reader sees the old file or the new one, never half)."""
    validate_session_file(document)
    text = json.dumps(document, indent=1, ensure_ascii=False) + "\n"
    atomic_write_bytes(Path(path), text.encode("utf-8"))


def load_session_file(path) -> dict:
    """Read and check a session file; ValueError says what is wrong (its size, its JSON, the first bad field)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ValueError(f"cannot read the session file {path}: {error.strerror or error}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ValueError(f"{path} is over {MAX_FILE_BYTES // 2**20} MB: not a session file")
    try:
        document = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text (byte {error.start}): not a session file") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not JSON: {error.msg} at line {error.lineno} column {error.colno}") from None
    except RecursionError:
        raise ValueError(f"{path} nests arrays or objects too deeply to be a session file") from None
    try:
        validate_session_file(document)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return document


def is_session_file(data) -> bool:
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def validate_session_file(document) -> None:
    """ValueError naming the first field that is missing or malformed."""
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        got = document.get("schema") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"a session file is a JSON object whose 'schema' is {SCHEMA!r}, got {got!r:.80}")
    model = document.get("model")
    if (
        not isinstance(model, dict)
        or not isinstance(model.get("name"), str)
        or not isinstance(model.get("weights_sha256"), str)
    ):
        raise ValueError("session field 'model' must be an object with a string 'name' and 'weights_sha256'")
    _check_load(model.get("load"))
    trace = document.get("trace")
    if trace is not None:
        try:
            validate_trace(trace)
        except ValueError as error:
            raise ValueError(f"session field 'trace': {error}") from None
    try:
        rules_from_json(document.get("rules"), allow_commands=True)  # read, never run: Allow commands decides that
    except ValueError as error:
        raise ValueError(f"session field 'rules': {error}") from None
    _check_window(document.get("window"))


def _check_load(load) -> None:
    if not isinstance(load, dict) or "source" not in load:
        raise ValueError("session field 'model.load' must be an object with a 'source' (a file, a URL, or null)")
    for key, value in load.items():
        kinds = LOAD_KEYS.get(key)
        if kinds is None:
            raise ValueError(
                f"session field 'model.load' has an unknown key {key!r:.40}; its keys are {list(LOAD_KEYS)}"
            )
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise ValueError(f"session field 'model.load.{key}' has the wrong type ({type(value).__name__})")


def _check_window(window) -> None:
    if not isinstance(window, dict):
        raise ValueError("session field 'window' must be an object with 'prompt', 'settings' and 'chat_format'")
    if not isinstance(window.get("prompt"), str):
        raise ValueError("session field 'window.prompt' must be a string")
    if not isinstance(window.get("chat_format"), bool):
        raise ValueError("session field 'window.chat_format' must be true or false")
    if window.get("conversation") is not None:
        from engine.core.chat import Conversation

        try:
            Conversation.from_dict(window["conversation"])
        except ValueError as error:
            raise ValueError(f"session field 'window.conversation': {error}") from None
    settings = window.get("settings")
    if not isinstance(settings, dict):
        raise ValueError("session field 'window.settings' must be an object of settings")
    try:
        Settings(**settings)
    except (TypeError, ValueError) as error:
        raise ValueError(f"session field 'window.settings': {error}") from None
