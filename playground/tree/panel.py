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
Deleted nodes (rare), a deleted branch brought back (undo) and a new tree rebuild every row, in bulk. Behind
another tab the rows wait, and are rebuilt once, when the tab is shown (later.py)."""

import bisect
import math

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QFont
from PySide6.QtWidgets import (
    QLabel,
    QMenu,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

from engine import NodeView

from ..token_text import shown
from ..widgets.tree_items import free_rows
from .expand_controls import ExpandControls
from .later import RowsLater
from .menus import TreeMenus
from .numbers import log10_of
from .row_edits import RowEdits
from .rows import LAST, MEASURE, UNVISITED, RowLook

DROP_AFTER_MS = 250  # a rebuilt tree's old rows are freed in an event of their own, after the new ones show
ROOT = NodeView(0, None, "", 1.0, "prompt")


class TreePanel(TreeMenus, RowEdits, RowLook, QWidget):
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
        self.measure = QLabel(MEASURE, objectName="treeMeasure")  # what every row's number is
        self.measure.setWordWrap(True)
        self.measure.setEnabled(False)  # grey: a legend
        layout = QVBoxLayout(self)
        self.controls = ExpandControls()
        self.controls.expandClicked.connect(self._expand_clicked)
        self.controls.cancelRequested.connect(self.cancelRequested)
        layout.addWidget(self.controls)
        layout.addWidget(self.summary)
        layout.addWidget(self.measure)
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
        self._later: RowsLater | None = None  # the rows wait for the panel to be shown

    def update_tree(self, new: bool, views, path) -> None:
        """views: the nodes new or changed since the last call (engine NodeViews); path: the node of each step
        of the active branch. The nodes, the path and the summary are always current; the rows are built as the
        nodes come while a person can see them, else (a tab behind another) once, when it is shown (later.py)."""
        if new:
            self._forget_all()  # the rows follow below, rebuilt
        views = sorted(views, key=lambda v: v.id)
        rebuild = new or any(self._needs_rebuild(v) for v in views)
        seen = not self._unseen()
        if seen:
            self._catch_up()
        elif self._later is None or new:
            self._later = RowsLater(self, new)
        later, draw, before = self._later, seen and not rebuild, set(self.path)
        changed, forgot = [], False
        for view in views:
            old = self.views.get(view.id)
            if old is None:
                if view.deleted or view.parent not in self.views:
                    continue  # gone before it was drawn, or an orphan
                self._ingest(view)
                if draw:
                    self._add_row(view)
                elif later is not None:
                    later.node_added(self, view.id)
            elif view != old:
                if view.deleted:
                    self._forget(view.id)
                    forgot = True
                else:
                    self.views[view.id] = view
                    self._unvisited += view.expanded - old.expanded
                    self._mark(view)
                    changed.append((old, view))
        old_end = self._active_end()
        self.path = [n for n in path if n in self.views]
        moved = new or self._active_end() != old_end
        if later is not None:
            later.path_changed(self, before, moved)
            if forgot:
                self._count_nodes()
            self._show_summary()
            return
        if rebuild:
            self._rebuild(new, scroll=moved)
            return
        for old, view in changed:
            self._changed(old, view)
        self._restyle_path()
        self._show_summary()
        if moved:
            self.tree.scrollToItem(self.row_of(self._active_end()))

    def _unseen(self) -> bool:
        """The panel is in a shown window but a person cannot see it (its tab is behind another, its dock hidden)."""
        return self.window().isVisible() and self.visibleRegion().isEmpty()

    def catch_up(self) -> None:
        """The panel may be seen now (its dock's visibilityChanged): rows that waited are built before it paints."""
        if not self._unseen():
            self._catch_up()

    def _catch_up(self) -> None:
        later, self._later = self._later, None
        if later is not None:
            self._rebuild(later.new, scroll=later.scroll, later=later)

    def showEvent(self, event) -> None:
        self._catch_up()  # before the first paint
        super().showEvent(event)

    @property
    def nodes(self) -> dict[int, NodeView]:
        """The nodes drawn, by id (the root 0 included; deleted nodes leave)."""
        return self.views

    def row_of(self, node_id: int) -> QTreeWidgetItem:
        self._catch_up()
        return self.items[self.head[node_id]]

    def run_of(self, node_id: int) -> list[int]:
        """The nodes of the row holding this node, in order."""
        self._catch_up()
        return list(self.runs[self.head[node_id]])

    def _head_of(self, item: QTreeWidgetItem) -> int:
        return self.head[item.data(0, LAST)]

    def _needs_rebuild(self, view: NodeView) -> bool:
        old = self.views.get(view.id)
        if old is None:  # a deleted branch brought back goes back in its place among its siblings
            return not view.deleted and view.id < self._newest
        drawn = (old.token, old.probability, old.source, old.parent)
        return view.deleted or drawn != (view.token, view.probability, view.source, view.parent)

    def joined(self, parent: int, child: int) -> bool:
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
        self._count += 1
        self._leaves += parent == 0 or len(self.children[parent]) > 1
        self._unvisited += view.expanded
        self._mark(view)

    def _changed(self, old: NodeView, view: NodeView) -> None:
        """A node's name, pin or expanded mark changed."""
        node = view.id
        if view.expanded != old.expanded:
            kids = self.children[node]
            for parent, child in ((view.parent, node), (node, kids[0] if len(kids) == 1 else None)):
                if child is None or parent == 0:
                    continue
                joined = self.head[child] == self.head[parent]
                if self.joined(parent, child) and not joined:
                    self._merge(parent, child)
                elif joined and not self.joined(parent, child):
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
    def _rebuild(self, new: bool = True, scroll: bool = True, later: RowsLater | None = None) -> None:
        """Every row again, in bulk: a new tree, or the same after deletions (its open rows stay open, its
        current row current); later: the rows a hidden tab did not build, open as the updates would have left
        them."""
        was_open, current = set(), None
        if not new:
            was_open = self.open_nodes() if later is None else was_open
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
        self._count_nodes()
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
            if later.opens(run) if later is not None else unvisited or first in was_open:
                opened.append(item)
            pending.extend([(item, child) for child in reversed(kids)])
        self.tree.addTopLevelItem(root)
        root.setExpanded(True)
        for item in opened:
            item.setExpanded(True)
        self._restyle_path()
        if later is not None:  # a row that turned bold opened then; one bold before keeps how it was
            for first in self._bold:
                items[first].setExpanded(later.opens(runs[first]))
        self._show_summary()
        if current in head:
            self.tree.setCurrentItem(items[head[current]])
        if scroll and self.path:
            self.tree.scrollToItem(self.row_of(self._active_end()))
        elif position:
            self.tree.doItemsLayout()  # the scrollbar's range now, to put it back where it was
            self.tree.verticalScrollBar().setValue(position)

    def open_nodes(self) -> set[int]:
        """The nodes of the rows open (by node: a row split since keeps its state in both parts, as an update
        does)."""
        return {n for h, item in self.items.items() if item.isExpanded() for n in self.runs[h]}

    def _count_nodes(self) -> None:
        self._count = len(self.views) - 1
        self._leaves = sum(1 for n, kids in self.children.items() if n and not kids)
        self._unvisited = sum(1 for v in self.views.values() if v.expanded)
        self._named = {n for n, v in self.views.items() if v.name}
        self._pinned = {n for n, v in self.views.items() if v.pinned}

    def _drop_old_rows(self) -> None:
        if self._old_rows:
            free_rows(self._old_rows.pop(0))

    def _show_summary(self) -> None:
        if not self._count:
            self.summary.setText("the branches appear here as the text grows")
            return
        text = f"{self._count} tokens in {self._leaves} branch{'es' * (self._leaves != 1)}"
        self.summary.setText(text + (f", {self._unvisited} expanded not visited" if self._unvisited else ""))

    # --- what a person does with a row -----------------------------------------------------------------
    def _chosen(self, row: QTreeWidgetItem) -> None:
        self.nodeClicked.emit(row.data(0, LAST))
