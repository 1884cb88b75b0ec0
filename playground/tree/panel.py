"""The Tree tab: every branch of the session (engine Session.tree) under the prompt. A run of tokens with no
branch in it is one row (its text), so a long generation is one line and a branch point shows its
alternatives as rows under it; the rows of the active branch are bold, the nodes an expansion added that
nobody has walked into yet italic and grey, and a leaf row ends with its whole sequence's probability.
Click a row (or press Return on it) to make the branch that ends there the text: the view, chart and strip
follow. The arrow keys walk the tree as a loom does (left and right: the sibling rows; up: the parent row;
down: the child row on the active branch, else the first) and go there. A row's context menu names, pins,
deletes, expands or compares its branch; the controls above the tree expand from the selected row.

The widget only draws: the worker sends the nodes that are new or changed (update_tree) and the controller
acts on the requests. An update costs what changed, not the tree's size: a new token extends its row's text,
a branch in the middle of a row splits it, a path change re-styles the rows whose bold state changed.
Deleted nodes (rare), a deleted branch brought back (undo) and a new tree rebuild every row, in bulk."""

import bisect
import math

import shiboken6
from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QInputDialog,
    QLabel,
    QMenu,
    QToolTip,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

from engine import NodeView

from .expand_controls import ExpandControls

MARKS = {"forced": "forced", "rule": "rule", "tool": "tool"}  # the steps the model did not choose
PIN = "⚑"  # a pinned branch (a flag every common font has; an emoji may have no glyph)
LAST = Qt.ItemDataRole.UserRole  # a row's last node (the node a click goes to)
UNVISITED = QColor(128, 128, 128)
TIP_ROWS = 40  # tokens listed in a row's tooltip
ROW_CHARS = 800  # of a longer row's text, its start and its end are shown
DROP_AFTER_MS = 250  # a rebuilt tree's old rows are freed in an event of their own, after the new ones show
SEQUENCE_TIP = ("⟶ p: the product of each step's probability from the prompt; an expansion under the raw model "
                "weighs by the raw model's, and so does a forced step (it was not drawn)")  # fmt: skip
ROOT = NodeView(0, None, "", 1.0, "prompt")


def shown(token: str) -> str:  # as the chart labels tokens: spaces as middle dots, a newline as ↵
    return token.replace(" ", "·").replace("\n", "↵")


def log10_of(probability) -> float:
    """log10 of a step's probability: -inf for 0, nan where it is not known (None)."""
    if probability is None or probability != probability:
        return math.nan
    return math.log10(probability) if probability > 0 else -math.inf


def probability_text(log10p: float) -> str:
    """A product of probabilities kept as its log10 (no underflow on long texts) -> "0.42", "3.1e-04"."""
    if math.isnan(log10p):
        return "?"
    if log10p == -math.inf:
        return "0"
    if log10p >= -1:  # 0.1 and above: as the rows' own probabilities are written
        return f"{10**log10p:.2f}"
    if log10p > -300:  # within a float: formatted in C
        return f"{10**log10p:.1e}"
    exponent = math.floor(log10p)
    mantissa = 10 ** (log10p - exponent)
    if round(mantissa, 1) >= 10:
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"{mantissa:.1f}e{exponent:+03d}"


