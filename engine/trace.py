"""Traces: a whole session as JSON data, saved atomically, loaded with validation, and replayed.

A trace is data. Loading or replaying one never runs a tool or a command: the text a tool produced is in
the trace as inserted token ids, and replay forces it like any other inserted text. Replay repeats the
session's action log (sample, force, insert, choose, rewind, settings) on a fresh session of the same
starting settings, so the forward passes run in the same chunks and the steps come out bit for bit the
same.

    {"schema": "token-playground/trace/1", "engine_version", "created_utc",
     "model": {"name", "weights_sha256"}, "prompt", "prompt_token_ids", "settings": {... "seed"},
     "rules": [described], "actions": [...], "steps": [Step.to_dict()...], "text", "stopped", "events"}

"settings" and "rules" are the ones the session started with; a "settings" or "rules" action records each
later change. Replay runs no rule: what a rule inserted is in the log as an insert or choose action.
"""

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .checkpoint import atomic_write_bytes
from .sampling import Settings
from .steps import Step

SCHEMA = "token-playground/trace/1"
ACTION_KINDS = {"sample", "stream", "force", "insert", "choose", "rewind", "settings", "rules"}


def session_trace(session) -> dict:
    from . import __version__

    return {
        "schema": SCHEMA,
        "engine_version": __version__,
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model": _model_description(session.model),
        "prompt": session.prompt,
        "prompt_token_ids": list(session.prompt_ids),
        "settings": session.initial_settings.to_dict(),
        "rules": [rule.describe() for rule in session.initial_rules],
        "actions": json.loads(json.dumps(session.actions)),  # a deep copy of plain data
        "steps": [step.to_dict() for step in session.steps],
        "text": session.text,
        "stopped": session.stopped,
        "events": list(session.events),
    }


def _model_description(model) -> dict:
    scoring = {  # how a server scored forced and inserted tokens (engine/remote.py)
        "echo": "echo: one request echoes the prompt's log-probabilities (one request per token where the echo does not line up)",
        "per position": "one request per position: each forced token read from the top N of a one-token request",
    }
    described = {"name": model.name, "weights_sha256": model.weights_sha256}
    if getattr(model, "remote", False):  # a server: where it was, which model, and how prompts were sent
        described.update(url=model.root, server_model=model.model_id,
                         prompt_format="token ids" if model.capabilities.get("token_id_prompts") else "text",
                         scoring=scoring.get(model.capabilities.get("scoring"), "unknown"))  # fmt: skip
    return described


def save_trace(trace: dict, path) -> None:
    """Validate, then write atomically (a reader sees the old file or the new one, never half)."""
    validate_trace(trace)
    text = json.dumps(trace, indent=1, ensure_ascii=False) + "\n"
    atomic_write_bytes(Path(path), text.encode("utf-8"))


def load_trace(path) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read trace {path}: {error}") from None
    try:
        trace = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not JSON: {error}") from None
    except RecursionError:
        raise ValueError(f"{path} nests arrays or objects too deeply to be a trace") from None
    validate_trace(trace)
    return trace


def validate_trace(trace) -> None:
    """Raise ValueError naming the first field that is missing or malformed."""
    if not isinstance(trace, dict):
        raise ValueError("a trace must be a JSON object")
    if trace.get("schema") != SCHEMA:
        raise ValueError(f"trace field 'schema' must be {SCHEMA!r}, got {trace.get('schema')!r}")
    expected = {
        "engine_version": str, "created_utc": str, "model": dict, "prompt": str, "prompt_token_ids": list,
        "settings": dict, "rules": list, "actions": list, "steps": list, "text": str, "events": list,
    }  # fmt: skip
    for name, kind in expected.items():
        if not isinstance(trace.get(name), kind):
            raise ValueError(f"trace field {name!r} must be a {kind.__name__}, got {type(trace.get(name)).__name__}")
    if "stopped" not in trace or not (trace["stopped"] is None or isinstance(trace["stopped"], str)):
        raise ValueError("trace field 'stopped' must be a string or null")
    model = trace["model"]
    if not isinstance(model.get("name"), str) or not isinstance(model.get("weights_sha256"), str):
        raise ValueError("trace field 'model' must have a string 'name' and 'weights_sha256'")
    if not trace["prompt"]:
        raise ValueError("trace field 'prompt' must not be empty")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in trace["prompt_token_ids"]):
        raise ValueError("trace field 'prompt_token_ids' must be a list of non-negative ints")
    try:
        Settings(**trace["settings"])
    except (TypeError, ValueError) as error:
        raise ValueError(f"trace field 'settings': {error}") from None
    _check_rules("trace field 'rules'", trace["rules"])
    for index, action in enumerate(trace["actions"]):
        _check_action(index, action)
    _check_counts(trace)
    for index, step in enumerate(trace["steps"]):
        try:
            Step.from_dict(step)
        except ValueError as error:
            raise ValueError(f"trace field 'steps[{index}]': {error}") from None
    if trace["text"] != trace["prompt"] + "".join(step["token"] for step in trace["steps"]):
        raise ValueError("trace field 'text' is not the prompt followed by the steps' tokens")


