"""The Tree tab's widgets on their own, with hand-made NodeViews (no model): a run of tokens is one row and a
branch in its middle splits it; an update re-draws only what changed and ends where a rebuild would; the
active branch bold, the marks, the leaves' sequence probability; the arrow keys walk the tree as a loom does;
the context menu and the expansion controls ask for what they say; the branch comparison and the seeds' tree
show what they are given."""

import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QTreeWidgetItem, QWidget

from engine.core.seeds import SeedNode, SeedRun
from engine.core.steps import Candidates, Step
from engine.core.tree import NodeView
from playground.seeds.panel import SeedsPanel
from playground.tree.branch_compare import BranchCompare
from playground.tree.numbers import probability_text
from playground.tree.panel import TreePanel


def chain(first: int, parent: int, tokens: str, p: float = 0.5, **marks) -> list[NodeView]:
    """One node per character, each under the one before."""
    views = []
    for i, token in enumerate(tokens):
        views.append(NodeView(first + i, parent if i == 0 else first + i - 1, token, p, "model", **marks))
    return views


def rows(panel: TreePanel) -> list[tuple[int, str, bool]]:
    """Every row, depth first in the tree's order: (depth, text, bold)."""
    found, pending = [], [(panel.tree.topLevelItem(0), 0)]
    while pending:
        item, depth = pending.pop()
        found.append((depth, item.text(0), item.font(0).bold()))
        pending.extend((item.child(i), depth + 1) for i in reversed(range(item.childCount())))
    return found


def texts(panel: TreePanel) -> list[str]:
    return [text for _depth, text, _bold in rows(panel)]


@pytest.fixture
def panel(qtbot):
    widget = TreePanel()
    qtbot.addWidget(widget)
    widget.resize(500, 600)
    widget.show()
    return widget


def step(token: str, p: float | None, source: str = "model") -> Step:
    return Step(token=token, token_id=0, probability=p, source=source, model_probability=p, model_rank=1,
                model_choice=token, model_choice_id=0, candidates=Candidates((), (), ()))  # fmt: skip


# --- rows ---------------------------------------------------------------------------------------------------
def test_a_run_is_one_row_and_a_branch_in_its_middle_splits_it(panel):
    panel.update_tree(True, chain(1, 0, "abcd"), [1, 2, 3, 4])
    assert texts(panel) == ["(prompt)", "0.50  abcd  ⟶ p 6.2e-02"]
    row = panel.row_of(3)
    assert all(panel.row_of(n) is row for n in (1, 2, 4)) and panel.run_of(2) == [1, 2, 3, 4]
    panel.update_tree(False, chain(5, 4, "ef"), [1, 2, 3, 4, 5, 6])  # the run goes on
    assert texts(panel) == ["(prompt)", "0.50  abcdef  ⟶ p 1.6e-02"] and panel.row_of(6) is row
    panel.update_tree(False, [NodeView(7, 2, "X", 0.25, "forced")], [1, 2, 7])  # a branch after "b"
    assert rows(panel) == [(0, "(prompt)", False), (1, "0.50  ab", True), (2, "0.50  cdef  ⟶ p 1.6e-02", False),
                           (2, "0.25, forced  X  ⟶ p 6.2e-02", True)]  # fmt: skip
    assert panel.row_of(1) is row and panel.row_of(2) is row  # the row keeps its start, its tail moved
    assert panel.run_of(4) == [3, 4, 5, 6] and panel.row_of(6).parent() is row
    assert panel.row_of(7).parent() is row
    assert panel.row_of(7).data(0, Qt.ItemDataRole.UserRole) == 7 and row.data(0, Qt.ItemDataRole.UserRole) == 2


def test_a_split_row_takes_the_old_rows_children(panel):
    panel.update_tree(True, [*chain(1, 0, "abc"), NodeView(4, 3, "x", 0.5, "model"), NodeView(5, 3, "y", 0.5, "model")],
                      [1, 2, 3, 4])  # fmt: skip
    assert [d for d, _t, _b in rows(panel)] == [0, 1, 2, 2]
    panel.update_tree(False, [NodeView(6, 1, "z", 0.5, "model")], [1, 2, 3, 4])
    assert rows(panel) == [(0, "(prompt)", False), (1, "0.50  a", True), (2, "0.50  bc", True),
                           (3, "0.50  x  ⟶ p 6.2e-02", True), (3, "0.50  y  ⟶ p 6.2e-02", False),
                           (2, "0.50  z  ⟶ p 0.25", False)]  # fmt: skip


