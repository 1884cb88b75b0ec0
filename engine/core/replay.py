"""Replay: a trace's action log repeated on a fresh session, every step compared with the recorded one.

Replay repeats the log (sample, stream, force, insert, choose, rewind, settings, and the tree's goto,
expand, delete, name, pin, undo) on a session of the same
starting settings, so the forward passes run in the same chunks and the steps come out bit for bit the
same on the same machine. It runs no rule and no tool: what they inserted is in the log.

The work a trace may ask for is bounded by what it holds: a tree only grows (deleted nodes keep their ids), so
replay makes no more nodes than the trace's tree had ("tree_size"). An action naming a node beyond it is refused
before any work; an expansion's budget is cut to that size (an expansion recorded reaching no more nodes than
the tree holds, and a budget at least that big makes the very same ones); a replay whose tree outgrows it
stops there. `cancelled()` -> True (the window: Reset, closing; the command line: Ctrl+C) stops it between
actions and levels, and `progress(done, total)` hears of each action done: a trace's actions may cost far more
than its bytes (each steering change reads the whole text again), so a long replay shows how far it is.
"""

from dataclasses import replace

from engine.core.session import Session
from engine.core.steps import Step
from engine.core.trace import SCHEMA_V1, SCHEMA_V2, WITH_TREE, settings_as_recorded, validate_trace
from engine.core.verdict import Comparison, ReplayReport

MADE_WITHOUT_SIZE = 10_000  # nodes an active-branch trace without "tree_size" (older files) may add to its own


class OtherModelError(ValueError):
    """A trace recorded on another model than the one it was to replay on (other weights, another server), or
    naming token ids the model does not have. Its message is one sentence naming both models; `recorded` is the
    trace's "model" (what the window looks for to offer opening it)."""

    def __init__(self, message: str, recorded: dict):
        super().__init__(message)
        self.recorded = recorded


def replay(trace: dict, model, cancelled=None, other_model: bool = False, progress=None) -> ReplayReport:
    """Re-run the trace's actions on a fresh session (no rules: what they inserted is in the actions) and
    compare every step with the recorded one. A trace of another model raises OtherModelError, unless
    other_model=True: then it replays there, to see where that model differs (a note names both)."""
    return replay_session(trace, model, cancelled, other_model, progress)[1]


def replay_session(trace: dict, model, cancelled=None, other_model: bool = False, progress=None):
    """-> (the replayed Session, its ReplayReport); the window keeps the session to continue from.
    cancelled() -> True stops the replay between two actions (or an expansion's levels): a note says so."""
    validate_trace(trace)
    most_nodes = nodes_allowed(trace)
    _check_named_nodes(trace["actions"], most_nodes)
    notes = []
    if not same_model(trace["model"], model.describe()):
        if not other_model:
            raise OtherModelError(other_model_sentence(trace["model"], model.describe()), trace["model"])
        notes.append(f"recorded with {trace['model']['name']} {trace['model']['weights_sha256'][:12]}, "
                     f"replayed with {model.name} {model.weights_sha256[:12]}")  # fmt: skip
    _check_ids(trace, model)
    try:
        session = Session(model, trace["prompt"], **settings_as_recorded(trace, trace["settings"]))
    except ValueError as error:  # another model's trace: say so first, then why it cannot start
        raise ValueError(" ".join([*notes, f"replay cannot start: {error}"])) from None
    session.conversation = trace.get("conversation")  # a chat's turns: kept with the session, not replayed
    if session.prompt_ids != trace["prompt_token_ids"]:
        difference = {"step": 0, "field": "prompt_token_ids", "token": (None, None),
                      "recorded": trace["prompt_token_ids"], "replayed": list(session.prompt_ids)}  # fmt: skip
        return session, ReplayReport(False, 0, difference, tuple(notes))
    stopped = None
    for index, action in enumerate(trace["actions"]):
        try:
            if cancelled is not None and cancelled():
                raise ValueError(f"cancelled, {len(trace['actions']) - index} of {len(trace['actions'])} actions left")
            if action["kind"] == "settings":  # as the trace's engine ran them (its greedy)
                action = dict(action, settings=settings_as_recorded(trace, action["settings"]))
            elif action["kind"] == "expand":  # the same nodes, at most as many as the trace's tree holds
                action = dict(action, budget=min(action["budget"], most_nodes - 1), cancelled=cancelled)
            _perform(session, action)
            if len(session.tree.nodes) > most_nodes:
                raise ValueError(f"the replay has made {len(session.tree.nodes)} nodes, more than the "
                                 f"{most_nodes} of the trace's tree")  # fmt: skip
            if progress is not None:
                progress(index + 1, len(trace["actions"]))
        except ValueError as error:
            stopped = f"replay stopped at action {index} ({action['kind']}): {error}"
            notes.append(stopped)
            break
    as_recorded = {SCHEMA_V1: Step.to_v1_dict, SCHEMA_V2: Step.to_v2_dict}.get(trace["schema"], Step.to_dict)
    comparison = Comparison()
    report = _compare(trace["steps"], [as_recorded(step) for step in session.steps], notes, comparison)
    if report.first_difference is None and "tree" in trace and trace.get("branches", "all") == "all":
        nodes = len(trace["tree"]["nodes"]) - 1
        report = _compare_tree(trace["tree"]["nodes"], session, notes, comparison) or ReplayReport(
            comparison.exact, report.steps, None, report.notes, nodes, comparison.rounding
        )
    if stopped and report.identical:  # the steps agree, but the trace holds an action this model refuses
        report = ReplayReport(False, report.steps, None, tuple(notes))
    if not model.capabilities.local_sampling and not report.same_tokens:
        notes.append("the server sampled this replay; inference servers do not always promise the same "
                     "tokens for the same seed (batching, prefix caches, threads)")  # fmt: skip
        report = replace(report, notes=tuple(notes))
    return session, report


