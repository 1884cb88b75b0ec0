"""The Tree tab: every branch of the session (engine Session.tree) under the prompt. A run of tokens with no
branch in it is one row (its text), so a long generation is one line and a branch point shows its
alternatives as rows under it; the rows of the active branch are bold. Click a row (or press Return on it) to
make the branch that ends there the text: the view, chart and strip follow. Arrow keys walk the rows (up and
down, left and right to fold and unfold). The widget only draws; the worker sends the nodes as they come
(update_tree) and the controller asks for a branch (nodeClicked)."""

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

MARKS = {"forced": "forced", "rule": "rule", "tool": "tool"}  # the steps the model did not choose


def shown(token: str) -> str:  # as the chart labels tokens: spaces as middle dots, a newline as ↵
    return token.replace(" ", "·").replace("\n", "↵")


class TreePanel(QWidget):
    nodeClicked = Signal(int)  # the node whose branch should become the text (0: the prompt alone)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("treePanel")
        self.tree = QTreeWidget(objectName="branchTree")
        self.tree.setHeaderHidden(True)
        self.tree.setUniformRowHeights(True)
        self.tree.setToolTip("every branch the session took: click a row to make the branch that ends there the text")
        self.tree.itemClicked.connect(self._chosen)
        self.tree.itemActivated.connect(self._chosen)
        self.summary = QLabel("", objectName="treeSummary")
        self.summary.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.tree, 1)
        self.clear()

    def clear(self) -> None:
        self.nodes: dict[int, tuple] = {}  # id -> (parent, token, probability, source)
        self.children: dict[int, list[int]] = {0: []}
        self.path: list[int] = []
        self.rows: dict[int, QTreeWidgetItem] = {}  # the row of each node
        self._rebuild()

    def update_tree(self, new: bool, nodes, path) -> None:
        """Nodes (id, parent, token, probability, source) not sent before; path: the node of each step now."""
        if new:
            self.clear()
        for node_id, parent, token, probability, source in nodes:
            self.nodes[node_id] = (parent, token, probability, source)
            self.children[parent].append(node_id)
            self.children[node_id] = []
        self.path = list(path)
        self._rebuild()

    def row_of(self, node_id: int) -> QTreeWidgetItem:
        return self.rows[node_id]

    # --- drawing -------------------------------------------------------------------------------------
    def _rebuild(self) -> None:
        self.tree.clear()
        self.rows = {}
        root = QTreeWidgetItem(self.tree, ["(prompt)"])
        root.setData(0, Qt.ItemDataRole.UserRole, 0)
        self.rows[0] = root
        on_path = set(self.path)
        pending = [(root, child) for child in reversed(self.children[0])]
        while pending:
            parent_row, first = pending.pop()
            run = [first]  # a run of nodes with no branch in it: one row
            while len(self.children[run[-1]]) == 1:
                run.append(self.children[run[-1]][0])
            row = QTreeWidgetItem(parent_row, [self._text(run)])
            row.setData(0, Qt.ItemDataRole.UserRole, run[-1])
            row.setToolTip(0, self._tip(run))
            if run[0] in on_path:
                font = row.font(0)
                font.setBold(True)
                row.setFont(0, font)
                parent_row.setExpanded(True)
            for node_id in run:
                self.rows[node_id] = row
            pending.extend((row, child) for child in reversed(self.children[run[-1]]))
        root.setExpanded(True)
        if self.path:
            self.tree.scrollToItem(self.rows[self.path[-1]])
        leaves = sum(1 for children in self.children.values() if not children) if self.nodes else 0
        self.summary.setText(f"{len(self.nodes)} tokens in {leaves} branch{'es' * (leaves != 1)}" if self.nodes
                             else "the branches appear here as the text grows")  # fmt: skip

    def _text(self, run: list[int]) -> str:
        first = self.nodes[run[0]]
        mark = f" [{MARKS[first[3]]}]" if first[3] in MARKS else ""
        return f"{first[2]:.2f}{mark}  " + "".join(shown(self.nodes[i][1]) for i in run)

    def _tip(self, run: list[int]) -> str:
        return "\n".join(f"{self.nodes[i][1]!r}  p {self.nodes[i][2]:.4f}  {self.nodes[i][3]}" for i in run[:40])

    def _chosen(self, row: QTreeWidgetItem) -> None:
        self.nodeClicked.emit(row.data(0, Qt.ItemDataRole.UserRole))