def test_updates_change_rows_in_place_and_scroll_only_when_the_end_moves(panel, monkeypatch):
    panel.update_tree(True, chain(1, 0, "abc"), [1, 2, 3])
    row = panel.row_of(1)
    monkeypatch.setattr(panel, "_rebuild", lambda *a, **k: pytest.fail("an update must not rebuild the rows"))
    scrolled = []
    monkeypatch.setattr(panel.tree, "scrollToItem", lambda item, *a: scrolled.append(item))
    panel.update_tree(False, [NodeView(4, 1, "q", 0.5, "model")], [1, 2, 3])  # the end stays
    assert scrolled == [] and panel.row_of(1) is row
    panel.update_tree(False, [], [1, 4])
    assert scrolled == [panel.row_of(4)]
    panel.update_tree(False, [NodeView(2, 1, "b", 0.5, "model", name="kept")], [1, 4])
    assert scrolled == [panel.row_of(4)] and panel.row_of(2).text(0).startswith("«kept» ")


def test_the_active_branch_is_bold_and_a_path_change_restyles(panel):
    panel.update_tree(True, [*chain(1, 0, "ab"), *chain(3, 1, "xy"), *chain(5, 0, "q")], [1, 2])
    bold = {text for _d, text, b in rows(panel) if b}
    assert bold == {"0.50  a", "0.50  b  ⟶ p 0.25"}
    panel.update_tree(False, [], [1, 3, 4])
    assert {text for _d, text, b in rows(panel) if b} == {"0.50  a", "0.50  xy  ⟶ p 0.12"}
    assert not panel.row_of(2).font(0).bold() and panel.row_of(4).font(0).bold()
    panel.update_tree(False, [], [5])
    assert [text for _d, text, b in rows(panel) if b] == ["0.50  q  ⟶ p 0.50"]


def test_deleting_a_node_removes_its_subtree(panel):
    panel.update_tree(True, [*chain(1, 0, "ab"), *chain(3, 1, "xy"), *chain(5, 4, "m"), *chain(6, 4, "n")], [1, 2])
    assert len(rows(panel)) == 6
    gone = [NodeView(n, p, t, 0.5, "model", deleted=True) for n, p, t in ((3, 1, "x"), (4, 3, "y"), (5, 4, "m"), (6, 4, "n"))]  # fmt: skip
    panel.update_tree(False, gone, [1, 2])
    assert texts(panel) == ["(prompt)", "0.50  ab  ⟶ p 0.25"]  # "a" has one child again: one row
    assert panel.summary.text() == "2 tokens in 1 branch"
    with pytest.raises(KeyError):
        panel.row_of(3)
    panel.update_tree(False, chain(7, 2, "c"), [1, 2, 7])  # and it goes on incrementally
    assert texts(panel) == ["(prompt)", "0.50  abc  ⟶ p 0.12"]
    panel.update_tree(False, [NodeView(2, 1, "B", 0.1, "model")], [1, 2, 7])  # a record completed later
    assert texts(panel) == ["(prompt)", "0.50  aBc  ⟶ p 2.5e-02"]


def test_a_deleted_branch_brought_back_returns_to_its_place(panel):
    """Issue 24 (undo a delete): the nodes come back under their old ids, their rows where they were, before the
    branches made after them."""
    views = [*chain(1, 0, "a"), *chain(2, 1, "xy"), *chain(4, 1, "m"), *chain(5, 1, "n")]
    panel.update_tree(True, views, [1, 4])
    before = rows(panel)
    assert [text for _d, text, _b in before] == ["(prompt)", "0.50  a", "0.50  xy  ⟶ p 0.12", "0.50  m  ⟶ p 0.25",
                                                 "0.50  n  ⟶ p 0.25"]  # fmt: skip
    panel.update_tree(False, [NodeView(n, p, t, 0.5, "model", deleted=True) for n, p, t in ((2, 1, "x"), (3, 2, "y"))],
                      [1, 4])  # fmt: skip
    assert texts(panel)[2:] == ["0.50  m  ⟶ p 0.25", "0.50  n  ⟶ p 0.25"]
    panel.update_tree(False, views[1:3], [1, 4])  # undone: the same nodes, not deleted
    assert rows(panel) == before and panel.summary.text() == "5 tokens in 3 branches"
    assert panel.run_of(3) == [2, 3] and panel.row_of(3).parent() is panel.row_of(1)


