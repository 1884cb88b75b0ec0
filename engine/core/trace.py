"""Traces: a whole session as JSON data, saved atomically, loaded with validation (replayed in replay.py).

A trace is data. Loading or replaying one never runs a tool or a command: the text a tool produced is in
the trace as inserted token ids, and replay forces it like any other inserted text. Replay repeats the
session's action log (sample, force, insert, choose, rewind, settings) on a fresh session of the same
starting settings, so the forward passes run in the same chunks and the steps come out bit for bit the
same.

    {"schema": "token-playground/trace/5", "engine_version", "created_utc",
     "model": {"name", "weights_sha256"}, "prompt", "prompt_text", "prompt_token_ids", "settings": {... "seed"},
     "settings_at_end" (optional: in force after the last step), "rules": [described], "actions": [...], "steps": [Step.to_dict()...], "tree": {"nodes": [...]},
     "tree_size", "path": [the node of each step], "text", "stopped", "events",
     "conversation" (optional: a chat's Conversation.to_dict(), the turns the text was written in)}

"tree" holds every branch the session took (engine/core/tree.py): nodes with an id and a parent id, each with
its step; "path" the active branch. A "goto" action puts another branch back; "expand" grows the tree
(engine/core/expand.py); "delete", "name" and "pin" edit it, "undo" takes back the last of those; "heads" scales attention heads (Session.steer_heads); "vector" adds a
direction to the residual stream (Session.steer_vector). "branches": "active" marks a trace exported with
the active branch alone (its tree is that one path, numbered 1..n; the action log is whole and replays;
"tree_size" says how many nodes the whole tree had, which bounds the nodes replay may make). Schema 3 had no tree: it opens
as one branch (its steps).

A step's "candidates" are {"token_ids", "tokens", "raw", "stages": {stage name: probabilities}, "removed_by":
[stage name or null]}, the stages in the chain's order; a step also records "stage_ranks" (the token's rank
after each stage) and "xtc_draw". "settings" holds the whole chain: every stage's parameters and their order
("samplers"). Schema 2 had no removed_by, stage_ranks, xtc_draw or sampler settings; schema 1 had fixed stage
fields ("temperature", "top_k", "final"). Both still open, and replay compares them in their own form.

Schema 5 records greedy decoding (temperature 0) as the chain's last stage, "greedy", after every other
(settings "greedy_at": "end"): before it the temperature stage kept the best token and every later stage saw
that one. A trace of schema 1-4 replays with that old greedy ("greedy_at": "temperature"), bit for bit.

"settings" and "rules" are the ones the session started with; a "settings" or "rules" action records each
later change. Replay runs no rule: what a rule inserted is in the log as an insert or choose action.
"""

import json
from datetime import datetime, timezone
from pathlib import Path

from engine.core import __version__
from engine.core.chat import Conversation
from engine.core.checks import MAX_TOKEN_CHARS
from engine.core.files import atomic_write_bytes
from engine.core.settings import Settings
from engine.core.steps import Step
from engine.core.tree import check_tree

SCHEMA = "token-playground/trace/5"  # 5: greedy is the chain's last stage (settings greedy_at "end")
SCHEMA_V4 = "token-playground/trace/4"  # the tree of every branch, and goto actions: greedy at temperature
SCHEMA_V3 = (
    "token-playground/trace/3"  # every sampler stage, its order, what removed each candidate: opens as one branch
)
SCHEMA_V2 = "token-playground/trace/2"  # a step's candidates hold every stage by name: still opens and replays
SCHEMA_V1 = "token-playground/trace/1"  # fixed stage fields (temperature, top_k, final): still opens and replays
SCHEMAS = (SCHEMA, SCHEMA_V4, SCHEMA_V3, SCHEMA_V2, SCHEMA_V1)
WITH_TREE = (SCHEMA, SCHEMA_V4)
ACTION_KINDS = {"sample", "stream", "force", "insert", "choose", "rewind", "goto", "settings", "rules", "expand",
                "delete", "name", "pin", "undo", "heads", "vector", "thinking"}  # fmt: skip
BRANCHES = ("all", "active")  # a trace's tree: every branch, or only the one the text is on


