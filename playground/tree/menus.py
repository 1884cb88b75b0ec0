"""The Tree tab's keys and context menu: the arrow keys walk the tree as a loom does and go there; a row's menu
names, pins, deletes, expands or compares its branch. A mixin of TreePanel (it uses the panel's rows and signals)."""

import shiboken6
from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QInputDialog, QMenu, QToolTip

from .rows import LAST


class TreeMenus:
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
        self._catch_up()  # rows a hidden tab has not built yet
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