def test_marks_pins_names_and_unvisited_expansions(panel):
    panel.update_tree(True, [*chain(1, 0, "ab"), NodeView(3, 2, "r", 1.0, "rule"), NodeView(4, 2, "t", 0.5, "tool"),
                             NodeView(5, 1, "e", 0.2, "expanded", expanded=True),
                             NodeView(6, 5, "f", 0.5, "expanded", expanded=True)], [1, 2, 3])  # fmt: skip
    assert texts(panel) == ["(prompt)", "0.50  a", "0.50  b", "1.00, rule  r  ⟶ p 0.25",
                            "0.50, tool  t  ⟶ p 0.12", "0.20  ef  ⟶ p 5.0e-02"]  # fmt: skip
    expanded = panel.row_of(5)
    assert panel.is_unvisited(expanded) and not panel.is_unvisited(panel.row_of(3))
    assert expanded.font(0).italic() and expanded.foreground(0).color().name() == "#808080"
    assert not panel.row_of(4).font(0).italic() and panel.row_of(4).foreground(0).style() == Qt.BrushStyle.NoBrush
    assert panel.summary.text() == "6 tokens in 3 branches, 2 expanded not visited"
    # walked into: the mark goes, and the walked node joins its parent's row (one child, both walked)
    panel.update_tree(False, [NodeView(5, 1, "e", 0.2, "expanded", pinned=True, name="hero")], [1, 5])
    assert texts(panel)[-2:] == ["⚑ «hero» 0.20  e", "0.50  f  ⟶ p 5.0e-02"]
    assert not panel.is_unvisited(panel.row_of(5)) and panel.is_unvisited(panel.row_of(6))
    assert not panel.row_of(5).font(0).italic() and panel.row_of(6).font(0).italic()
    assert panel.row_of(5).font(0).bold() and not panel.row_of(6).font(0).bold()
    assert panel.summary.text() == "6 tokens in 3 branches, 1 expanded not visited"
    panel.update_tree(False, [NodeView(6, 5, "f", 0.5, "expanded")], [1, 5, 6])
    assert texts(panel)[-1] == "⚑ «hero» 0.20  ef  ⟶ p 5.0e-02" and panel.summary.text() == "6 tokens in 3 branches"


def test_walking_into_an_expansion_joins_its_rows_to_the_branch(panel, qapp):
    # the active leaf "ab", then an expansion: "c" alone, then "d", then "e" and "f" under it
    views = {v.id: v for v in chain(1, 0, "ab")}
    views.update({v.id: v for v in [*chain(3, 2, "cd", expanded=True), *chain(5, 4, "e", expanded=True),
                                    *chain(6, 4, "f", expanded=True)]})  # fmt: skip
    panel.update_tree(True, list(views.values()), [1, 2])
    assert rows(panel) == [(0, "(prompt)", False), (1, "0.50  ab", True), (2, "0.50  cd", False),
                           (3, "0.50  e  ⟶ p 3.1e-02", False),
                           (3, "0.50  f  ⟶ p 3.1e-02", False)]  # fmt: skip
    for walked, path in ((3, [1, 2, 3]), (4, [1, 2, 3, 4]), (6, [1, 2, 3, 4, 6])):
        views[walked] = NodeView(**{**views[walked].__dict__, "expanded": False})
        panel.update_tree(False, [views[walked]], path)
        fresh = TreePanel()
        fresh.update_tree(True, list(views.values()), path)
        assert rows(panel) == rows(fresh)
        fresh.deleteLater()
    assert rows(panel) == [(0, "(prompt)", False), (1, "0.50  abcd", True), (2, "0.50  e  ⟶ p 3.1e-02", False),
                           (2, "0.50  f  ⟶ p 3.1e-02", True)]  # fmt: skip
    assert panel.row_of(3) is panel.row_of(1) and panel.row_of(6).parent() is panel.row_of(1)


def test_a_leaf_shows_its_whole_sequence_probability(panel):
    probabilities = [0.9, 0.5, 0.01, 0.32]
    views = [NodeView(i + 1, i, "w", p, "model") for i, p in enumerate(probabilities)]
    views.append(NodeView(5, 2, "v", 0.2, "model"))
    panel.update_tree(True, views, [1, 2, 3, 4])
    assert panel.row_of(4).text(0).endswith(f"⟶ p {math.prod(probabilities):.1e}")
    assert panel.row_of(4).text(0).endswith("⟶ p 1.4e-03") and panel.row_of(5).text(0).endswith("⟶ p 9.0e-02")
    assert "⟶" not in panel.row_of(1).text(0)  # not a leaf
    assert "the product of its steps' p" in panel.row_tip(panel.row_of(4))
    long = [NodeView(i + 1, i, "w", 0.01, "model") for i in range(200)]  # 1e-400: far below a float
    panel.update_tree(True, long, [200])
    assert panel.row_of(200).text(0).endswith("⟶ p 1.0e-400")
    assert probability_text(math.log10(3.14e-4)) == "3.1e-04" and probability_text(-math.inf) == "0"


