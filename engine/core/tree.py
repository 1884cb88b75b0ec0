"""The tree of a session's branches: every step the session ever took, kept when it rewinds and takes others.

A node is one step under its parent (the root is the prompt). The session's steps are always one path of
the tree, from the root down (`Session.path`); a rewind moves up it, and a step taken from there is a new
child, or the same node again where it is the same token (the same text is one branch; the node keeps the
record and state it was first made with, which goto puts back).
A node keeps what the session needs to stand after its step again (`Session.goto`): the random draws
taken before and after it, token healing's state, and the settings epoch it was taken under.

Besides the steps, a tree holds what a person made of it: a branch's name, pins (a pinned branch cannot be
deleted), deleted nodes (their ids stay: the action log names nodes by id), and the nodes an expansion
(engine/core/expand.py) added that nobody has walked into yet. Each of those edits (delete, name, pin) can be
undone, the last first: a deleted branch comes back with its ids, names and marks (`Tree.undo`).

In a trace (schema 4) the tree is `"tree": {"nodes": [{"id", "parent", "step"}...]}`, node 0 the root with
no parent and no step, each parent an earlier node; a node may also hold "name" (text), and "pinned",
"expanded", "raw" (an expansion weighed it by the raw model) and "deleted" (true).
"""

from dataclasses import dataclass, replace

import numpy as np

from engine.core.steps import Step

MAX_NAME = 200  # characters in a branch's name
INSERTED = ("forced", "rule", "tool")  # the sources of inserted text (steps not drawn)
MARKS = {"pinned": bool, "expanded": bool, "raw": bool, "deleted": bool, "name": str}  # a trace node's optional keys


@dataclass(frozen=True, eq=False)
class Node:
    id: int
    parent: int | None  # None: the root
    step: Step | None  # None: the root
    draws_before: int = 0  # random draws the session had taken before this step
    draws_after: int = 0
    healing_before: bytes | None = None  # token healing's bytes still to spell, before and after it
    healing_after: bytes | None = None
    epoch: object = None  # the session's settings epoch the step was taken under
    steering: tuple = (None, None)  # the (head_table, residual_table) the step was read under (None: as trained)


@dataclass(frozen=True)
class NodeView:
    """One node as the window draws it (an immutable snapshot the worker sends)."""

    id: int
    parent: int | None
    token: str
    probability: float | None  # the model's own probability of the step (temperature 1, before any sampler): one
    #                            measure for every node, drawn, inserted or expanded, under whatever settings
    source: str  # the step's: "model", "forced", "rule", "tool" or "expanded"
    name: str = ""
    pinned: bool = False
    expanded: bool = False  # added by an expansion, not walked into yet
    deleted: bool = False
    drawn: float | None = None  # the sampler chain's final probability where it drew the step (None: not drawn)


@dataclass(frozen=True)
class TreeEdit:
    """One edit a person made to the tree (delete, name or pin), with what `Tree.undo` needs to take it back."""

    kind: str  # "delete", "name" or "pin"
    node: int
    before: object = None  # name: the name it had ("": none); pin: whether it was pinned; delete: its index
    #                        among its parent's children
    nodes: tuple[int, ...] = ()  # delete: the nodes deleted, parents first
    names: tuple[tuple[int, str], ...] = ()  # delete: the names they had
    expanded: tuple[int, ...] = ()  # delete: those an expansion had added that nobody had walked into


