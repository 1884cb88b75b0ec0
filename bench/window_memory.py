"""The real window, offscreen, on the story model, through many full cycles of the Tree tab: expand the tree
from the text's end (Expand button), go to a leaf of the expansion (a row's click: the panel's nodeClicked),
delete another leaf's branch (its context menu's Delete, as a right-click shows it), Step (Step button); Reset
(Reset button) and a new Generate every 25 cycles. Prints the process's RSS every --every cycles and the
growth per cycle (KB/cycle) after the first --warmup cycles (caches and first-use allocations settle), and
over the second half of the run. With --diagnose it also prints the Python object types and the QObjects under the window whose counts
grew from the warmup to the end (and with --trace, tracemalloc's lines that grew most: slow).

    python bench/window_memory.py [--cycles 1000] [--every 100] [--warmup 100] [--reset-every 25] [--menu-kept]
                                  [--diagnose [--trace]]

Goal: flat, a few KB/cycle at most after the warmup (issue 25 measured ~94 KB/cycle, 146 -> 237 MB over 1,000).
"""

import argparse
import collections
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TOKEN_PLAYGROUND_DATA", tempfile.mkdtemp(prefix="window-memory-"))  # never the user's autosave

from PySide6.QtCore import QEvent, QObject, QSettings, Qt  # noqa: E402
from PySide6.QtGui import QAction  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402
from PySide6.QtWidgets import QApplication, QPushButton, QSpinBox  # noqa: E402

import engine  # noqa: E402

PROMPT = "mia has a red ball."
WAIT_S = 30.0


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def wait_until(condition, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the window did not get there in time")
        QApplication.processEvents()
        QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)  # as the main loop does (QTest.qWait too)
        time.sleep(0.001)


def click(window, name: str) -> None:
    QTest.mouseClick(window.findChild(QPushButton, name), Qt.MouseButton.LeftButton)


class Cycler:
    """Drives one window through the cycle, by the paths a person's clicks take."""

    def __init__(self, window, menu_kept: bool = False):
        self.window, self.panel, self.menu_kept = window, window.tree_panel, menu_kept
        self.expanded = None
        window.controller.branches.expanded.connect(lambda result: setattr(self, "expanded", result))
        for name, value in (("expandTopK", 2), ("expandDepth", 2), ("expandBudget", 6)):
            window.findChild(QSpinBox, name).setValue(value)
        window.controls.max_tokens.setValue(8)
        window.controls.temperature.setValue(1.0)

    def idle(self) -> bool:
        controller = self.window.controller
        return not controller.running and not controller.known.discarding

    def new_session(self, seed: int) -> None:
        window = self.window
        click(window, "resetButton")
        window.controls.prompt.setPlainText(PROMPT)
        window.controls.seed.setValue(seed)
        finished = []
        window.controller.runFinished.connect(finished.append)
        click(window, "generateButton")
        wait_until(lambda: finished and self.idle())
        window.controller.runFinished.disconnect(finished.append)

    def cycle(self) -> None:
        window, panel = self.window, self.panel
        self.expanded = None
        window.show_panel(panel)
        panel.tree.clearSelection()  # Expand grows from the text's end
        click(window, "expandButton")
        wait_until(lambda: self.expanded is not None and self.idle())
        result = self.expanded
        wait_until(lambda: all(n in panel.views for n in result.nodes))
        leaves = [node for node, _p in result.leaves]
        if len(leaves) < 2:
            return
        panel.nodeClicked.emit(leaves[0])  # a row's click
        wait_until(lambda: panel.path and panel.path[-1] == leaves[0] and self.idle())
        other = next((n for n in leaves[1:] if n in panel.views and n not in panel.path), None)
        if other is not None:
            self.delete(other)
            wait_until(lambda: other not in panel.views and self.idle())
        steps = window.token_view.step_count()
        click(window, "stepButton")
        wait_until(lambda: self.idle() and (window.token_view.step_count() != steps or window.controller.feed.stopped))

    def delete(self, node: int) -> None:
        """The row's context menu, its Delete chosen; then the menu goes as _context_menu lets it go after exec()
        (with --menu-kept, as the tests leave it: with the panel)."""
        menu = self.panel.menu_for(node)
        menu.findChild(QAction, "deleteBranchAction").trigger()
        if not self.menu_kept:
            menu.deleteLater()