def test_arrow_keys_walk_the_tree_like_a_loom(panel, qtbot):
    # (prompt) > "ab" > ["cd", "e" > ["f", "g"]]
    panel.update_tree(True, [*chain(1, 0, "ab"), *chain(3, 2, "cd"), *chain(5, 2, "e"), *chain(6, 5, "f"),
                             *chain(7, 5, "g")], [1, 2, 5, 7])  # fmt: skip
    clicked = []
    panel.nodeClicked.connect(clicked.append)

    def key(k):
        qtbot.keyClick(panel.tree, k)
        return clicked[-1] if clicked else None

    assert key(Qt.Key.Key_Left) == 6  # from the active end ("g"): its left sibling
    assert panel.tree.currentItem() is panel.row_of(6) and panel.row_of(6).isSelected()
    count = len(clicked)
    key(Qt.Key.Key_Left)
    assert len(clicked) == count  # no sibling further left
    assert key(Qt.Key.Key_Right) == 7
    assert key(Qt.Key.Key_Up) == 5
    assert key(Qt.Key.Key_Left) == 4  # "cd": its last node
    count = len(clicked)
    key(Qt.Key.Key_Down)
    assert len(clicked) == count  # a leaf: no child row
    assert key(Qt.Key.Key_Up) == 2
    assert key(Qt.Key.Key_Down) == 5  # the child row on the active branch, not the first
    assert key(Qt.Key.Key_Down) == 7
    panel.update_tree(False, [], [1, 2, 3, 4])
    assert key(Qt.Key.Key_Up) == 5 and key(Qt.Key.Key_Up) == 2
    assert key(Qt.Key.Key_Down) == 4  # now "cd" is on the active branch
    assert key(Qt.Key.Key_Up) == 2 and key(Qt.Key.Key_Up) == 0  # the prompt
    assert key(Qt.Key.Key_Return) == 0
    panel.tree.setCurrentItem(panel.row_of(6))
    assert key(Qt.Key.Key_Enter) == 6