def session_trace(session, branches: str = "all", record=None) -> dict:
    """record(step) -> what the trace holds for a step (Step.to_dict; the window's autosave passes one that
    reuses what it wrote before, so a long session is not encoded again after every run)."""
    record = record or Step.to_dict
    if branches not in BRANCHES:
        raise ValueError(f"branches must be one of {BRANCHES}, got {branches!r:.40}")
    active = branches == "active"
    return {
        "schema": SCHEMA,
        "engine_version": __version__,
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model": session.model.describe(),
        "prompt": session.prompt,
        "prompt_text": session.prompt_text,  # the prompt less the end token healing cut (the steps spell it)
        "prompt_token_ids": list(session.prompt_ids),
        "settings": session.initial_settings.to_dict(),
        "settings_at_end": session.settings.to_dict(),  # in force after the last step (what a viewer shows)
        "rules": [rule.describe() for rule in session.initial_rules],
        "actions": json.loads(json.dumps(session.actions)),  # a deep copy of plain data
        "steps": [record(step) for step in session.steps],
        "branches": branches,
        "tree": session.tree.to_dict(only=session.path if active else None, record=record),
        "tree_size": len(session.tree.nodes),  # the whole tree's nodes: bounds what replay may make
        "path": list(range(1, len(session.path) + 1)) if active else list(session.path),
        "text": session.text,
        "stopped": session.stopped,
        "events": list(session.events),
        **({"conversation": session.conversation} if session.conversation is not None else {}),
    }


def save_trace(trace: dict, path) -> None:
    """Validate, then write atomically (a reader sees the old file or the new one, never half)."""
    validate_trace(trace)
    text = json.dumps(trace, indent=1, ensure_ascii=False) + "\n"
    atomic_write_bytes(Path(path), text.encode("utf-8"))


MAX_TRACE_BYTES = 512 * 1024 * 1024  # a trace file, at most (as a session file: a tree of 100,000 nodes is ~250 MB)


def load_trace(path) -> dict:
    """Read and check a trace file of at most MAX_TRACE_BYTES (a 2 GB one took 4.2 GB before "not JSON")."""
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_TRACE_BYTES + 1)
        if len(raw) > MAX_TRACE_BYTES:
            raise ValueError(f"{path} is over {MAX_TRACE_BYTES >> 20} MB: not a trace")
        text = raw.decode("utf-8")
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
    if trace.get("schema") not in SCHEMAS:
        raise ValueError(f"trace field 'schema' must be {SCHEMA!r} (or {SCHEMA_V4!r}, {SCHEMA_V3!r}, "
                         f"{SCHEMA_V2!r}, {SCHEMA_V1!r}), got {trace.get('schema')!r:.80}")  # fmt: skip
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
    most = MAX_TOKEN_CHARS * (len(trace["prompt_token_ids"]) + 1)  # + 1: what healing left for the model to spell
    if len(trace["prompt"]) > most:  # a text no tokenizer makes of so few tokens (an edited or hostile file)
        raise ValueError(f"trace field 'prompt' holds {len(trace['prompt']):,} characters for "
                         f"{len(trace['prompt_token_ids']):,} tokens: more than {MAX_TOKEN_CHARS} a token")  # fmt: skip
    if len(trace["text"]) > len(trace["prompt"]) + MAX_TOKEN_CHARS * len(trace["steps"]):
        raise ValueError(f"trace field 'text' holds more than {MAX_TOKEN_CHARS} characters a step beyond its prompt")
    for name in ("settings", "settings_at_end") if "settings_at_end" in trace else ("settings",):
        try:
            Settings(**trace[name])
        except (TypeError, ValueError) as error:
            raise ValueError(f"trace field {name!r}: {error}") from None
    _check_rules("trace field 'rules'", trace["rules"])
    if trace.get("conversation") is not None:
        try:
            Conversation.from_dict(trace["conversation"])
        except ValueError as error:
            raise ValueError(f"trace field 'conversation': {error}") from None
    for index, action in enumerate(trace["actions"]):
        _check_action(index, action)
    _check_counts(trace)
    for index, step in enumerate(trace["steps"]):
        try:
            Step.from_dict(step)
        except ValueError as error:
            raise ValueError(f"trace field 'steps[{index}]': {error}") from None
    if trace["schema"] in WITH_TREE:
        check_tree(trace.get("tree"))
        path = trace.get("path")
        if (
            not isinstance(path, list)
            or len(path) != len(trace["steps"])
            or any(
                not isinstance(i, int) or isinstance(i, bool) or not 0 < i < len(trace["tree"]["nodes"]) for i in path
            )
        ):
            raise ValueError("trace field 'path' must hold a node of the tree for each step")
        size = trace.get("tree_size", len(trace["tree"]["nodes"]))
        if not isinstance(size, int) or isinstance(size, bool) or size < len(trace["tree"]["nodes"]):
            raise ValueError("trace field 'tree_size' must be an int, at least the nodes its tree holds")
        if trace.get("branches", "all") not in BRANCHES:
            raise ValueError(f"trace field 'branches' must be one of {BRANCHES}, got {trace['branches']!r:.40}")
        if trace.get("branches") == "active" and (
            len(trace["tree"]["nodes"]) != len(path) + 1 or path != list(range(1, len(path) + 1))
        ):
            raise ValueError("trace field 'tree': a trace of the active branch holds that branch alone")
    prompt_text = trace.get("prompt_text", trace["prompt"])  # schema 3: the prompt less what healing cut
    if not isinstance(prompt_text, str) or not trace["prompt"].startswith(prompt_text):
        raise ValueError("trace field 'prompt_text' must be the prompt or a start of it")
    if trace["text"] != prompt_text + "".join(step["token"] for step in trace["steps"]):
        raise ValueError("trace field 'text' is not the prompt followed by the steps' tokens")