class Tree:
    def __init__(self):
        self.nodes: list[Node] = [Node(0, None, None)]
        self._children: dict[int, list[int]] = {0: []}
        self.names: dict[int, str] = {}
        self.pinned: set[int] = set()
        self.expanded: set[int] = set()  # made by an expansion, until a person walks into it
        self.raw: set[int] = set()  # expanded nodes weighed by the raw model (kept after they are walked into)
        self.deleted: set[int] = set()
        self.touched: list[int] = []  # every node made or changed, in order (the window asks what is new)
        self.edits: list[TreeEdit] = []  # the edits undo can take back, the last last

    def children(self, node_id: int) -> list[int]:
        return list(self._children[node_id])

    def add(self, parent: int, step: Step, expanded: bool = False, raw: bool = False, **state) -> int:
        """The node of this step under `parent`: the existing child with the same token (the same text: one
        branch, as a loom shows it; it keeps its first record and state), or a new one. expanded: made by an
        expansion (raw: that weighed it by the raw model), marked until someone walks into it."""
        for child in self._children[parent]:
            if self.nodes[child].step.token_id == step.token_id:
                return child
        node = Node(len(self.nodes), parent, step, **state)
        self.nodes.append(node)
        self._children[parent].append(node.id)
        self._children[node.id] = []
        if expanded:
            self.expanded.add(node.id)
            if raw:
                self.raw.add(node.id)
        self.touched.append(node.id)
        return node.id

    def replace_step(self, node_id: int, step: Step) -> None:
        """A node's record completed later (a server's streamed step, once its token id is known)."""
        self.nodes[node_id] = replace(self.nodes[node_id], step=step)
        self.touched.append(node_id)

    def walked(self, node_id: int) -> None:
        """A person's text went through this node: it is no longer an unvisited expansion."""
        if node_id in self.expanded:
            self.expanded.discard(node_id)
            self.touched.append(node_id)

    def path(self, node_id) -> list[int]:
        """The nodes from the root's child down to this node (the steps of its branch, in order)."""
        self.check(node_id)
        path = []
        while node_id != 0:
            path.append(node_id)
            node_id = self.nodes[node_id].parent
        return path[::-1]

    def check(self, node_id) -> None:
        if not isinstance(node_id, int) or isinstance(node_id, bool) or not 0 <= node_id < len(self.nodes):
            raise ValueError(f"no node {node_id!r} in the tree: its nodes are 0 to {len(self.nodes) - 1}")
        if node_id in self.deleted:
            raise ValueError(f"node {node_id} was deleted")

    def subtree(self, node_id: int) -> list[int]:
        """The node and every node under it, parents first."""
        found, pending = [], [node_id]
        while pending:
            found.append(pending.pop())
            pending.extend(reversed(self._children[found[-1]]))
        return found

    # --- what a person makes of it (each checked first: a refusal changes nothing) --------------------
    def delete(self, node_id, active: list[int]) -> list[int]:
        """Delete the branch from this node down -> the nodes deleted. Refused for the root, a node of the
        active branch (`active`: the session's path) and a branch holding a pinned node."""
        self.check(node_id)
        if node_id == 0:
            raise ValueError("the prompt is the root of every branch: it cannot be deleted")
        if node_id in active:
            raise ValueError(f"node {node_id} is on the branch the text is on: go to another branch first")
        gone = self.subtree(node_id)
        pinned = next((n for n in gone if n in self.pinned), None)
        if pinned is not None:
            raise ValueError(f"the branch holds pinned node {pinned}: unpin it first")
        siblings = self._children[self.nodes[node_id].parent]
        self.edits.append(TreeEdit("delete", node_id, siblings.index(node_id), tuple(gone),
                                   tuple((n, self.names[n]) for n in gone if n in self.names),
                                   tuple(n for n in gone if n in self.expanded)))  # fmt: skip
        siblings.remove(node_id)
        for n in gone:
            self.deleted.add(n)
            self.names.pop(n, None)
            self.expanded.discard(n)
            self.touched.append(n)
        return gone

    def name(self, node_id, name) -> None:
        """Name the branch that ends at this node ("" takes the name away)."""
        self.check(node_id)
        if not isinstance(name, str) or len(name) > MAX_NAME or any(c in name for c in "\n\r\t"):
            raise ValueError(f"a branch's name must be one line of at most {MAX_NAME} characters, got {name!r:.60}")
        if node_id == 0:
            raise ValueError("the prompt is the root of every branch: name a node under it")
        self.edits.append(TreeEdit("name", node_id, self.names.get(node_id, "")))
        if name:
            self.names[node_id] = name
        else:
            self.names.pop(node_id, None)
        self.touched.append(node_id)

    def pin(self, node_id, pinned) -> None:
        """Pin a node (its branch cannot be deleted) or unpin it."""
        self.check(node_id)
        if not isinstance(pinned, bool):
            raise ValueError(f"pinned must be True or False, got {pinned!r:.40}")
        if node_id == 0:
            raise ValueError("the prompt is the root of every branch: pin a node under it")
        self.edits.append(TreeEdit("pin", node_id, node_id in self.pinned))
        (self.pinned.add if pinned else self.pinned.discard)(node_id)
        self.touched.append(node_id)

    def undo(self) -> TreeEdit:
        """Take back the last edit (delete, name or pin) not yet undone -> that edit. A deleted branch comes back
        where it was, with its ids, names and expansion marks; a name or a pin goes back to what it was. Refused
        (ValueError, nothing changes) when there is none, or where the same token was taken again under the
        deleted branch's parent since (one token is one branch: delete that one first)."""
        if not self.edits:
            raise ValueError("nothing to undo: no branch was deleted, named or pinned (steps are not undone)")
        edit = self.edits[-1]
        if edit.kind == "delete":
            self._restore(edit)
        elif edit.kind == "name" and edit.before:
            self.names[edit.node] = edit.before
        elif edit.kind == "name":
            self.names.pop(edit.node, None)
        else:
            (self.pinned.add if edit.before else self.pinned.discard)(edit.node)
        self.edits.pop()
        if edit.kind != "delete":
            self.touched.append(edit.node)
        return edit

    def _restore(self, edit: TreeEdit) -> None:
        """A deleted branch back in its place (checked first: a refusal changes nothing)."""
        parent = self.nodes[edit.node].parent
        token_id = self.nodes[edit.node].step.token_id
        again = next((c for c in self._children[parent] if self.nodes[c].step.token_id == token_id), None)
        if again is not None:
            raise ValueError(f"cannot bring back the deleted branch from node {edit.node}: its first token "
                             f"{self.nodes[edit.node].step.token!r} was taken again there since (node {again}); "
                             "delete that branch first")  # fmt: skip
        self._children[parent].insert(edit.before, edit.node)
        self.deleted.difference_update(edit.nodes)
        self.names.update(edit.names)
        self.expanded.update(edit.expanded)
        self.touched.extend(edit.nodes)

    # --- views -------------------------------------------------------------------------------------
    def view(self, node_id: int) -> NodeView:
        node = self.nodes[node_id]
        if node.step is None:
            return NodeView(0, None, "", 1.0, "prompt")
        drawn = node_id not in self.raw and node.step.source not in INSERTED  # by the chain, under its settings
        return NodeView(node_id, node.parent, node.step.token, node.step.model_probability, node.step.source,
                        self.names.get(node_id, ""), node_id in self.pinned, node_id in self.expanded,
                        node_id in self.deleted, node.step.probability if drawn else None)  # fmt: skip

    def marks(self, node_id: int) -> dict:
        """A node's optional trace keys (MARKS) where set."""
        marks = {"name": self.names.get(node_id, ""), "pinned": node_id in self.pinned,
                 "expanded": node_id in self.expanded, "raw": node_id in self.raw, "deleted": node_id in self.deleted}  # fmt: skip
        return {key: value for key, value in marks.items() if value}

    def to_dict(self, only: list[int] | None = None, record=None) -> dict:
        """Every node; or only these (a path from the root's child down: exported as the one branch it is,
        numbered 1.. in order). record(step): a step's record (Step.to_dict)."""
        record = record or Step.to_dict
        if only is None:
            return {"nodes": [{"id": n.id, "parent": n.parent, "step": None if n.step is None else record(n.step),
                               **self.marks(n.id)} for n in self.nodes]}  # fmt: skip
        nodes = [{"id": 0, "parent": None, "step": None}]
        for index, node_id in enumerate(only, start=1):
            marks = {k: v for k, v in self.marks(node_id).items() if k in ("name", "pinned")}
            nodes.append({"id": index, "parent": index - 1, "step": record(self.nodes[node_id].step), **marks})
        return {"nodes": nodes}


