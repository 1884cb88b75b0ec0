"""The Tree tab's rows edited as nodes come (TreePanel.update_tree, while a person can see the rows): a row goes on,
splits where a branch starts in its middle, or takes its only child row back. A row is a run of nodes, each node's
row found by its head (panel.head); rows taken out of the view and put back are opened again where they were open
(Qt forgets that of a row it no longer shows)."""

from engine import NodeView

from ..token_text import shown
from ..widgets.tree_items import expanded_under


class RowEdits:
    """A mixin of TreePanel: its model (views, children, runs, head, items, _body) and its row look (rows.py)."""

    def _add_row(self, view: NodeView) -> None:
        """A new node's row: its parent's row goes on, splits, or gets a child row."""
        node, parent = view.id, view.parent
        siblings = self.children[parent]
        head = self.head[parent]
        if self.joined(parent, node):  # the row goes on
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
        opened = expanded_under(row)  # rows taken out of the view forget that they were open
        item.addChildren(row.takeChildren())
        row.addChild(item)
        item.setExpanded(row.isExpanded())
        for below in opened:
            below.setExpanded(True)
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
        opened = expanded_under(item)
        grandchildren = item.takeChildren()
        row.removeChild(item)
        row.addChildren(grandchildren)
        for below in opened:
            below.setExpanded(True)
        self._refresh(head)