def test_a_click_on_a_row_goes_to_its_last_node(panel, qtbot):
    panel.update_tree(True, [*chain(1, 0, "ab"), *chain(3, 1, "xyz")], [1, 2])
    with qtbot.waitSignal(panel.nodeClicked) as blocker:
        rect = panel.tree.visualItemRect(panel.row_of(4))
        qtbot.mouseClick(panel.tree.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert blocker.args == [5]


# --- the context menu and the expansion controls -------------------------------------------------------------
def action(menu, name: str) -> QAction:
    found = [a for a in menu.actions() if a.objectName() == name]
    assert len(found) == 1, name
    return found[0]


def test_the_context_menu_asks_for_what_it_says(panel, monkeypatch):
    panel.update_tree(True, [*chain(1, 0, "ab"), *chain(3, 1, "xyz"), NodeView(6, 0, "q", 0.5, "model", pinned=True)],
                      [1, 2])  # fmt: skip
    got = []
    for signal in ("renameRequested", "pinRequested", "deleteRequested", "expandRequested", "compareRequested"):
        getattr(panel, signal).connect(lambda *args, s=signal: got.append((s, *args)))
    menu = panel.menu_for(4)  # the row "xyz" (nodes 3, 4, 5)
    monkeypatch.setattr(panel, "ask_name", lambda current: "second")
    action(menu, "renameBranchAction").trigger()
    action(menu, "pinBranchAction").trigger()
    action(menu, "deleteBranchAction").trigger()
    panel.controls.top_k.setValue(0)
    panel.controls.coverage.setValue(0.9)
    action(menu, "expandHereAction").trigger()
    action(menu, "compareBranchesAction").trigger()
    assert got == [("renameRequested", 5, "second"), ("pinRequested", 5, True), ("deleteRequested", 3),
                   ("expandRequested", 5, {"top_k": None, "coverage": 0.9, "depth": 4, "budget": 200, "raw": False}),
                   ("compareRequested", 5, 2)]  # fmt: skip
    assert action(menu, "pinBranchAction").text() == "Pin"
    got.clear()
    monkeypatch.setattr(panel, "ask_name", lambda current: None)  # cancelled
    action(menu, "renameBranchAction").trigger()
    assert got == []
    pinned = panel.menu_for(6)
    assert action(pinned, "pinBranchAction").text() == "Unpin"
    assert not action(pinned, "deleteBranchAction").isEnabled()  # a pinned branch stays
    action(pinned, "pinBranchAction").trigger()
    assert got == [("pinRequested", 6, False)]
    active = panel.menu_for(2)  # the text is on it
    assert not action(active, "deleteBranchAction").isEnabled()
    assert not action(active, "compareBranchesAction").isEnabled()  # it is the active branch itself
    root = panel.menu_for(0)
    assert not action(root, "renameBranchAction").isEnabled() and action(root, "expandHereAction").isEnabled()


def test_a_named_row_renames_its_named_node(panel, monkeypatch):
    panel.update_tree(True, [NodeView(1, 0, "a", 0.5, "model", name="start"), *chain(2, 1, "bc")], [1, 2, 3])
    asked = []
    monkeypatch.setattr(panel, "ask_name", lambda current: asked.append(current) or "")
    got = []
    panel.renameRequested.connect(lambda *args: got.append(args))
    action(panel.menu_for(3), "renameBranchAction").trigger()
    assert asked == ["start"] and got == [(1, "")]


def test_the_expand_button_asks_with_the_controls(panel, qtbot):
    panel.update_tree(True, [*chain(1, 0, "ab"), *chain(3, 1, "xy")], [1, 2])
    panel.controls.top_k.setValue(5)
    panel.controls.depth.setValue(7)
    panel.controls.budget.setValue(1000)
    panel.controls.raw.setChecked(True)
    with qtbot.waitSignal(panel.expandRequested) as blocker:
        qtbot.mouseClick(panel.controls.expand_button, Qt.MouseButton.LeftButton)
    assert blocker.args == [2, {"top_k": 5, "coverage": None, "depth": 7, "budget": 1000, "raw": True}]
    assert list(blocker.args[1]) == ["top_k", "coverage", "depth", "budget", "raw"]
    panel.tree.setCurrentItem(panel.row_of(3))  # a selected row: from its end
    with qtbot.waitSignal(panel.expandRequested) as blocker:
        qtbot.mouseClick(panel.controls.expand_button, Qt.MouseButton.LeftButton)
    assert blocker.args[0] == 4
    assert panel.controls.top_k.text() != "off" and panel.controls.coverage.text() == "off"


def test_expanding_shows_cancel_and_progress(panel, qtbot):
    assert (
        panel.controls.cancel_button.isHidden()
        and panel.controls.progress.isHidden()
        and panel.controls.expand_button.isEnabled()
    )
    panel.controls.set_expanding(True)
    assert (
        not panel.controls.cancel_button.isHidden()
        and panel.controls.cancel_button.isEnabled()
        and not panel.controls.progress.isHidden()
    )
    assert not panel.controls.expand_button.isEnabled()
    panel.controls.show_progress(30, 120)
    assert (panel.controls.progress.value(), panel.controls.progress.maximum()) == (30, 120)
    with qtbot.waitSignal(panel.cancelRequested):
        qtbot.mouseClick(panel.controls.cancel_button, Qt.MouseButton.LeftButton)
    panel.controls.set_expanding(False)
    assert (
        panel.controls.cancel_button.isHidden()
        and panel.controls.progress.isHidden()
        and panel.controls.expand_button.isEnabled()
    )


# --- an update ends where a rebuild would ---------------------------------------------------------------------
def branch(views: dict[int, NodeView], node: int) -> list[int]:
    path = []
    while node:
        path.insert(0, node)
        node = views[node].parent
    return path


operations = st.lists(st.tuples(st.sampled_from(["add", "add", "add", "walk", "mark", "delete", "path"]),
                                st.integers(0, 10_000), st.booleans()), max_size=60)  # fmt: skip


def tree_update(views: dict[int, NodeView], path: list[int], kind: str, pick: int, flag: bool):
    """One operation on the tree: (the nodes to send, the path after it); views is updated."""
    alive = [n for n, v in views.items() if not v.deleted]
    sent = []
    if kind == "add":  # mostly under one of the last few nodes (runs grow, and branch near their end)
        nodes, back = [0, *alive], pick % 7
        parent = nodes[-1 - back % len(nodes) if back < 6 else pick % len(nodes)]
        node = len(views) + 1
        sent.append(NodeView(node, parent, "abcdefgh"[pick % 8], 0.1 + (pick % 9) / 10, "model", expanded=flag))
    elif kind == "walk" and alive:  # a goto walks every node of the branch (flag: one node flips instead)
        node = alive[pick % len(alive)]
        if flag:
            sent.append(NodeView(**{**views[node].__dict__, "expanded": not views[node].expanded}))
        else:
            path = branch(views, node)
            sent += [NodeView(**{**views[n].__dict__, "expanded": False}) for n in path if views[n].expanded]
    elif kind == "mark" and alive:
        node = alive[pick % len(alive)]
        sent.append(NodeView(**{**views[node].__dict__, "pinned": flag, "name": "n" * (pick % 3)}))
    elif kind == "delete" and alive and pick % 4 == 0:
        node = alive[pick % len(alive)]
        gone = [node]
        for n, v in views.items():  # children come after their parents
            if v.parent in gone and not v.deleted:
                gone.append(n)
        sent += [NodeView(**{**views[n].__dict__, "deleted": True}) for n in gone]
    elif kind == "path" and alive:
        path = branch(views, alive[pick % len(alive)])
    for view in sent:
        views[view.id] = view
    return sent, [n for n in path if not views[n].deleted]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations)