def same_model(recorded: dict, here: dict) -> bool:
    """Whether a trace's "model" is this model's describe(): the same weights, and the same server (if any)."""
    return (recorded["weights_sha256"], recorded.get("url"), recorded.get("server_model")) == (
        here["weights_sha256"], here.get("url"), here.get("server_model"))  # fmt: skip


def other_model_sentence(recorded: dict, loaded: dict) -> str:
    """'This trace was recorded with X (weights ...), and the loaded model is Y (weights ...): replay it on X'."""
    return f"{recorded_on(recorded)}, and the loaded model is {_named(loaded)}: replay it on {recorded['name']}"


def recorded_on(recorded: dict) -> str:
    """'This trace was recorded with SmolLM2 (weights 3f2a1b0c9d8e)': the start of OtherModelError's sentence."""
    return f"This trace was recorded with {_named(recorded)}"


def _named(described: dict) -> str:
    if described.get("url"):
        return f"{described.get('server_model') or described['name']} at {described['url']}"
    return f"{described['name']} (weights {described['weights_sha256'][:12]})"


def _check_ids(trace: dict, model) -> None:
    """OtherModelError for a token id the model does not have (another tokenizer's, or an edited trace)."""
    vocab = model.vocab_size
    if not vocab:
        return  # a server that does not say: it refuses an id itself
    named = [("prompt_token_ids", trace["prompt_token_ids"])]
    for index, action in enumerate(trace["actions"]):
        named.append((f"actions[{index}]", action.get("token_ids") or [action.get("token_id", 0)]))
    for index, step in enumerate(trace["steps"]):
        named.append((f"steps[{index}]", [step.get("token_id", 0), *step.get("candidates", {}).get("token_ids", ())]))
    for where, ids in named:
        beyond = next((i for i in ids if isinstance(i, int) and i >= vocab), None)
        if beyond is not None:
            raise OtherModelError(f"{recorded_on(trace['model'])}, and its token id {beyond} ({where}) is not in the "
                                  f"loaded {_named(model.describe())}, whose vocabulary has {vocab} tokens",
                                  trace["model"])  # fmt: skip


def nodes_allowed(trace: dict) -> int:
    """The nodes (the root too) a replay of this trace may make: its whole tree's; a trace without a tree
    (schema 1-3) is one branch, each step taken once (those rewound too)."""
    if trace["schema"] not in WITH_TREE:
        return 1 + len(trace["steps"]) + sum(a["n"] for a in trace["actions"] if a["kind"] == "rewind")
    held = len(trace["tree"]["nodes"])
    if trace.get("branches", "all") == "all":
        return held
    return trace.get("tree_size", held + MADE_WITHOUT_SIZE)


def _check_named_nodes(actions: list[dict], most_nodes: int) -> None:
    """ValueError, before any work, for an action naming a node the trace's tree never had."""
    for index, action in enumerate(actions):
        if action["kind"] in ("goto", "delete", "name", "pin") and action["node"] >= most_nodes:
            raise ValueError(f"trace field 'actions[{index}]': a {action['kind']} names node {action['node']}, "
                             f"but the trace's tree holds {most_nodes} nodes")  # fmt: skip


