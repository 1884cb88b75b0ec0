"""The tree of a session's branches: every step the session ever took, kept when it rewinds and takes others.

A node is one step under its parent (the root is the prompt). The session's steps are always one path of
the tree, from the root down (`Session.path`); a rewind moves up it, and a step taken from there is a new
child, or the same node again where it is the same token (the same text is one branch; the node keeps the
record and state it was first made with, which goto puts back).
A node keeps what the session needs to stand after its step again (`Session.goto`): the random draws
taken before and after it, token healing's state, and the settings epoch it was taken under.

In a trace (schema 4) the tree is `"tree": {"nodes": [{"id", "parent", "step"}...]}`, node 0 the root with
no parent and no step, each parent an earlier node.
"""

from dataclasses import dataclass, replace

from engine.core.steps import Step


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


class Tree:
    def __init__(self):
        self.nodes: list[Node] = [Node(0, None, None)]
        self._children: dict[int, list[int]] = {0: []}

    def children(self, node_id: int) -> list[int]:
        return list(self._children[node_id])

    def add(self, parent: int, step: Step, **state) -> int:
        """The node of this step under `parent`: the existing child with the same token (the same text: one
        branch, as a loom shows it; it keeps its first record and state), or a new one."""
        for child in self._children[parent]:
            if self.nodes[child].step.token_id == step.token_id:
                return child
        node = Node(len(self.nodes), parent, step, **state)
        self.nodes.append(node)
        self._children[parent].append(node.id)
        self._children[node.id] = []
        return node.id

    def replace_step(self, node_id: int, step: Step) -> None:
        """A node's record completed later (a server's streamed step, once its token id is known)."""
        self.nodes[node_id] = replace(self.nodes[node_id], step=step)

    def path(self, node_id) -> list[int]:
        """The nodes from the root's child down to this node (the steps of its branch, in order)."""
        if not isinstance(node_id, int) or isinstance(node_id, bool) or not 0 <= node_id < len(self.nodes):
            raise ValueError(f"no node {node_id!r} in the tree: its nodes are 0 to {len(self.nodes) - 1}")
        path = []
        while node_id != 0:
            path.append(node_id)
            node_id = self.nodes[node_id].parent
        return path[::-1]

    def to_dict(self) -> dict:
        return {"nodes": [{"id": n.id, "parent": n.parent, "step": None if n.step is None else n.step.to_dict()}
                          for n in self.nodes]}  # fmt: skip


def check_tree(tree) -> None:
    """A trace's tree: ValueError naming the first bad node (a parent that is not an earlier node, which also
    rules out cycles; a step that is not a step record)."""
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
        try:
            Step.from_dict(node.get("step"))
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