def _check_action(index, action) -> None:
    where = f"trace field 'actions[{index}]'"
    if not isinstance(action, dict) or not isinstance(action.get("kind"), str) or action["kind"] not in ACTION_KINDS:
        raise ValueError(f"{where} must be an object whose kind is one of {sorted(ACTION_KINDS)}")
    kind = action["kind"]

    def ints(value):
        return isinstance(value, list) and value and all(isinstance(i, int) and not isinstance(i, bool) for i in value)

    if kind == "force" and not ints([action.get("token_id")]):
        raise ValueError(f"{where}: a force needs an int 'token_id'")
    if kind == "insert" and (not ints(action.get("token_ids")) or action.get("source") not in ("forced", "rule", "tool")):
        raise ValueError(f"{where}: an insert needs 'token_ids' (ints) and a source forced/rule/tool")
    if kind == "choose" and (
        not isinstance(action.get("options"), list) or not all(isinstance(o, str) for o in action["options"])
        or action.get("source") not in ("forced", "rule")
    ):  # fmt: skip
        raise ValueError(f"{where}: a choose needs 'options' (strings) and a source forced/rule")
    if kind == "rewind" and not (ints([action.get("n")]) and action["n"] > 0):
        raise ValueError(f"{where}: a rewind needs a positive int 'n'")
    if kind == "stream" and not (ints([action.get("n")]) and action["n"] >= 0):
        raise ValueError(f"{where}: a stream needs an int 'n' >= 0 (the tokens it gave)")
    if kind == "rules":
        _check_rules(f"{where}: rules", action.get("rules"))
    if kind == "settings":
        try:
            Settings(**action.get("settings"))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{where}: settings: {error}") from None


def _check_counts(trace: dict) -> None:
    """Counts are bounded by what the trace itself shows: every token a stream gave is either among the
    steps or was rewound, so a claim of 10**30 is refused here rather than run (replay also stops at the
    session's own limits: the context, the end of the text, a rewind of more steps than there are)."""
    streamed = sum(a["n"] for a in trace["actions"] if a["kind"] == "stream")
    rewound = sum(a["n"] for a in trace["actions"] if a["kind"] == "rewind")
    if streamed > len(trace["steps"]) + rewound:
        raise ValueError(f"trace field 'actions': its streams claim {streamed} tokens, more than the "
                         f"{len(trace['steps'])} steps and {rewound} rewound tokens it holds")


def _check_rules(where: str, rules) -> None:
    if not isinstance(rules, list):
        raise ValueError(f"{where} must be a list of rule descriptions")
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict) or not isinstance(rule.get("when"), str) or "action" not in rule:
            raise ValueError(f"{where}[{index}] must describe a rule (when, action)")


@dataclass(frozen=True)
class ReplayReport:
    identical: bool
    steps: int  # steps compared
    first_difference: dict | None  # {"step", "field", "token", "recorded", "replayed"} or None
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        if self.identical:
            return f"identical: all {self.steps} steps replayed bit for bit"
        d = self.first_difference
        if d is None:  # every step agreed, but an action could not be replayed
            return next(note for note in self.notes if note.startswith("replay stopped"))
        token = d["token"]
        tokens = f"{token[0]!r}" if token[0] == token[1] else f"recorded {token[0]!r}, replayed {token[1]!r}"
        return (f"differs at step {d['step']} ({tokens}), {d['field']}: "
                f"recorded {_shown(d['recorded'])}, replayed {_shown(d['replayed'])}")  # fmt: skip


