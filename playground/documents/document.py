"""A session as a document (engine/core/session_file.py is the format): made from the worker's session and what the
window shows, and compared with the last one saved. No Qt: the worker's thread makes documents, the GUI's compares.

What the window gives (its "state", a plain dict the GUI makes and the worker reads):
    {"window": {"prompt", "settings", "chat_format", "conversation"}, "rules": [a rules file's JSON],
     "document": {"path", "modified"}}
"document" is kept in the autosave only (hot exit: which file the session was, and whether it had unsaved changes).
"""

import json
from pathlib import Path

import engine

from ..engines import model_backend

UNTITLED = "Untitled"


def load_request(model) -> dict:
    """{"source": the file or URL the model came from (None: the built-in story model), and the options that
    open it the same way}: the trace's "model" names the weights, this where to find them."""
    request = {"source": getattr(model, "source", "") or None}
    described = model.describe()
    if described.get("url"):
        request["model_name"] = described.get("server_model")
    elif model_backend(model) is not None:  # a GGUF file
        request |= {"backend": model_backend(model), "context_length": model.context_length}
    return request


def make_document(session, model, state: dict, record=None) -> dict:
    """The session file of this session (None: none yet, only what the window shows) on this model; record as for
    Session.trace (the autosave's placeholders). In the worker's thread: the session is that thread's only."""
    trace = None if session is None else session.trace("all", record=record)
    described = (session.model if session is not None else model).describe()
    load = load_request(session.model if session is not None else model)
    document = engine.session_document({**described, "load": load}, trace, state["rules"], state["window"])
    if "document" in state:
        document["document"] = state["document"]
    return document


def fingerprint(state: dict) -> str:
    """What the window shows, as one comparable string (the prompt box, the settings, the rules)."""
    return json.dumps({"window": state["window"], "rules": state["rules"]}, sort_keys=True)


def display_name(path) -> str:
    return UNTITLED if path is None else str(path).replace("\\", "/").rsplit("/", 1)[-1]


def hot_exit_meta(document: dict) -> tuple[Path | None, bool]:
    """(the file the autosaved session was, whether it had unsaved changes) of a hot exit's autosave (a record edited
    by hand: an untitled, modified session)."""
    meta = document.get("document")
    if not isinstance(meta, dict):
        return None, True
    path = meta.get("path")
    return (Path(path) if isinstance(path, str) and path else None), meta.get("modified") is not False
