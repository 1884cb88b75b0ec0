"""The tree's commands in the worker: go to a branch, grow the tree from a node, name, pin, delete, undo, and
compare two branches; after every change the tree's new and changed nodes go to the Tree tab."""

import time

from PySide6.QtCore import Signal, Slot

from ..feature import WorkerCommands


class TreeCommands(WorkerCommands):
    name = "tree"
    treeChanged = Signal(bool, object, object)  # (a new tree, its nodes made or changed since the last:
    #                                              engine.core.tree.NodeView, the node of each step)
    expandProgress = Signal(int, int)  # (nodes made, nodes expected) while the tree is expanded
    expandDone = Signal(object, float, bool)  # (engine.ExpandResult, seconds it took, from before the end token)
    branchesCompared = Signal(str, object, object)  # (the text up to where two branches part, their steps after)
    treeEditUndone = Signal(object, str)  # (the engine's TreeEdit taken back, its node's token)

    def __init__(self, host):
        super().__init__(host)
        self._sent: tuple[object, int, tuple] = (None, 0, ())  # (tree, its `touched` sent, path sent)

    def published(self, session) -> None:
        """The session's tree to the GUI: the nodes made or changed since it last heard (all of a new tree), and
        the active path, when either changed."""
        if session is None:
            return
        tree, sent, path = self._sent
        new = tree is not session.tree
        changed = range(1, len(session.tree.nodes)) if new else dict.fromkeys(session.tree.touched[sent:])
        if not new and not changed and tuple(session.path) == path:
            return
        self._sent = (session.tree, len(session.tree.touched), tuple(session.path))
        self.treeChanged.emit(new, [session.tree.view(i) for i in changed], list(session.path))

    @Slot(int)
    def goto(self, node_id: int) -> None:
        """Put back the branch of the tree that ends at this node (Session.goto); the view redraws it. A text
        that ended can still go to another branch."""
        self.host.command(lambda session: session.goto(node_id), emit=True, rewound=True)

    @Slot(object)
    def expand(self, request: dict) -> None:
        """request: {"node", "params": Session.expand's, "settings": the controls'}: the text goes to that node
        (goto, as a click would), the controls' chain applies (a logged settings change, the step limit kept),
        and the tree grows below it, with progress; Stop (request_stop) cancels, keeping finished levels."""
        host, session = self.host, self.host.session
        if session is None or host.generating:  # failed: the Tree tab stops waiting for the expansion
            host.failed.emit("could not expand the tree: there is no session to grow (the prompt did not start one)")
            return
        cancelled = host.begin_work()
        host.busyChanged.emit(True)
        start = last = time.perf_counter()

        def progress(done: int, expected: int) -> None:  # at most 20 signals a second
            nonlocal last
            if time.perf_counter() - last > 0.05:
                last = time.perf_counter()
                self.expandProgress.emit(done, expected)

        node = request["node"]
        nodes = session.tree.nodes
        ends = 0 < node < len(nodes) and nodes[node].step.token_id in session.model.end_token_ids
        if ends:  # the end of a story: what else could have come instead of the end
            node = nodes[node].parent
        settings = {**request["settings"], "max_new_tokens": session.settings.max_new_tokens}
        try:
            session.check_expansion(node, settings, **request["params"])  # refused: nothing moves
            if node != (session.path[-1] if session.path else 0):
                session.goto(node)
                host.redraw.emit(session.prompt_text, list(session.steps))
            session.update_settings(**settings)
            result = session.expand(**request["params"], progress=progress, cancelled=cancelled)
            if ends:  # the text keeps its end: what else could have come is beside it in the tree
                session.goto(request["node"])
                host.redraw.emit(session.prompt_text, list(session.steps))
        except ValueError as error:
            host.failed.emit(f"could not expand the tree: {error}")
            return
        finally:
            host.busyChanged.emit(False)
            host.publish()
        self.expandDone.emit(result, time.perf_counter() - start, bool(ends))
        host.send_preview()

    @Slot(int)
    def delete_branch(self, node_id: int) -> None:
        self.host.command(lambda session: session.delete_branch(node_id), emit=False)

    @Slot(int, str)
    def name_branch(self, node_id: int, name: str) -> None:
        self.host.command(lambda session: session.name_branch(node_id, name), emit=False)

    @Slot(int, bool)
    def pin_branch(self, node_id: int, pinned: bool) -> None:
        self.host.command(lambda session: session.pin_branch(node_id, pinned), emit=False)

    @Slot()
    def undo_tree_edit(self) -> None:
        """Take back the last delete, name or pin of the tree (Session.undo_tree_edit); the Tree tab redraws it.
        With nothing to undo, the status bar says so (a notice: nothing went wrong)."""
        session = self.host.session
        if session is not None and not session.tree.edits:
            self.host.notice.emit(
                "Nothing to undo: no branch was deleted, named or pinned (Ctrl+Z undoes tree edits only)"
            )
            return
        undone = []
        if self.host.command(lambda session: undone.append(session.undo_tree_edit()), emit=False):
            self.treeEditUndone.emit(undone[0], self.host.session.tree.nodes[undone[0].node].step.token)

    @Slot(int, int)
    def compare_branches(self, a: int, b: int) -> None:
        """Two branches side by side from where they part (Session.compare_branches); the session is unchanged."""
        if self.host.session is None:
            return
        try:
            prefix, left, right = self.host.session.compare_branches(a, b)
        except ValueError as error:
            self.host.failed.emit(f"could not compare the branches: {error}")
            return
        self.branchesCompared.emit(prefix, left, right)
