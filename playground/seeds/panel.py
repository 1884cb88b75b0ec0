"""The Seeds tab: run many seeds from where the text is (or from the selected token, as Continue from here would
keep it), with the controls' settings (Session.run_seeds, in the worker), and see what they wrote: the distinct continuations, most frequent first, with their counts. A
click on one puts its first seed in the controls, so Generate (or Step) writes exactly that continuation.
Under the list, the tree the seeds drew (SeedRun.nodes): a run of tokens every seed there shares is one row,
each row with how many seeds passed through it, the most taken first; a path at least half the seeds took is
bold. The widget only lays out; the controller runs it (runRequested) and fills it (show_run)."""

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)  # fmt: skip

from engine import MAX_SEEDS

from ..token_text import shown
from ..widgets.tree_items import free_rows

SHOWN = 50  # continuations listed


def start_text(at: int, token: str) -> str:
    """Where seeds from an earlier step start, as the Seeds tab and the status bar say it."""
    return f"from step {at}, {token!r}"


class SeedsPanel(QWidget):
    runRequested = Signal(int)  # how many seeds
    seedChosen = Signal(int)  # the first seed that wrote the clicked continuation

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("seedsPanel")
        self.count = QSpinBox(objectName="seedCount")
        self.count.setRange(1, MAX_SEEDS)
        self.count.setValue(100)
        self.count.setToolTip("how many seeds (0, 1, 2, ...) continue the text")
        self.run_button = QPushButton("Run seeds from here", objectName="runSeedsButton")
        self.run_button.setToolTip("each seed continues the text with the controls' settings, as Generate would "
                                   "with that seed (from the selected token, as Continue from here would: the text "
                                   "stays as it is); rules do not act")  # fmt: skip
        self.run_button.clicked.connect(lambda: self.runRequested.emit(self.count.value()))
        self.summary = QLabel("", objectName="seedSummary")
        self.summary.setWordWrap(True)
        self.completions = QListWidget(objectName="seedCompletions")
        self.completions.setWordWrap(True)
        self.completions.setToolTip("click one to put its first seed in the controls: Generate then writes it")
        self.completions.itemClicked.connect(lambda item: self.seedChosen.emit(item.data(Qt.ItemDataRole.UserRole)))
        self.seed_tree = QTreeWidget(objectName="seedTree")
        self.seed_tree.setHeaderHidden(True)
        self.seed_tree.setUniformRowHeights(True)
        self.seed_tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.seed_tree.setToolTip("the tree the seeds drew: ×n seeds passed through a row; a run of tokens they "
                                  "all share is one row; bold: at least half the seeds")  # fmt: skip
        self.start = ""  # where the run shown started, when not at the end of the text (start_text)

        row = QHBoxLayout()
        row.addWidget(QLabel("Seeds"))
        row.addWidget(self.count)
        row.addWidget(self.run_button, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.summary)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.completions)
        split.addWidget(self.seed_tree)
        layout.addWidget(split, 1)

    def set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)

    def clear(self, why: str = "") -> bool:
        """Forget the run shown (the text it started from changed), saying why -> whether there was one."""
        if not self.completions.count() and not self.seed_tree.topLevelItemCount():
            return False
        self.completions.clear()
        if self.seed_tree.topLevelItemCount():
            free_rows(self.seed_tree.takeTopLevelItem(0))
        self.summary.setText(why)
        self.start = ""
        return True

    def show_run(self, run, seconds: float, measure: dict | None, start: str = "") -> None:
        """A SeedRun: its continuations by frequency, and a summary (the story model's measure, if given);
        start: where the seeds started when it is not the end of the text ("from step 12, ' ball'")."""
        completions = run.completions()
        first_seed = {}
        for seed in run.seeds:
            first_seed.setdefault(run.continuation(seed), seed)
        self.start = start
        parts = [f"{len(run.seeds)} seeds{' ' + start if start else ''}: {len(completions)} different continuations, a tree of "
                 f"{len(run.nodes) - 1} tokens ({seconds:.2f} s)"]  # fmt: skip
        if measure is not None:
            parts.append(f"{measure['well_formed']} wrote a well-formed story, {measure['keeps_color_and_object']} "
                         "kept the first sentence's colour and object")  # fmt: skip
        self.summary.setText("; ".join(parts))
        self.completions.clear()
        for text, count in completions[:SHOWN]:
            seed = first_seed[text]
            item = QListWidgetItem(f"{count:>4} ×  {text.strip() or '(nothing: the text ended)'}")
            item.setData(Qt.ItemDataRole.UserRole, seed)
            item.setToolTip(f"seed {seed} writes this: <code>{html.escape(repr(text))}</code>")
            self.completions.addItem(item)
        self._show_tree(run)

    def _show_tree(self, run) -> None:
        """The seeds' tree, built detached and attached at once (thousands of nodes in a few ms)."""
        if self.seed_tree.topLevelItemCount():
            free_rows(self.seed_tree.takeTopLevelItem(0))
        children: dict[int, list] = {node.id: [] for node in run.nodes}
        for node in run.nodes[1:]:
            children[node.parent].append(node)
        for kids in children.values():
            kids.sort(key=lambda node: -node.count)  # stable: ties in the order drawn
        wide = len(run.seeds) / 2
        bold = self.seed_tree.font()
        bold.setBold(True)
        root = QTreeWidgetItem([f"×{len(run.seeds)}  (the text: the seeds start here)"])
        opened = [root]
        pending = [(root, node) for node in reversed(children[0])]
        while pending:
            parent_row, first = pending.pop()
            run_nodes = [first]  # every seed here goes on the same way: one row
            while len(children[run_nodes[-1].id]) == 1:
                run_nodes.append(children[run_nodes[-1].id][0])
            text = "".join(shown(node.token) for node in run_nodes)
            row = QTreeWidgetItem(parent_row, [f"×{first.count}  {text}"])
            wrote = html.escape(repr(text))
            row.setToolTip(0, f"{first.count} of {len(run.seeds)} seeds wrote <code>{wrote}</code> here")
            if first.count >= wide:
                row.setFont(0, bold)
                opened.append(row)
            pending.extend((row, node) for node in reversed(children[run_nodes[-1].id]))
        self.seed_tree.addTopLevelItem(root)
        for row in opened:
            row.setExpanded(True)