def settings_as_recorded(trace: dict, settings: dict) -> dict:
    """Settings of this trace (its starting ones, or a "settings" action's) as its engine ran them: before
    schema 5 greedy kept the best token at the temperature stage."""
    return settings if trace["schema"] == SCHEMA else {**settings, "greedy_at": "temperature"}


def _check_action(index, action) -> None:
    where = f"trace field 'actions[{index}]'"
    if not isinstance(action, dict) or not isinstance(action.get("kind"), str) or action["kind"] not in ACTION_KINDS:
        raise ValueError(f"{where} must be an object whose kind is one of {sorted(ACTION_KINDS)}")
    kind = action["kind"]

    def ints(value):
        return isinstance(value, list) and value and all(isinstance(i, int) and not isinstance(i, bool) for i in value)

    if kind == "force" and not ints([action.get("token_id")]):
        raise ValueError(f"{where}: a force needs an int 'token_id'")
    if kind == "insert" and (
        not ints(action.get("token_ids"))
        or action.get("source") not in ("forced", "rule", "tool")
        or not isinstance(action.get("heal", True), bool)
    ):
        raise ValueError(
            f"{where}: an insert needs 'token_ids' (ints), a source forced/rule/tool and heal true or false"
        )
    if kind == "choose" and (
        not isinstance(action.get("options"), list) or not all(isinstance(o, str) for o in action["options"])
        or action.get("source") not in ("forced", "rule")
    ):  # fmt: skip
        raise ValueError(f"{where}: a choose needs 'options' (strings) and a source forced/rule")
    if kind == "rewind" and not (ints([action.get("n")]) and action["n"] > 0):
        raise ValueError(f"{where}: a rewind needs a positive int 'n'")
    if kind == "goto" and not (ints([action.get("node")]) and action["node"] >= 0):
        raise ValueError(f"{where}: a goto needs an int 'node' >= 0")
    if kind in ("delete", "name", "pin") and not (ints([action.get("node")]) and action["node"] >= 1):
        raise ValueError(f"{where}: a {kind} needs an int 'node' >= 1")
    if kind == "name" and not isinstance(action.get("name"), str):
        raise ValueError(f"{where}: a name needs a string 'name'")
    if kind == "pin" and not isinstance(action.get("pinned"), bool):
        raise ValueError(f"{where}: a pin needs 'pinned' true or false")
    if kind == "heads" and not (
        isinstance(action.get("scales"), list)
        and all(
            isinstance(e, list) and len(e) == 3 and ints(e[:2]) and isinstance(e[2], (int, float))
            for e in action["scales"]
        )
    ):
        raise ValueError(f"{where}: a heads action needs 'scales': a list of [layer, head, factor]")
    if kind == "vector":
        from engine.core.steering import check_vector_action

        check_vector_action(action, where)
    if kind == "expand":
        from engine.core.expand import Expansion

        try:
            Expansion(**{key: action.get(key) for key in Expansion.__dataclass_fields__})
        except ValueError as error:
            raise ValueError(f"{where}: expand: {error}") from None
    if kind == "stream" and not (ints([action.get("n")]) and action["n"] >= 0):
        raise ValueError(f"{where}: a stream needs an int 'n' >= 0 (the tokens it gave)")
    if kind == "rules":
        _check_rules(f"{where}: rules", action.get("rules"))
    if kind == "thinking" and action.get("budget") is not None and not (
        isinstance(action["budget"], list) and len(action["budget"]) == 3
        and all(isinstance(m, str) for m in action["budget"][:2]) and ints(action["budget"][2:])
    ):  # fmt: skip
        raise ValueError(f"{where}: a thinking action needs 'budget': null or [opening, closing, tokens]")
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
        raise ValueError(
            f"trace field 'actions': its streams claim {streamed} tokens, more than the "
            f"{len(trace['steps'])} steps and {rewound} rewound tokens it holds"
        )


def _check_rules(where: str, rules) -> None:
    if not isinstance(rules, list):
        raise ValueError(f"{where} must be a list of rule descriptions")
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict) or not isinstance(rule.get("when"), str) or "action" not in rule:
            raise ValueError(f"{where}[{index}] must describe a rule (when, action)")