def test_an_incremental_update_ends_where_a_rebuild_does(qapp, ops):
    live = TreePanel()
    views: dict[int, NodeView] = {}
    path: list[int] = []
    for kind, pick, flag in ops:
        sent, path = tree_update(views, path, kind, pick, flag)
        live.update_tree(False, sent, path)
    fresh = TreePanel()
    fresh.update_tree(True, list(views.values()), path)
    assert rows(live) == rows(fresh)
    assert live.summary.text() == fresh.summary.text()
    for n, v in views.items():
        if not v.deleted:
            assert live.run_of(n) == fresh.run_of(n)
            assert live.is_unvisited(live.row_of(n)) == fresh.is_unvisited(fresh.row_of(n))
            assert live.row_of(n).font(0).italic() == live.is_unvisited(live.row_of(n))
            assert live.row_of(n).foreground(0).color() == fresh.row_of(n).foreground(0).color()
            row = live.row_of(n)
            assert row.data(0, Qt.ItemDataRole.UserRole) == live.run_of(n)[-1]
    for panel in (live, fresh):
        panel.deleteLater()


def looks(panel: TreePanel) -> list[tuple]:
    """Every row as a person sees it: depth, text, bold, italic, open (with rows under it), current."""
    found, pending, current = [], [(panel.tree.topLevelItem(0), 0)], panel.tree.currentItem()
    while pending:
        item, depth = pending.pop()
        found.append((depth, item.text(0), item.font(0).bold(), item.font(0).italic(),
                      item.isExpanded() and item.childCount() > 0, item is current))  # fmt: skip
        pending.extend((item.child(i), depth + 1) for i in reversed(range(item.childCount())))
    return found


seen_operations = st.lists(st.tuples(st.sampled_from(["add", "add", "add", "walk", "mark", "delete", "path", "hide",
                                                      "show", "close", "open", "current"]),
                                     st.integers(0, 10_000), st.booleans()), max_size=60)  # fmt: skip


# derandomize: one CI run failed here once (its example lost to the INTERNALERROR pyproject's filterwarnings now
# prevents); 8 seeds x 200 and 3,000 examples did not find it again: the same examples every run until it is found
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)  # fmt: skip
@given(seen_operations)
# found by the run of 2026-12-07: a row split above an expansion's open row closed it in the panel seen all along
@example(ops=[("add", 0, False), ("add", 0, False), ("add", 0, True), ("add", 0, False), ("hide", 0, False),
              ("add", 3, False)])  # fmt: skip
def test_a_hidden_tab_builds_its_rows_when_shown_as_the_updates_would_have(qtbot, ops):
    """Behind another tab the panel builds no rows (runs back to back paid for rows nobody saw); once shown, its
    rows are those a panel updated all along shows: the same texts, bold, italic, open rows and current row, the
    rows a person closed still closed."""
    live, window = TreePanel(), QWidget()
    hidden = TreePanel(window)  # in a shown window, hidden (as a dock's tab behind another)
    for panel in (live, window):
        qtbot.addWidget(panel)
        panel.show()
    views: dict[int, NodeView] = {}
    path: list[int] = []
    for kind, pick, flag in ops:
        if kind in ("hide", "show"):
            hidden.setVisible(kind == "show")
        elif kind in ("close", "open", "current"):  # what a person does to the rows they see
            alive = [n for n, v in views.items() if not v.deleted]
            if hidden.isVisible() and alive:
                for panel in (live, hidden):
                    row = panel.row_of(alive[pick % len(alive)])
                    row.setExpanded(kind == "open") if kind != "current" else panel.tree.setCurrentItem(row)
        elif not (kind == "walk" and flag):  # (a node turns visited only as the path walks into it)
            sent, path = tree_update(views, path, kind, pick, flag)
            for panel in (live, hidden):
                panel.update_tree(False, sent, path)
            assert hidden.summary.text() == live.summary.text() and hidden.nodes == live.nodes
    hidden.show()
    assert looks(hidden) == looks(live)


