"""The window's side of the session's tree (the Tree tab): going to a branch, expanding the tree from a node
with progress and Cancel (from the prompt on a fresh one: the session starts from the prompt box), naming,
pinning and deleting branches, Edit > Undo tree edit (Ctrl+Z: the last delete, name or pin taken back; a text
box that has the focus keeps Ctrl+Z for its own typing), and comparing two branches side by side.

Every request goes to the worker, which changes the session (each change a logged action, so a trace
replays it) and sends the tree's new and changed nodes back to the panel. While the tree is expanded the
window is busy as during a run: Stop (or the panel's Cancel) ends it, keeping the levels already finished."""

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu

from .branch_compare import BranchCompare


class Branches(QObject):
    gotoRequested = Signal(int)  # to the worker: a node whose branch becomes the text
    expandRequested = Signal(object)  # {"node", "params", "settings"}
    deleteRequested = Signal(int)
    nameRequested = Signal(int, str)
    pinRequested = Signal(int, bool)
    compareRequested = Signal(int, int)
    undoRequested = Signal()
    expanded = Signal(object)  # for outside observers: the engine.ExpandResult just shown

    name = "branches"

    def __init__(self, host):
        """host: the controller (its window, worker, known session, traces; settings_here() -> (the controls'
        settings, once the session is the one the prompt box shows (None: the prompt is not ready); whether it
        started a new session for that); status(text, error))."""
        super().__init__(host)
        window, worker = host.window, host.worker
        self.host, self.window, self.panel = host, window, window.tree_panel
        self.settings_here, self.status = host.settings_here, host.status
        self.expanding = False
        self._greedy_chain = False  # the expansion running is under a chain that keeps one token per node
        self.dialog: BranchCompare | None = None
        for signal, slot in ((self.gotoRequested, worker.tree.goto), (self.expandRequested, worker.tree.expand),
                             (self.deleteRequested, worker.tree.delete_branch), (self.nameRequested, worker.tree.name_branch),
                             (self.pinRequested, worker.tree.pin_branch), (self.undoRequested, worker.tree.undo_tree_edit),
                             (self.compareRequested, worker.tree.compare_branches)):  # fmt: skip
            signal.connect(slot)
        worker.tree.treeEditUndone.connect(self._on_undone)
        worker.tree.treeChanged.connect(self.panel.update_tree)
        window.docks.dock(self.panel).visibilityChanged.connect(lambda _seen: self.panel.catch_up())
        worker.tree.expandProgress.connect(self.panel.controls.show_progress)
        worker.tree.expandDone.connect(self._on_expanded)
        worker.tree.branchesCompared.connect(self._on_compared)
        worker.failed.connect(self._on_failed)
        self.panel.nodeClicked.connect(self.goto)
        self.panel.expandRequested.connect(self.expand)
        self.panel.cancelRequested.connect(lambda: worker.request_stop())  # called here, not queued to the busy worker
        self.panel.deleteRequested.connect(self._delete)
        self.panel.renameRequested.connect(lambda node, name: self._edit(self.nameRequested, node, name))
        self.panel.pinRequested.connect(lambda node, pinned: self._edit(self.pinRequested, node, pinned))
        self.panel.compareRequested.connect(lambda a, b: self._edit(self.compareRequested, a, b))
        # a window shortcut: a focused text box takes Ctrl+Z first (Qt's shortcut override), for its own typing
        self.undo_action = QAction("Undo tree edit", window, objectName="undoTreeEditAction",
                                   shortcut=QKeySequence.StandardKey.Undo)  # fmt: skip
        self.undo_action.setToolTip("take back the last delete, name or pin in the Tree tab (steps are not undone)")
        self.undo_action.triggered.connect(lambda: self._edit(self.undoRequested))
        edit_menu(window).addAction(self.undo_action)

    def busy(self) -> str | None:
        """Why the tree cannot be changed now, or None."""
        host = self.host
        if host.running:
            return "Busy"
        if host.traces.replaying or not host.known.exists or host.traces.viewed is not None:
            return "No branches here yet: generate or step first"
        return None

    def goto(self, node_id: int) -> None:
        """A node of the Tree tab: its branch becomes the text (the worker puts it back; the view redraws)."""
        if self._refused("choose a branch"):
            return
        self.gotoRequested.emit(node_id)

    def expand(self, node_id: int, params: dict) -> None:
        """Grow the tree below this node with the controls' chain (Session.expand's params). With no session
        yet (or a trace viewed), the session starts from the prompt box and the tree grows from the prompt."""
        if self.busy() == "Busy":
            self._refused("expand the tree")
            return
        settings, started = self.settings_here()
        if settings is None:
            return
        if started:  # a new session's tree is the prompt alone
            node_id = 0
        self.expanding = True
        self._greedy_chain = not params["raw"] and settings.get("temperature") == 0
        self.panel.controls.set_expanding(True)
        self.status("Expanding the tree... (Cancel or Stop keeps the levels finished)")
        self.window.stop_reason.setText("Expanding the tree...")  # now, not when the worker's busy signal comes
        self.expandRequested.emit({"node": node_id, "params": dict(params), "settings": settings})

    def _edit(self, signal, *args) -> bool:
        if self._refused("change the tree"):
            return False
        signal.emit(*args)
        return True

    def _delete(self, node_id: int) -> None:
        """Delete asks nothing: it says how to take it back (a refusal's reason follows from the worker)."""
        if self._edit(self.deleteRequested, node_id):
            self.status("Branch deleted: Edit > Undo tree edit (Ctrl+Z) brings it back")

    def _refused(self, what: str) -> bool:
        reason = self.busy()
        if reason is not None:
            self.status(f"{reason}: {what} once it is free" if reason == "Busy" else reason)
        return reason is not None

    def _on_expanded(self, result, seconds: float, before_end: bool) -> None:
        self._done()
        levels = f"{result.levels} level{'s' * (result.levels != 1)}"
        text = f"Expanded: {result.new} new nodes, {levels}, in {seconds:.2f} s"
        if result.cancelled:
            text = f"Cancelled: kept {result.new} new nodes, the {levels} finished, in {seconds:.2f} s"
        if before_end:
            text += " from the step before the text's end (the text keeps its end: the others are beside it)"
        if result.leaves:
            text += f"; the likeliest branch below has p {result.leaves[0][1]:.3g} from where it started"
        if self._greedy_chain:
            text += ". At temperature 0 the chain keeps one token per node: tick raw model to see the alternatives"
        self.status(text)
        self.expanded.emit(result)

    def _on_failed(self, _text: str) -> None:
        if self.expanding:
            self._done()

    def _done(self) -> None:
        self.expanding = False
        self.panel.controls.set_expanding(False)
        self.window.stop_reason.setText("")  # it said "Expanding the tree..."; the status bar says how it went

    def _on_undone(self, edit, token: str) -> None:
        """The status bar says what was undone (the Tree tab shows it back)."""
        if edit.kind == "delete":
            count = len(edit.nodes)
            what = f"deleting the branch from {token!r} ({count} token{'s' * (count != 1)}): it is back in the tree"
        elif edit.kind == "name":
            what = f"naming the branch at {token!r}: " + (
                f"it is «{edit.before}» again" if edit.before else "no name again"
            )
        else:
            again = "pinned" if edit.before else "unpinned"
            what = f"{'unpinning' if edit.before else 'pinning'} {token!r}: it is {again} again"
        self.status(f"Undone: {what}")

    def _on_compared(self, prefix: str, left, right) -> None:
        """left: the branch of the row the person chose; right: the active branch (the text)."""
        if self.dialog is None:
            self.dialog = BranchCompare(self.window)
        titles = [f"{name}: {len(steps)} token{'s' * (len(steps) != 1)}" if steps else f"{name}: ends at the branch point"
                  for name, steps in (("this branch", left), ("the text's branch", right))]  # fmt: skip
        self.dialog.show_branches(prefix, list(left), list(right), *titles)
        self.dialog.show()
        self.dialog.raise_()


def edit_menu(window) -> QMenu:
    """The window's Edit menu (made after File where there is none yet)."""
    for action in window.menuBar().actions():
        if action.menu() is not None and action.text().replace("&", "") == "Edit":
            return action.menu()
    return window.menuBar().addMenu("&Edit")