def shared_prefix(a, b) -> int:  # two id or node lists -> how many they share from the start
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if len(differ) else n


def check_tree(tree) -> None:
    """A trace's tree: ValueError naming the first bad node (a parent that is not an earlier node, which also
    rules out cycles; a step that is not a step record; a mark of the wrong kind)."""
    if not isinstance(tree, dict) or not isinstance(tree.get("nodes"), list) or not tree["nodes"]:
        raise ValueError("trace field 'tree' must be an object with a non-empty list 'nodes'")
    for index, node in enumerate(tree["nodes"]):
        where = f"trace field 'tree': node {index}"
        if not isinstance(node, dict) or node.get("id") != index:
            raise ValueError(f"{where} must be an object whose 'id' is {index} (nodes in order)")
        parent = node.get("parent")
        if index == 0:
            if parent is not None or node.get("step") is not None:
                raise ValueError(f"{where} is the root: no parent and no step")
            continue
        if not isinstance(parent, int) or isinstance(parent, bool) or not 0 <= parent < len(tree["nodes"]):
            raise ValueError(f"{where}: its parent {parent!r:.40} is not a node of the tree")
        if parent >= index:
            raise ValueError(f"{where}: its parent {parent} does not come before it (a cycle, or nodes out of order)")
        for key, kind in MARKS.items():
            if key in node and not isinstance(node[key], kind):
                raise ValueError(f"{where}: {key!r} must be a {kind.__name__}, got {node[key]!r:.40}")
        try:
            Step.from_dict(node.get("step"))
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