def test_a_hidden_tab_keeps_its_nodes_and_summary_and_builds_no_rows_until_shown(qtbot):
    window = QWidget()
    qtbot.addWidget(window)
    panel = TreePanel(window)
    window.show()
    panel.hide()
    panel.update_tree(True, chain(1, 0, "abcdef"), [1, 2, 3, 4, 5, 6])
    panel.update_tree(False, chain(7, 3, "xy"), [1, 2, 3, 7, 8])
    assert len(panel.nodes) == 9 and panel.path == [1, 2, 3, 7, 8]
    assert panel.summary.text() == "8 tokens in 2 branches"
    assert panel.tree.topLevelItem(0).childCount() == 0  # before: every row made as the nodes came
    panel.show()
    assert texts(panel) == ["(prompt)", "0.50  abc", "0.50  def  ⟶ p 1.6e-02", "0.50  xy  ⟶ p 3.1e-02"]
    assert [bold for _depth, _text, bold in rows(panel)] == [False, True, False, True]
    panel.row_of(1).setExpanded(False)  # a person closes the active branch's first row, then looks elsewhere
    panel.hide()
    panel.update_tree(False, chain(9, 5, "z"), [1, 2, 3, 4, 5, 9])  # a branch in the middle of "def" is the text
    panel.show()
    assert panel.row_of(1).isExpanded() and panel.row_of(4).isExpanded()  # as an update opens them
    assert texts(panel) == ["(prompt)", "0.50  abc", "0.50  de", "0.50  f  ⟶ p 1.6e-02", "0.50  z  ⟶ p 1.6e-02",
                            "0.50  xy  ⟶ p 3.1e-02"]  # fmt: skip


# --- the branch comparison and the seeds' tree ----------------------------------------------------------------
def test_the_branch_comparison_lines_up_two_branches(qtbot):
    dialog = BranchCompare()
    qtbot.addWidget(dialog)
    assert dialog.objectName() == "branchCompare" and dialog.windowTitle() == "Compare branches"
    assert not dialog.isModal()
    left = [step(" the", 0.5), step("\n", 0.4, "forced")]
    right = [step(" a", 0.734), step(" red", 0.1), step(" ball", None, "rule")]
    dialog.show_branches("x" * 300 + "mia has", left, right, "this branch", "the active branch")
    assert dialog.prefix.text().endswith("x" * 100 + "mia has  ⟶") and len(dialog.prefix.text()) < 220
    table = dialog.table
    assert (table.rowCount(), table.columnCount()) == (3, 4)
    assert [table.horizontalHeaderItem(c).text() for c in range(4)] == ["this branch", "p", "the active branch", "p"]
    cells = [[table.item(r, c).text() for c in range(4)] for r in range(3)]
    assert cells == [["·the", "0.500", "·a", "0.734"], ["↵", "0.400", "·red", "0.100"], ["", "", "·ball", "?"]]
    assert "forced" in table.item(1, 0).toolTip() and "rule" in table.item(2, 2).toolTip()
    assert table.item(1, 0).background().color() != table.item(0, 0).background().color()
    assert table.item(0, 0).background().style() == Qt.BrushStyle.NoBrush
    assert dialog.summary.text() == "left: 2 tokens, p 0.20 · right: 3 tokens, p ?"
    dialog.show_branches("", [], right[:2], "l", "r")
    assert table.rowCount() == 2 and dialog.summary.text() == "left: 0 tokens, p 1.00 · right: 2 tokens, p 7.3e-02"


def test_the_seeds_tree_shows_how_many_seeds_took_each_way(qtbot):
    seeds_panel = SeedsPanel()
    qtbot.addWidget(seeds_panel)
    # 4 seeds: three write "ab" (two then "c", one "d"), one writes "x"
    nodes = (SeedNode(0, None, None, "", 4), SeedNode(1, 0, 1, "x", 1), SeedNode(2, 0, 2, "a", 3),
             SeedNode(3, 2, 3, " b", 3), SeedNode(4, 3, 4, "d", 1), SeedNode(5, 3, 5, "c", 2))  # fmt: skip
    steps = {0: ("a", " b", "c"), 1: ("a", " b", "d"), 2: ("x",), 3: ("a", " b", "c")}
    run = SeedRun("mia", (0, 1, 2, 3), {s: tuple(step(t, 0.5) for t in ts) for s, ts in steps.items()}, nodes)
    seeds_panel.show_run(run, 0.1, None)
    tree = seeds_panel.seed_tree
    assert tree.objectName() == "seedTree"
    found, pending = [], [(tree.topLevelItem(0), 0)]
    while pending:
        item, depth = pending.pop()
        found.append((depth, item.text(0), item.font(0).bold()))
        pending.extend((item.child(i), depth + 1) for i in reversed(range(item.childCount())))
    assert [(d, t.split("  ")[0], b) for d, t, b in found] == [(0, "×4", False), (1, "×3", True), (2, "×2", True),
                                                                 (2, "×1", False), (1, "×1", False)]  # fmt: skip
    assert [t for _d, t, _b in found[1:]] == ["×3  a·b", "×2  c", "×1  d", "×1  x"]
    assert seeds_panel.completions.count() == 3  # the list is still there