def _shown(value) -> str:
    """A differing value as a person compares it: floats with every digit that differs."""
    return repr(value) if not isinstance(value, float) else f"{value:.17g}"


def replay(trace: dict, model) -> ReplayReport:
    """Re-run the trace's actions on a fresh session (no rules: what they inserted is in the actions) and
    compare every step with the recorded one."""
    return replay_session(trace, model)[1]


def replay_session(trace: dict, model):
    """-> (the replayed Session, its ReplayReport); the window keeps the session to continue from."""
    from .session import Session

    validate_trace(trace)
    notes = []
    recorded_model = trace["model"]
    if recorded_model["weights_sha256"] != model.weights_sha256 or recorded_model.get("url") != getattr(model, "root", None):
        notes.append(f"recorded with {recorded_model['name']} {recorded_model['weights_sha256'][:12]}, "
                     f"replayed with {model.name} {model.weights_sha256[:12]}")  # fmt: skip
    try:
        session = Session(model, trace["prompt"], **trace["settings"])
    except ValueError as error:  # another model's trace: say so first, then why it cannot start
        raise ValueError(" ".join([*notes, f"replay cannot start: {error}"])) from None
    if session.prompt_ids != trace["prompt_token_ids"]:
        difference = {"step": 0, "field": "prompt_token_ids", "recorded": trace["prompt"], "replayed": trace["prompt"]}
        return session, ReplayReport(False, 0, difference, tuple(notes))
    stopped = None
    for index, action in enumerate(trace["actions"]):
        try:
            _perform(session, action)
        except ValueError as error:
            stopped = f"replay stopped at action {index} ({action['kind']}): {error}"
            notes.append(stopped)
            break
    report = _compare(trace["steps"], [step.to_dict() for step in session.steps], notes)
    if stopped and report.identical:  # the steps agree, but the trace holds an action this model refuses
        report = ReplayReport(False, report.steps, None, tuple(notes))
    if getattr(model, "remote", False) and not report.identical:
        notes.append("the server sampled this replay; inference servers do not always promise the same "
                     "tokens for the same seed (batching, prefix caches, threads)")  # fmt: skip
        report = ReplayReport(report.identical, report.steps, report.first_difference, tuple(notes))
    return session, report


def _compare(recorded: list[dict], replayed: list[dict], notes) -> ReplayReport:
    for index, (old, new) in enumerate(zip(recorded, replayed)):
        if old != new:
            field, was, now = _first_different(old, new)
            difference = {"step": index, "field": field, "token": (old["token"], new["token"]),
                          "recorded": was, "replayed": now}  # fmt: skip
            return ReplayReport(False, index, difference, tuple(notes))
    if len(recorded) != len(replayed):
        index = min(len(recorded), len(replayed))
        token = lambda steps: steps[index]["token"] if index < len(steps) else None  # noqa: E731
        difference = {"step": index, "field": "step count", "token": (token(recorded), token(replayed)),
                      "recorded": len(recorded), "replayed": len(replayed)}  # fmt: skip
        return ReplayReport(False, index, difference, tuple(notes))
    return ReplayReport(True, len(recorded), None, tuple(notes))


def _first_different(old, new, path: str = "") -> tuple[str, object, object]:
    """(where, recorded value, replayed value) of the first leaf that differs, e.g. 'candidates.raw[3]'."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old:
            if old[key] != new.get(key):
                return _first_different(old[key], new.get(key), f"{path}.{key}" if path else key)
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for position, (a, b) in enumerate(zip(old, new)):
            if a != b:
                return _first_different(a, b, f"{path}[{position}]")
    return path, old, new


def _perform(session, action: dict) -> None:
    kind = action["kind"]
    if kind == "sample":
        session.step()
    elif kind == "stream":  # one streaming request that gave n tokens before something intervened
        session.stream_generation = True
        for _ in range(action["n"]):
            if session.step() is None:  # the session's own limits bound a count the file claims
                break
        session.interrupt()
        session.stream_generation = False
    elif kind == "force":
        session.force_token(action["token_id"])
        session.step()
    elif kind == "insert":
        session.insert_tokens(action["token_ids"], action["source"])
    elif kind == "choose":
        session.choose(action["options"], action["source"])
    elif kind == "settings":
        session.update_settings(**action["settings"])
    elif kind == "rules":
        pass  # replay runs no rule: what the rules inserted follows in the log as insert / choose actions
    else:
        session.rewind(action["n"])