class TreePanel(QWidget):
    nodeClicked = Signal(int)  # the node whose branch should become the text (0: the prompt alone)
    renameRequested = Signal(int, str)  # name the branch ending at this node ("": no name)
    pinRequested = Signal(int, bool)  # pin (True) or unpin this node
    deleteRequested = Signal(int)  # delete the branch from this node down
    expandRequested = Signal(int, object)  # expand below this node with these params (expand_params())
    cancelRequested = Signal()  # stop the expansion running
    compareRequested = Signal(int, int)  # compare the branch ending at this node with the active one (its end)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("treePanel")
        self.tree = QTreeWidget(objectName="branchTree")
        self.tree.setHeaderHidden(True)
        self.tree.setUniformRowHeights(True)
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a long row keeps its marks and its end
        self.tree.setToolTip("every branch the session took: click a row to make the branch that ends there the "
                             "text; arrow keys walk the tree; right-click for more")  # fmt: skip
        self.tree.itemClicked.connect(self._chosen)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._context_menu)
        self.tree.installEventFilter(self)
        self.tree.viewport().installEventFilter(self)  # the rows' tooltips, made on demand
        self.summary = QLabel("", objectName="treeSummary")
        self.summary.setWordWrap(True)
        layout = QVBoxLayout(self)
        self.controls = ExpandControls()
        self.controls.expandClicked.connect(self._expand_clicked)
        self.controls.cancelRequested.connect(self.cancelRequested)
        layout.addWidget(self.controls)
        layout.addWidget(self.summary)
        layout.addWidget(self.tree, 1)
        self._old_rows, self.items = [], {}
        self._menu: QMenu | None = None  # the context menu made last (menu_for): one at a time
        self._fonts = {}  # (bold, unvisited) -> the row's font
        for bold in (False, True):
            for italic in (False, True):
                font = QFont(self.tree.font())
                font.setBold(bold)
                font.setItalic(italic)
                self._fonts[bold, italic] = font
        self._grey, self._plain = QBrush(UNVISITED), QBrush()
        self.clear()

    def _expand_clicked(self) -> None:
        selected = self.tree.selectedItems()
        node = selected[0].data(0, LAST) if selected else self._active_end()
        self.expandRequested.emit(node, self.controls.expand_params())

    def _active_end(self) -> int:
        return self.path[-1] if self.path else 0

    # --- the model of the rows ----------------------------------------------------------------------------
    def clear(self) -> None:
        self._forget_all()
        self._rebuild()

    def _forget_all(self) -> None:
        self.views: dict[int, NodeView] = {0: ROOT}
        self.children: dict[int, list[int]] = {0: []}
        self.path: list[int] = []
        self._logp: dict[int, float] = {0: 0.0}  # log10 of each node's sequence probability from the prompt
        self._named: set[int] = set()
        self._pinned: set[int] = set()
        self._count = self._leaves = self._unvisited = 0
        self._newest = 0  # the highest node id drawn: a node new here below it is one an undo brought back

    def update_tree(self, new: bool, views, path) -> None:
        """views: the nodes new or changed since the last call (engine NodeViews); path: the node of each step
        of the active branch."""
        if new:
            self._forget_all()  # the rows follow below, rebuilt
        views = sorted(views, key=lambda v: v.id)
        rebuild = new or any(self._needs_rebuild(v) for v in views)
        changed = []
        for view in views:
            old = self.views.get(view.id)
            if old is None:
                if view.deleted or view.parent not in self.views:
                    continue  # gone before it was drawn, or an orphan
                self._ingest(view)
                if not rebuild:
                    self._add_row(view)
            elif view != old:
                if view.deleted:
                    self._forget(view.id)
                else:
                    self.views[view.id] = view
                    changed.append((old, view))
        old_end = self._active_end()
        self.path = [n for n in path if n in self.views]
        if rebuild:
            self._rebuild(new, scroll=new or self._active_end() != old_end)
            return
        for old, view in changed:
            self._changed(old, view)
        self._restyle_path()
        self._show_summary()
        if self._active_end() != old_end:
            self.tree.scrollToItem(self.row_of(self._active_end()))

    @property
    def nodes(self) -> dict[int, NodeView]:
        """The nodes drawn, by id (the root 0 included; deleted nodes leave)."""
        return self.views

    def row_of(self, node_id: int) -> QTreeWidgetItem:
        return self.items[self.head[node_id]]

    def run_of(self, node_id: int) -> list[int]:
        """The nodes of the row holding this node, in order."""
        return list(self.runs[self.head[node_id]])

    def _head_of(self, item: QTreeWidgetItem) -> int:
        return self.head[item.data(0, LAST)]

    def _needs_rebuild(self, view: NodeView) -> bool:
        old = self.views.get(view.id)
        if old is None:  # a deleted branch brought back goes back in its place among its siblings
            return not view.deleted and view.id < self._newest
        drawn = (old.token, old.probability, old.source, old.parent)
        return view.deleted or drawn != (view.token, view.probability, view.source, view.parent)

    def _joined(self, parent: int, child: int) -> bool:
        """Whether a child continues its parent's row: the only child, and both walked or both not."""
        views = self.views
        return parent != 0 and len(self.children[parent]) == 1 and views[parent].expanded == views[child].expanded

    def _ingest(self, view: NodeView) -> None:
        """A new node into the model (its row follows: _add_row, or a rebuild)."""
        node, parent = view.id, view.parent
        self.views[node] = view
        self.children[node] = []
        bisect.insort(self.children[parent], node)  # in the tree's order: the order the nodes were made
        self._newest = max(self._newest, node)
        p = view.probability
        self._logp[node] = self._logp[parent] + (math.log10(p) if p is not None and p > 0 else log10_of(p))

    def _add_row(self, view: NodeView) -> None:
        """A new node's row: its parent's row goes on, splits, or gets a child row."""
        node, parent = view.id, view.parent
        siblings = self.children[parent]
        self._count += 1
        self._leaves += parent == 0 or len(siblings) > 1
        self._unvisited += view.expanded
        self._mark(view)
        head = self.head[parent]
        if self._joined(parent, node):  # the row goes on
            self.runs[head].append(node)
            self.head[node] = head
            self._body[head] += shown(view.token)
            self._refresh(head)
            return
        if len(siblings) == 2 and self.head[siblings[0]] == head:
            self._split(parent)  # a branch in the middle of a row
        elif len(siblings) == 1:
            self._refresh(head)  # no longer a leaf row
        item = self._new_row(node, [node])
        self.items[head].addChild(item)
        if view.expanded:
            self._style(item)
            item.setExpanded(True)  # an expansion's rows open as they land

    def _split(self, node: int) -> None:
        """The row holding `node` ends there; the rest of it becomes its child row, which takes its child rows."""
        head = self.head[node]
        run = self.runs[head]
        at = run.index(node) + 1
        tail = run[at:]
        del run[at:]
        self._body[head] = "".join(shown(self.views[n].token) for n in run)
        row = self.items[head]
        item = self._new_row(tail[0], tail)
        item.addChildren(row.takeChildren())
        row.addChild(item)
        item.setExpanded(row.isExpanded())
        self._style(item)
        self._refresh(head)

    def _merge(self, node: int, child: int) -> None:
        """The row of `child` (the only child row of `node`'s row) joins it."""
        head, row, item = self.head[node], self.items[self.head[node]], self.items.pop(child)
        self._bold.discard(child)
        run = self.runs.pop(child)
        self.runs[head] += run
        self._body[head] += self._body.pop(child)
        for n in run:
            self.head[n] = head
        grandchildren = item.takeChildren()
        row.removeChild(item)
        row.addChildren(grandchildren)
        self._refresh(head)

    def _changed(self, old: NodeView, view: NodeView) -> None:
        """A node's name, pin or expanded mark changed."""
        node = view.id
        self._unvisited += view.expanded - old.expanded
        self._mark(view)
        if view.expanded != old.expanded:
            kids = self.children[node]
            for parent, child in ((view.parent, node), (node, kids[0] if len(kids) == 1 else None)):
                if child is None or parent == 0:
                    continue
                joined = self.head[child] == self.head[parent]
                if self._joined(parent, child) and not joined:
                    self._merge(parent, child)
                elif joined and not self._joined(parent, child):
                    self._split(parent)
            for n in (node, *kids):
                self._style(self.row_of(n))
        self._refresh(self.head[node])

    def _forget(self, node: int) -> None:
        """A deleted node and everything under it leave the model (the rows are rebuilt after)."""
        self.children[self.views[node].parent].remove(node)
        pending = [node]
        while pending:
            n = pending.pop()
            pending.extend(self.children.pop(n))
            del self.views[n], self._logp[n]
            self._named.discard(n)
            self._pinned.discard(n)

    def _mark(self, view: NodeView) -> None:
        (self._named.add if view.name else self._named.discard)(view.id)
        (self._pinned.add if view.pinned else self._pinned.discard)(view.id)

    # --- the rows -------------------------------------------------------------------------------------
    def _rebuild(self, new: bool = True, scroll: bool = True) -> None:
        """Every row again, in bulk: a new tree, or the same after deletions (its open rows stay open, its
        current row current)."""
        was_open, current = set(), None
        if not new:
            was_open = {h for h, item in self.items.items() if item.isExpanded()}
            current = self.tree.currentItem()
            current = self._head_of(current) if current is not None else None
            for node in sorted(self.views)[1:]:  # a step's probability may have changed (parents come first)
                self._logp[node] = self._logp[self.views[node].parent] + log10_of(self.views[node].probability)
        position = self.tree.verticalScrollBar().value()
        if self.tree.topLevelItemCount():  # the old rows are freed a moment later (thousands: 10 ms)
            self._old_rows.append(self.tree.takeTopLevelItem(0))
            QTimer.singleShot(DROP_AFTER_MS, self._drop_old_rows)
        self.runs, self.head, self.items, self._body = {0: [0]}, {0: 0}, {}, {0: ""}
        self._bold: set[int] = set()
        self._count = len(self.views) - 1
        self._leaves = sum(1 for n, kids in self.children.items() if n and not kids)
        self._unvisited = sum(1 for v in self.views.values() if v.expanded)
        self._named = {n for n, v in self.views.items() if v.name}
        self._pinned = {n for n, v in self.views.items() if v.pinned}
        root = self._new_row(0, [0])
        opened = []
        views, children, head = self.views, self.children, self.head
        runs, body, items = self.runs, self._body, self.items
        unvisited_row = QTreeWidgetItem()
        unvisited_row.setFont(0, self._fonts[False, True])
        unvisited_row.setForeground(0, self._grey)
        pending = [(root, child) for child in reversed(children[0])]
        while pending:  # the rows made detached, in bulk (a row's calls inlined: thousands of them)
            parent_row, first = pending.pop()
            unvisited = views[first].expanded
            run, kids = [first], children[first]
            while len(kids) == 1 and views[kids[0]].expanded == unvisited:
                run.append(kids[0])
                kids = children[kids[0]]
            for n in run:
                head[n] = first
            runs[first] = run
            body[first] = "".join([shown(views[n].token) for n in run])
            if unvisited:  # a copy of a row styled once: as cheap as a plain one
                item = unvisited_row.clone()
                item.setText(0, self._row_text(first))
                parent_row.addChild(item)
            else:
                item = QTreeWidgetItem(parent_row, [self._row_text(first)])
            item.setData(0, LAST, run[-1])
            items[first] = item
            if unvisited or first in was_open:
                opened.append(item)
            pending.extend([(item, child) for child in reversed(kids)])
        self.tree.addTopLevelItem(root)
        root.setExpanded(True)
        for item in opened:
            item.setExpanded(True)
        self._restyle_path()
        self._show_summary()
        if current in self.items:
            self.tree.setCurrentItem(self.items[current])
        if scroll and self.path:
            self.tree.scrollToItem(self.row_of(self._active_end()))
        elif position:
            self.tree.doItemsLayout()  # the scrollbar's range now, to put it back where it was
            self.tree.verticalScrollBar().setValue(position)

    def _drop_old_rows(self) -> None:
        if self._old_rows:
            free_rows(self._old_rows.pop(0))

    def _new_row(self, head: int, run: list[int]) -> QTreeWidgetItem:
        item = QTreeWidgetItem()
        self.runs[head] = run
        for n in run:
            self.head[n] = head
        self.items[head] = item
        if head == 0:
            item.setText(0, "(prompt)")
            item.setData(0, LAST, 0)
        else:
            self._body[head] = "".join(shown(self.views[n].token) for n in run)
            self._refresh(head, item)
        return item

    def _refresh(self, head: int, item: QTreeWidgetItem | None = None) -> None:
        """A row's text and last node from its run."""
        if head == 0:
            return
        item = self.items[head] if item is None else item
        item.setText(0, self._row_text(head))
        item.setData(0, LAST, self.runs[head][-1])

    def _row_text(self, head: int) -> str:
        """⚑ (a pin in it), «names», the first step's probability and mark, the tokens; a leaf row ends with
        its sequence's probability. An inserted step's probability is the model's ("model p 0.03, forced")."""
        views, last = self.views, self.runs[head][-1]
        first = views[head]
        p = _short(first.probability)
        mark = ""  # an expansion's: italic grey instead
        if first.source in MARKS:
            p, mark = f"model p {p}", f", {MARKS[first.source]}"
        body = self._body[head]
        if len(body) > ROW_CHARS:  # drawing elides it anyway; eliding a long text costs ms per paint
            body = f"{body[: ROW_CHARS // 4]} … {body[-ROW_CHARS * 3 // 4 :]}"
        text = f"{p}{mark}  {body}"
        if self._named:
            text = "".join(f"«{views[n].name}» " for n in self._marked(head, self._named)) + text
        if self._pinned and self._marked(head, self._pinned):
            text = PIN + " " + text
        if not self.children[last]:
            text += f"  ⟶ p {probability_text(self._logp[last])}"
        return text

    def row_tip(self, item: QTreeWidgetItem) -> str:
        """A row's tooltip, made when it is asked for (not per row and update): its tokens with their numbers."""
        head = self._head_of(item)
        if head == 0:
            return "the prompt: every branch starts here"
        run, views = self.runs[head], self.views
        lines = [f"{views[n].token!r}  {'model ' * (views[n].source in MARKS)}p {_short(views[n].probability, 4)}  "
                 f"{views[n].source}"
                 + ("  (expanded, not visited)" if views[n].expanded else "") for n in run[:TIP_ROWS]]  # fmt: skip
        if len(run) > TIP_ROWS:
            lines.append(f"... {len(run) - TIP_ROWS} more tokens")
        if not self.children[run[-1]]:
            lines.append(SEQUENCE_TIP)
        return "\n".join(lines)

    def _marked(self, head: int, marked: set[int]) -> list[int]:
        """The nodes of a row among these (the named or pinned nodes: few in a tree), in order."""
        return sorted(n for n in marked if self.head.get(n) == head) if marked else []

    def _style(self, item: QTreeWidgetItem) -> None:
        """Bold on the active branch; italic and grey where an expansion added it and nobody walked into it."""
        head = self._head_of(item)
        unvisited = self.views[head].expanded
        item.setFont(0, self._fonts[head in self._bold, unvisited])
        item.setForeground(0, self._grey if unvisited else self._plain)

    def is_unvisited(self, item: QTreeWidgetItem) -> bool:
        """Whether a row starts with a node an expansion added that nobody walked into (drawn italic, grey)."""
        return self.views[self._head_of(item)].expanded

    def _restyle_path(self) -> None:
        """Bold the rows of the active branch, and only the rows whose state changed; a row turning bold opens."""
        bold = {self.head[n] for n in self.path}
        turned = bold ^ self._bold
        self._bold = bold
        for head in turned:
            item = self.items.get(head)
            if item is None:
                continue
            self._style(item)
            if head in bold:
                item.setExpanded(True)
                if item.parent() is not None:
                    item.parent().setExpanded(True)

    def _show_summary(self) -> None:
        if not self._count:
            self.summary.setText("the branches appear here as the text grows")
            return
        text = f"{self._count} tokens in {self._leaves} branch{'es' * (self._leaves != 1)}"
        self.summary.setText(text + (f", {self._unvisited} expanded not visited" if self._unvisited else ""))

    # --- what a person does with a row -----------------------------------------------------------------
    def _chosen(self, row: QTreeWidgetItem) -> None:
        self.nodeClicked.emit(row.data(0, LAST))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.tree.viewport() and event.type() == QEvent.Type.ToolTip:
            item = self.tree.itemAt(event.pos())
            if item is None:
                return False
            QToolTip.showText(event.globalPos(), self.row_tip(item), self.tree.viewport(),
                              self.tree.visualItemRect(item))  # fmt: skip
            return True
        if watched is self.tree and event.type() == QEvent.Type.KeyPress:
            if event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier:
                return False
            return self._key(event.key())
        return super().eventFilter(watched, event)

    def _key(self, key) -> bool:
        """Walk the rows as a loom does; each row reached becomes the text."""
        here = self.tree.currentItem() or self.row_of(self._active_end())
        target = None
        if key in (Qt.Key.Key_Left, Qt.Key.Key_Right):
            parent = here.parent()
            if parent is not None:
                index = parent.indexOfChild(here) + (1 if key == Qt.Key.Key_Right else -1)
                target = parent.child(index) if 0 <= index < parent.childCount() else None
        elif key == Qt.Key.Key_Up:
            target = here.parent()
        elif key == Qt.Key.Key_Down:
            on_path = set(self.path)
            kids = [here.child(i) for i in range(here.childCount())]
            target = next((k for k in kids if self._head_of(k) in on_path), kids[0] if kids else None)
            here.setExpanded(True)
        elif key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            target = here
        else:
            return False
        if target is not None:
            self.tree.setCurrentItem(target)
            self.tree.scrollToItem(target)
            self.nodeClicked.emit(target.data(0, LAST))
        return True

    def ask_name(self, current: str) -> str | None:
        """The name a person types for a branch (None: cancelled)."""
        text, ok = QInputDialog.getText(self, "Name this branch", "Name (empty: no name):", text=current)
        return text.strip() if ok else None

    def menu_for(self, node_id: int) -> QMenu:
        """The context menu of the row holding this node. It acts on the row: rename and pin on the node of
        the row that has a name or a pin (else the row's last node), delete from the row's first node (the row
        and everything under it), expand and compare from its last node. The panel keeps it until the next one
        (one whose action is triggered without exec() is not left behind: 7 QActions each)."""
        self._drop_menu()
        head = self.head[node_id]
        run, last = self.runs[head], self.runs[head][-1]
        named = self._marked(head, self._named)
        pinned = self._marked(head, self._pinned)
        menu = QMenu(self)
        menu.setToolTipsVisible(True)
        rename = menu.addAction("Name this branch...")
        rename.setObjectName("renameBranchAction")
        target = named[-1] if named else last
        rename.triggered.connect(lambda: self._rename(target))
        pin = menu.addAction("Unpin" if pinned else "Pin")
        pin.setObjectName("pinBranchAction")
        pin.setToolTip("a pinned branch cannot be deleted")
        if pinned:
            pin.triggered.connect(lambda: [self.pinRequested.emit(n, False) for n in pinned])
        else:
            pin.triggered.connect(lambda: self.pinRequested.emit(last, True))
        delete = menu.addAction("Delete this branch")
        delete.setObjectName("deleteBranchAction")
        delete.triggered.connect(lambda: self.deleteRequested.emit(run[0]))
        if head in self._bold:
            delete.setEnabled(False)
            delete.setToolTip("the text is on this branch: go to another branch first")
        elif any(self._under(n, head) for n in self._pinned):
            delete.setEnabled(False)
            delete.setToolTip("a pinned branch is under this row: unpin it first")
        else:
            delete.setToolTip("delete this row and every branch under it")
        for action in (rename, pin, delete):
            action.setEnabled(action.isEnabled() and head != 0)
        menu.addSeparator()
        expand = menu.addAction("Expand from here")
        expand.setObjectName("expandHereAction")
        expand.setToolTip("add the most probable continuations of this row, with the controls above the tree")
        expand.triggered.connect(lambda: self.expandRequested.emit(last, self.controls.expand_params()))
        compare = menu.addAction("Compare with the active branch")
        compare.setObjectName("compareBranchesAction")
        compare.triggered.connect(lambda: self.compareRequested.emit(last, self._active_end()))
        compare.setEnabled(last != self._active_end())
        self._menu = menu
        return menu

    def _drop_menu(self) -> None:
        if self._menu is not None and shiboken6.isValid(self._menu):  # its caller may have deleted it already
            self._menu.deleteLater()
        self._menu = None

    def _under(self, node: int, ancestor: int) -> bool:
        while node is not None and node != ancestor:
            node = self.views[node].parent
        return node == ancestor

    def _rename(self, node: int) -> None:
        name = self.ask_name(self.views[node].name)
        if name is not None:
            self.renameRequested.emit(node, name)

    def _context_menu(self, pos) -> None:
        item = self.tree.itemAt(pos)
        if item is None:
            return
        menu = self.menu_for(item.data(0, LAST))
        menu.exec(self.tree.viewport().mapToGlobal(pos))
        self._drop_menu()


def free_rows(root: QTreeWidgetItem) -> None:
    """Free a detached tree of rows, its deepest rows first, each taken from its parent with removeChild. Deleting
    a deep tree from its root costs time quadratic in its depth (5,000 nested rows: 1.6 s), this linear (a few
    ms). Not takeChildren: PySide leaves the rows it detaches owned by C++, so they and their Python wrappers
    were never freed (~30 KB a cycle of expand, go to, delete and step)."""
    rows, level = [], [root]
    while level:
        rows.extend(level)
        level = [item.child(i) for item in level for i in range(item.childCount())]
    for item in reversed(rows[1:]):
        item.parent().removeChild(item)  # now Python's: freed with the last reference to it, childless


def _short(probability, digits: int = 2) -> str:
    """0.21, or 2e-05 where fixed digits would show 0.00 (but 0 itself stays 0.00)."""
    if probability is None:
        return "?"
    return f"{probability:.{digits}f}" if probability >= 10**-digits or probability == 0 else f"{probability:.0e}"