def test_a_large_seed_tree_builds_fast(qtbot):
    import time

    seeds_panel = SeedsPanel()
    qtbot.addWidget(seeds_panel)
    nodes, steps = [SeedNode(0, None, None, "", 5000)], {}
    for seed in range(1000):  # 1,000 seeds, each five tokens of its own after a shared first: 5,001 nodes
        if seed == 0:
            nodes.append(SeedNode(1, 0, 1, "s", 1000))
        parent = 1
        for k in range(5):
            nodes.append(SeedNode(len(nodes), parent, k, f"{seed}-{k}" if k == 0 else "t", 1))
            parent = len(nodes) - 1
        steps[seed] = tuple(step(t, 0.5) for t in ["s", f"{seed}-0", "t", "t", "t", "t"])
    run = SeedRun("", tuple(range(1000)), steps, tuple(nodes))
    began = time.perf_counter()
    seeds_panel._show_tree(run)
    assert time.perf_counter() - began < 0.5
    assert seeds_panel.seed_tree.topLevelItem(0).child(0).childCount() == 1000
    assert isinstance(seeds_panel.seed_tree.topLevelItem(0).child(0).child(0), QTreeWidgetItem)


def test_a_deep_tree_is_replaced(panel):
    views = []  # 2,500 branch points one under another: 2,500 nested rows
    for i in range(2500):
        spine = 2 * i + 1
        views += [NodeView(spine, 0 if i == 0 else spine - 2, "s", 0.9, "model"), NodeView(spine + 1, spine, "l", 0.1, "model")]  # fmt: skip
    panel.update_tree(True, views, [1])
    assert panel.row_of(4999).parent() is panel.row_of(4997)
    panel.update_tree(True, chain(1, 0, "ab"), [1, 2])
    while panel._old_rows:
        panel._drop_old_rows()  # what the panel's timer runs (bench/tree_view_speed.py times it)
    assert texts(panel) == ["(prompt)", "0.50  ab  ⟶ p 0.25"] and not panel._old_rows


def live_rows() -> int:
    """Every QTreeWidgetItem this process holds (a freed row leaves no wrapper behind)."""
    import gc

    gc.collect()
    return sum(1 for thing in gc.get_objects() if isinstance(thing, QTreeWidgetItem))


def shown_rows(tree) -> int:
    pending, count = [tree.invisibleRootItem()], 0
    while pending:
        item = pending.pop()
        count += item.childCount()
        pending.extend(item.child(i) for i in range(item.childCount()))
    return count


def test_rows_replaced_by_a_rebuild_or_a_new_seed_run_are_freed(qtbot, panel):
    before = live_rows()  # the prompt's row, and what other tests left (no event runs here to change that)
    for first in range(1, 200, 40):  # a new tree, then a deleted branch (a rebuild) in it, five times
        views = chain(first, 0, "abcd") + chain(first + 4, first + 1, "xy") + chain(first + 6, first + 1, "zw")
        panel.update_tree(True, views, [first, first + 1, first + 4])
        panel.update_tree(False, [NodeView(first + 6, first + 1, "z", 0.5, "model", deleted=True)], [first])
    while panel._old_rows:
        panel._drop_old_rows()
    assert live_rows() - before + 1 == shown_rows(panel.tree) == 4  # the prompt, "a·b", "cd", "xy" (before: 36)
    seeds_panel = SeedsPanel()
    qtbot.addWidget(seeds_panel)
    nodes = (SeedNode(0, None, None, "", 2), SeedNode(1, 0, 1, "a", 1), SeedNode(2, 0, 2, "b", 1))
    run = SeedRun("", (0, 1), {0: (step("a", 0.5),), 1: (step("b", 0.5),)}, nodes)
    before = live_rows()
    for _ in range(5):
        seeds_panel._show_tree(run)
    seeds_panel.clear("gone")
    assert live_rows() == before and seeds_panel.seed_tree.topLevelItemCount() == 0  # before: 10 rows kept


def test_the_panel_keeps_one_context_menu_at_a_time(qtbot, panel):
    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QApplication, QMenu

    panel.update_tree(True, chain(1, 0, "ab") + chain(3, 1, "x"), [1, 2])
    for _ in range(5):
        action(panel.menu_for(3), "pinBranchAction").trigger()  # triggered, never exec'd: left to the panel
    panel.menu_for(2).deleteLater()  # or deleted by its caller
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    panel.menu_for(3)
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert len(panel.findChildren(QMenu)) == 1  # before: 6, with 42 actions