def type_counts() -> collections.Counter:
    gc.collect()
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


def qobject_counts(window) -> collections.Counter:
    counts = collections.Counter()
    for child in window.findChildren(QObject):
        counts[type(child).__name__] += 1
    counts["QTreeWidgetItem (rows)"] = count_rows(window.tree_panel.tree)
    return counts


def count_rows(tree) -> int:
    pending, total = [tree.invisibleRootItem()], 0
    while pending:
        item = pending.pop()
        total += item.childCount()
        pending.extend(item.child(i) for i in range(item.childCount()))
    return total


def grown(before: collections.Counter, after: collections.Counter, top: int = 12) -> str:
    lines = sorted(((after[k] - before[k], k) for k in after if after[k] > before[k]), reverse=True)[:top]
    return "\n".join(f"    +{n:>7}  {k}" for n, k in lines) or "    (none)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--reset-every", type=int, default=25)
    parser.add_argument("--menu-kept", action="store_true", help="leave each context menu to the panel, as tests do")
    parser.add_argument("--diagnose", action="store_true", help="object counts that grew (and --trace: tracemalloc)")
    parser.add_argument("--trace", action="store_true", help="with --diagnose: tracemalloc's growing lines (slow)")
    args = parser.parse_args()

    from playground import MainWindow

    _app = QApplication.instance() or QApplication(sys.argv)  # kept: the window needs it
    prefs = QSettings(str(Path(tempfile.mkdtemp()) / "bench.ini"), QSettings.Format.IniFormat)
    window = MainWindow(model=engine.load_model(), settings=prefs)
    window.show()
    cycler = Cycler(window, menu_kept=args.menu_kept)
    marks: dict[int, float] = {}
    snapshot = types = qobjects = None
    started = time.perf_counter()
    for cycle in range(args.cycles + 1):
        if cycle % args.reset_every == 0:
            cycler.new_session(seed=cycle)
        if cycle == args.warmup:
            if args.diagnose:
                qobjects = qobject_counts(window)  # first: it makes wrappers of the window's children
                types = type_counts()
            if args.diagnose and args.trace:
                tracemalloc.start(8)
                snapshot = tracemalloc.take_snapshot()
        if cycle % args.every == 0:
            gc.collect()
            marks[cycle] = rss_mb()
            print(f"cycle {cycle:>5}: RSS {marks[cycle]:7.1f} MB  ({time.perf_counter() - started:6.1f} s)", flush=True)
        if cycle < args.cycles:
            cycler.cycle()
    first = max(c for c in marks if c <= args.warmup)
    middle = max(c for c in marks if c <= (first + max(marks)) // 2)
    for since in dict.fromkeys((first, middle)):  # a one-off step of the allocator shows in the first, not both
        per_cycle = (marks[max(marks)] - marks[since]) * 1024 / max(1, max(marks) - since)
        print(
            f"growth since cycle {since}: {per_cycle:.1f} KB/cycle ({marks[since]:.1f} -> {marks[max(marks)]:.1f} MB)"
        )
    if args.diagnose:
        qobjects_now = qobject_counts(window)
        print("Python objects that grew since the warmup:\n" + grown(types, type_counts()))
        print("QObjects under the window that grew:\n" + grown(qobjects, qobjects_now))
    if snapshot is not None:
        print("tracemalloc, the lines that grew most:")
        for stat in tracemalloc.take_snapshot().compare_to(snapshot, "traceback")[:8]:
            print(f"    {stat.size_diff / 1024:+9.1f} KB {stat.count_diff:+7} blocks")
            for line in stat.traceback.format()[-8:]:
                print("       ", line)
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
