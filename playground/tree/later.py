"""A Tree tab a person cannot see (its tab behind another) builds no rows: runs back to back made and re-made
rows for nobody. Its nodes, path and summary stay current (update_tree); the rows are rebuilt once, when the tab
is shown, and open where the updates would have left them open. This keeps that, by node: the rows open when the
rows stopped being built, the rows an expansion added (open as they land), and the rows that turned bold (a row
joining the active branch opens, with the row it hangs from)."""


class RowsLater:
    def __init__(self, panel, new: bool):
        """new: a new tree (none of the rows there were is kept)."""
        self.new = new
        self.open: set[int] = set() if new else panel.open_nodes()  # nodes of the rows open
        self.ends: set[int] = set()  # the last nodes of rows opened since (a branch under them joined the path)
        self.scroll = new  # the active branch's end moved: it is scrolled to

    def node_added(self, panel, node: int) -> None:
        """After the node is in the panel's model: a row that goes on stays as it was; a new row is closed, but
        an expansion's, which opens as it lands."""
        view = panel.views[node]
        if panel.joined(view.parent, node):
            if view.parent in self.open:
                self.open.add(node)
        elif view.expanded:
            self.open.add(node)

    def path_changed(self, panel, before: set[int], moved: bool) -> None:
        """The nodes new on the active branch: their rows turned bold, and open, and so does the row above."""
        new = [n for n in panel.path if n not in before]
        self.open.update(new)
        if new:
            self.ends.add(panel.views[new[0]].parent)
        self.scroll = self.scroll or moved

    def opens(self, run: list[int]) -> bool:
        """Whether the row of this run is open once rebuilt."""
        return run[0] in self.open or run[-1] in self.ends
