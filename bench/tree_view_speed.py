"""The Tree tab with a 5,000-node tree (goal: no update, paint or scroll step over 50 ms). A synthetic tree of
engine NodeViews shaped like a real session's: a 300-token generated run, then top-3 expansions below several
of its nodes, their ids made level by level as engine/core/expand.py makes them, up to 5,000 nodes. The real
TreePanel, offscreen and shown, measures:

    opening     update_tree(new=True) with all 5,000 nodes over a tree of as many (opening a trace while one
                is shown), then processEvents and a paint; the update alone (one event); and the old tree's
                rows freed (the panel does it 250 ms later, in an event of its own)
    growing     300 updates of one new token each at the active branch's end (as generation sends them),
                each with processEvents and a paint: median and worst
    scrolling   the scrollbar stepped a page at a time through the whole tree, every row open (expandAll),
                each step painted: worst
    expansion   500 new expanded nodes below the active end in one update (a breadth-first top-3
                expansion landing), with processEvents and a paint
    one long row  a 5,000-token generation without a branch (one row), then 300 more tokens, one update
                each, with processEvents and a paint: worst

    python bench/tree_view_speed.py [--rounds 3] [--nodes 5000]
"""

import argparse
import gc
import os
import statistics
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QApplication  # noqa: E402

from engine.core.tree import NodeView  # noqa: E402

WORDS = [" mia", " has", " a", " red", " ball", ".", " ben", " goes", " to", " the", " park", "\n", " kite", " blue"]
RUN = 300  # tokens generated first: nodes 1..300, the active branch


def expansion(start: int, first_id: int, count: int, top_k: int = 3) -> list[NodeView]:
    """`count` nodes below `start`, top_k children per node, level by level (ids in the order made)."""
    views, frontier, next_id = [], [start], first_id
    while frontier and len(views) < count:
        level = []
        for parent in frontier:
            for rank in range(top_k):
                if len(views) == count:
                    break
                token = WORDS[(next_id * 7 + rank) % len(WORDS)]
                views.append(NodeView(next_id, parent, token, (0.6, 0.25, 0.1)[rank % 3], "model", expanded=True))
                level.append(next_id)
                next_id += 1
        frontier = level
    return views


def synthetic(total: int) -> tuple[list[NodeView], list[int]]:
    """A generated run, then top-3 expansions of depth 5 (363 nodes) below evenly spread nodes of it."""
    views = [NodeView(i, i - 1, WORDS[i % len(WORDS)], 0.9, "model") for i in range(1, RUN + 1)]
    points = max(1, (total - RUN) // 363 + 1)
    for index in range(points):
        room = total - len(views)
        if room <= 0:
            break
        start = 1 + index * (RUN - 2) // points
        views += expansion(start, len(views) + 1, min(363, room))
    return views, list(range(1, RUN + 1))


def settle(app, panel) -> None:
    app.processEvents()
    panel.tree.viewport().repaint()


def one_round(app, total: int) -> dict[str, float | list[float]]:
    from playground.tree.panel import TreePanel

    views, path = synthetic(total)
    panel = TreePanel()
    panel.resize(480, 800)
    panel.show()
    panel.update_tree(True, views, path)
    app.processEvents()
    figures = {}
    gc.collect()  # each figure without the garbage of the one before (a full collection here takes 10-25 ms)
    began = time.perf_counter()
    panel.update_tree(True, views, path)
    updated = time.perf_counter()
    settle(app, panel)
    figures["opening"] = (time.perf_counter() - began) * 1000
    figures["opening update"] = (updated - began) * 1000
    began = time.perf_counter()
    while panel._old_rows:  # what its timers run
        panel._drop_old_rows()
    figures["dropping"] = (time.perf_counter() - began) * 1000

    growing, next_id = [], total + 1
    gc.collect()
    for _ in range(300):
        view = NodeView(next_id, path[-1], WORDS[next_id % len(WORDS)], 0.8, "model")
        path = [*path, next_id]
        next_id += 1
        began = time.perf_counter()
        panel.update_tree(False, [view], path)
        settle(app, panel)
        growing.append((time.perf_counter() - began) * 1000)
    figures["growing"] = growing

    gc.collect()
    panel.tree.expandAll()
    bar = panel.tree.verticalScrollBar()
    bar.setValue(0)
    settle(app, panel)
    steps = []
    while bar.value() < bar.maximum():
        began = time.perf_counter()
        bar.setValue(bar.value() + bar.pageStep())
        settle(app, panel)
        steps.append((time.perf_counter() - began) * 1000)
    figures["scrolling"] = steps

    landing = expansion(path[-1], next_id, 500)
    gc.collect()
    began = time.perf_counter()
    panel.update_tree(False, landing, path)
    settle(app, panel)
    figures["expansion"] = (time.perf_counter() - began) * 1000
    figures["rows"] = sum(1 for _ in _rows(panel.tree.topLevelItem(0)))
    panel.close()
    return figures


def long_row(app) -> float:
    from playground.tree.panel import TreePanel

    panel = TreePanel()
    panel.resize(480, 800)
    panel.show()
    views = [NodeView(i, i - 1, WORDS[i % len(WORDS)], 0.9, "model") for i in range(1, 5001)]
    path = list(range(1, 5001))
    panel.update_tree(True, views, path)
    settle(app, panel)
    gc.collect()
    worst = 0.0
    for node in range(5001, 5301):
        path.append(node)
        began = time.perf_counter()
        panel.update_tree(False, [NodeView(node, node - 1, WORDS[node % len(WORDS)], 0.9, "model")], path)
        settle(app, panel)
        worst = max(worst, (time.perf_counter() - began) * 1000)
    panel.close()
    return worst


def _rows(item):
    yield item
    for i in range(item.childCount()):
        yield from _rows(item.child(i))


def span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=5000)
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    rounds = [one_round(app, args.nodes) for _ in range(args.rounds)]
    long_rows = [long_row(app) for _ in range(args.rounds)]
    rows = [
        ("opening: update_tree(new) + paint", [r["opening"] for r in rounds]),
        ("opening: update_tree(new) alone", [r["opening update"] for r in rounds]),
        ("opening: the old rows freed (250 ms later)", [r["dropping"] for r in rounds]),
        ("growing: one token, median", [statistics.median(r["growing"]) for r in rounds]),
        ("growing: one token, worst of 300", [max(r["growing"]) for r in rounds]),
        ("scrolling: one page step + paint, worst", [max(r["scrolling"]) for r in rounds]),
        ("expansion: 500 nodes in one update", [r["expansion"] for r in rounds]),
        ("one 5,000-token row: a token, worst of 300", long_rows),
    ]
    steps = len(rounds[0]["scrolling"])
    print(f"Tree tab, {args.nodes:,} nodes ({rounds[0]['rows']:,} rows at the end; {steps} page steps), "
          f"ms over {args.rounds} rounds (goal: under 50)")  # fmt: skip
    print(f"| {'figure':<42} | {'ms':>11} |")
    print(f"|{'-' * 44}|{'-' * 13}|")
    for name, values in rows:
        print(f"| {name:<42} | {span(values):>11} |")
    print(f"command: python bench/tree_view_speed.py --rounds {args.rounds} --nodes {args.nodes}")


if __name__ == "__main__":
    main()
