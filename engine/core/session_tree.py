"""Session's tree commands (a mixin of engine/core/session.py's Session): grow the tree below the text (expand),
edit it (delete, name, pin, undo), compare two branches, and move the text onto another branch (goto).
They use the Session's state and private helpers (_log, _cut, _push, _check_room, ...) as its own methods do."""

from dataclasses import replace

from engine.core.expand import Expansion, checked_expansion, expand
from engine.core.steps import Step
from engine.core.tree import shared_prefix


class TreeCommands:
    def expand(self, top_k=3, coverage=None, depth=3, budget=200, raw=False, progress=None, cancelled=None):
        """Grow the tree below where the text is (engine/core/expand.py): each node's top_k most probable next
        tokens, or those holding `coverage` of its probability, level by level down to `depth`, at most
        `budget` new nodes, under the chain's final probabilities or the raw model's (raw=True). The new nodes
        are marked expanded until the text goes through them (goto); the text itself does not change.
        progress(nodes, expected) and cancelled() -> True (Cancel keeps the finished levels) are for the
        window. Where token healing still has a cut text to spell, the children keep to it as steps would.
        Logged with the levels finished, so replay makes the same nodes. -> ExpandResult."""
        start = self.path[-1] if self.path else 0
        expansion = self.check_expansion(start, {}, top_k, coverage, depth, budget, raw)
        self.interrupt()
        state = {"draws_before": self._draws, "draws_after": self._draws, "epoch": self._epochs[-1],
                 "steering": (self.head_table, self.residual_table)}  # fmt: skip

        advance = self._healer().advance

        def add(parent: int, step: Step, healing: bytes | None) -> int:  # walking in later stands as the text now
            after = None if healing is None else advance(healing, step.token_id)
            return self.tree.add(parent, step, expanded=True, raw=raw, healing_before=healing, healing_after=after,
                                 **state)  # fmt: skip

        before = len(self.tree.nodes)
        result = expand(self._context, self.model, list(self.ids), start, self.settings, expansion, add,
                        progress, cancelled, self._healing, advance)  # fmt: skip
        if result.levels:
            self._log({"kind": "expand", **expansion.to_dict(), "depth": result.levels})
        return replace(result, new=len(self.tree.nodes) - before)

    def check_expansion(self, node_id, changes: dict, top_k=3, coverage=None, depth=3, budget=200, raw=False):
        """The expansion below this node of the tree, under the settings with these changes, or a ValueError
        saying why it cannot be (nothing changes either way): the window checks before it goes there."""
        ended_here = self._ended_at == len(self.steps)  # the server said stop at the text's end
        return checked_expansion(self.model, self.tree, node_id, self.path, ended_here, len(self.prompt_ids),
                                 self.settings, changes, Expansion(top_k, coverage, depth, budget, raw))  # fmt: skip

    # --- the tree ----------------------------------------------------------------------------------
    def delete_branch(self, node_id) -> None:
        """Delete the branch from this node of the tree down (not the one the text is on, nor one holding a
        pinned node: ValueError, nothing changes). Logged."""
        self.tree.delete(node_id, self.path)
        self._log({"kind": "delete", "node": node_id})

    def name_branch(self, node_id, name) -> None:
        """Name the branch that ends at this node ("" takes the name away). Logged."""
        self.tree.name(node_id, name)
        self._log({"kind": "name", "node": node_id, "name": name})

    def pin_branch(self, node_id, pinned=True) -> None:
        """Pin (or unpin) a node: a branch holding a pinned node cannot be deleted. Logged."""
        self.tree.pin(node_id, pinned)
        self._log({"kind": "pin", "node": node_id, "pinned": pinned})

    def undo_tree_edit(self):
        """Take back the last tree edit (delete_branch, name_branch, pin_branch) not yet undone: a deleted branch
        comes back with its ids (engine/core/tree.py's Tree.undo). Steps are not undone. ValueError "nothing to
        undo" when there is none (nothing changes). Logged, so replay undoes the same edit. -> the TreeEdit."""
        edit = self.tree.undo()
        self._log({"kind": "undo"})
        return edit

    def compare_branches(self, a, b):
        """Two branches of the tree from where they part -> (the text up to there, a's steps after it, b's)."""
        path_a, path_b = self.tree.path(a), self.tree.path(b)
        common = shared_prefix(path_a, path_b)
        steps = [self.tree.nodes[i].step for i in path_a]
        prefix = self.prompt_text + "".join(step.token for step in steps[:common])
        return prefix, steps[common:], [self.tree.nodes[i].step for i in path_b[common:]]

    def goto(self, node_id) -> None:
        """Make the branch of the tree that ends at this node the session's text (a click on a node): back to
        where it parts from the current one, then its recorded steps put back, fed to the model in one pass
        (nothing is sampled again), with the random stream, healing and settings as they stood after them.
        Logged; stepping, rewinding and going elsewhere work from there as ever."""
        target = self.tree.path(node_id)  # ValueError for a node that is not there
        common = shared_prefix(target, self.path)
        if common == len(target) == len(self.path):
            return  # already there
        nodes = [self.tree.nodes[i] for i in target[common:]]
        self._check_room(len(nodes) - (len(self.steps) - common))
        self.interrupt()
        self._log({"kind": "goto", "node": node_id})
        self._forced = None
        if common < len(self.steps):
            self._cut(common)
        if not nodes:
            return
        self._context.feed(self.ids, [node.step.token_id for node in nodes])
        while len(self._epochs) > 1 and self._epochs[-1].start >= common and self._epochs[-1] is not nodes[0].epoch:
            self._epochs.pop()  # a settings change at the branch point belongs to the branch left
        for node in nodes:
            if node.epoch is not self._epochs[-1]:
                self._epochs.append(node.epoch)
            self._push(node.step, node.id, node.draws_before, node.healing_before, node.steering)
        self._healing = nodes[-1].healing_after
        self._enter_epoch(self._epochs[-1], nodes[-1].draws_after)
        self._returned = len(self.steps)