def _compare(recorded: list[dict], replayed: list[dict], notes, comparison: Comparison) -> ReplayReport:
    for index, (old, new) in enumerate(zip(recorded, replayed)):
        found = comparison.differs(old, new, {"step": index})
        if found is not None:
            field, was, now = found
            difference = {"step": index, "field": field, "token": (old["token"], new["token"]),
                          "recorded": was, "replayed": now}  # fmt: skip
            return ReplayReport(False, index, difference, tuple(notes), rounding=comparison.rounding)
    if len(recorded) != len(replayed):
        index = min(len(recorded), len(replayed))
        token = lambda steps: steps[index]["token"] if index < len(steps) else None  # noqa: E731
        difference = {"step": index, "field": "step count", "token": (token(recorded), token(replayed)),
                      "recorded": len(recorded), "replayed": len(replayed)}  # fmt: skip
        return ReplayReport(False, index, difference, tuple(notes), rounding=comparison.rounding)
    return ReplayReport(comparison.exact, len(recorded), None, tuple(notes), rounding=comparison.rounding)


def _compare_tree(recorded: list[dict], session, notes, comparison: Comparison) -> ReplayReport | None:
    """Every branch, node by node (ids follow the order the nodes were made, so replay makes the same ones):
    the first node that differs beyond rounding, named with its branch; None when all agree."""
    replayed = session.tree.nodes
    for node in recorded[1:]:
        index = node["id"]
        new = replayed[index] if index < len(replayed) else None
        mine = None if new is None else {"parent": new.parent, "step": new.step.to_dict(), **session.tree.marks(index)}
        branch = [index]
        while recorded[branch[0]]["parent"]:
            branch.insert(0, recorded[branch[0]]["parent"])
        if mine is None:
            found = ("node", index, None)
        else:
            found = comparison.differs(node, {"id": index, **mine}, {"step": len(branch) - 1, "node": index})
        if found is not None:
            field, was, now = found
            difference = {"step": len(branch) - 1, "node": index, "branch": branch, "field": field,
                          "token": (node["step"]["token"], None if new is None else new.step.token),
                          "recorded": was, "replayed": now}  # fmt: skip
            return ReplayReport(False, len(session.steps), difference, tuple(notes), rounding=comparison.rounding)
    if len(replayed) != len(recorded):
        difference = {"step": None, "node": len(recorded), "branch": [], "field": "node count", "token": (None, None),
                      "recorded": len(recorded), "replayed": len(replayed)}  # fmt: skip
        return ReplayReport(False, len(session.steps), difference, tuple(notes), rounding=comparison.rounding)
    return None


def _perform(session, action: dict) -> None:
    kind = action["kind"]
    if kind == "sample":
        session.step()
    elif kind == "stream":  # one streaming request that gave n tokens before something intervened
        for _ in range(action["n"]):
            if session.step(stream=True) is None:  # the session's own limits bound a count the file claims
                break
        session.interrupt()
    elif kind == "force":
        session.force_token(action["token_id"])
        session.step()
    elif kind == "insert":
        session.insert_tokens(action["token_ids"], action["source"], action.get("heal", True))
    elif kind == "choose":
        session.choose(action["options"], action["source"])
    elif kind == "settings":
        session.update_settings(**action["settings"])
    elif kind in ("rules", "thinking"):
        pass  # replay runs no rule nor budget: what they inserted follows in the log as insert / choose actions
    elif kind == "goto":
        session.goto(action["node"])
    elif kind == "expand":
        from engine.core.expand import Expansion

        expansion = {key: action[key] for key in Expansion.__dataclass_fields__}
        if session.expand(**expansion, cancelled=action["cancelled"]).cancelled:
            raise ValueError("cancelled during an expansion")
    elif kind == "delete":
        session.delete_branch(action["node"])
    elif kind == "name":
        session.name_branch(action["node"], action["name"])
    elif kind == "pin":
        session.pin_branch(action["node"], action["pinned"])
    elif kind == "undo":
        session.undo_tree_edit()
    elif kind == "heads":
        session.steer_heads(action["scales"])
    elif kind == "vector":
        from engine.core.steering import vector_from_action

        vector = vector_from_action(session.model, action)
        session.steer_vector(vector, action["layers"], action["strength"])
    else:
        session.rewind(action["n"])
