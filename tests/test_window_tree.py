"""The Tree tab (issue 16): every branch of the session under the prompt, a run of tokens without a branch as
one row, the active branch bold; a click on a row makes its branch the text again. Real window, story model."""

import re

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QCheckBox, QLabel, QPushButton, QSpinBox, QTableWidget, QTreeWidget
from test_window import WAIT, child, generate, type_prompt

import engine


def rows(tree: QTreeWidget) -> list:
    found, pending = [], [tree.topLevelItem(0)]
    while pending:
        item = pending.pop()
        found.append(item)
        pending.extend(item.child(i) for i in range(item.childCount()))
    return found


def test_a_new_branch_keeps_the_old_one_and_a_click_brings_it_back(qtbot, window):
    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.temperature.setValue(1.0)
    window.controls.seed.setValue(3)
    generate(qtbot, window)
    first_text, first_steps = window.token_view.whole_text(), window.token_view.step_count()
    tree = child(window, QTreeWidget, "branchTree")
    window.show_panel(window.tree_panel)  # its rows are built once it is seen
    assert len(rows(tree)) == 2  # the prompt, and the run as one row
    assert child(window, QLabel, "treeSummary").text() == f"{first_steps} tokens in 1 branch"
    old_leaf = window.tree_panel.path[-1]
    # a branch: click the 6th token, another seed, Continue from here
    view = window.token_view
    start, _end = view._span(5)
    cursor = view.textCursor()
    cursor.setPosition(start + 1)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.cursorRect(cursor).center())
    window.controls.seed.setValue(11)
    with qtbot.waitSignal(window.controller.runFinished, timeout=WAIT):
        qtbot.mouseClick(child(window, QPushButton, "continueButton"), Qt.MouseButton.LeftButton)
    assert window.token_view.whole_text() != first_text
    qtbot.waitUntil(lambda: len(rows(tree)) == 4, timeout=WAIT)  # prompt, the shared start, two branches
    bold = [row for row in rows(tree) if row.font(0).bold()]
    assert len(bold) == 2  # the shared start and the new branch
    old_row = window.tree_panel.row_of(old_leaf)
    assert not old_row.font(0).bold()
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        qtbot.mouseClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=tree.visualItemRect(old_row).center())
    window.controller.flush()
    assert window.token_view.whole_text() == first_text and window.token_view.step_count() == first_steps
    qtbot.waitUntil(lambda: window.tree_panel.row_of(old_leaf).font(0).bold(), timeout=WAIT)


def expand_from_end(qtbot, window, top_k=3, depth=3, budget=20, raw=True):
    panel = window.tree_panel
    window.show_panel(panel)
    child(window, QSpinBox, "expandTopK").setValue(top_k)
    child(window, QSpinBox, "expandDepth").setValue(depth)
    child(window, QSpinBox, "expandBudget").setValue(budget)
    child(window, QCheckBox, "expandRaw").setChecked(raw)
    with qtbot.waitSignal(window.controller.branches.expanded, timeout=WAIT) as done:
        qtbot.mouseClick(child(window, QPushButton, "expandButton"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not window.controller.running, timeout=WAIT)
    qtbot.waitUntil(lambda: all(n in panel.views for n in done.args[0].nodes), timeout=WAIT)
    return done.args[0]


def test_expanding_walking_in_naming_pinning_deleting_comparing_and_exporting(qtbot, window, tmp_path, monkeypatch):
    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.max_tokens.setValue(6)
    generate(qtbot, window)
    text, panel = window.token_view.whole_text(), window.tree_panel
    result = expand_from_end(qtbot, window)
    assert len(result.nodes) == 20 and result.levels == 3  # 3 + 9 and the 8 likeliest of the third level
    assert window.message_label.text().startswith("Expanded: 20 new nodes, 3 levels, in")
    assert "20 expanded not visited" in child(window, QLabel, "treeSummary").text()
    assert window.token_view.whole_text() == text  # the text stays where it was
    leaf = result.leaves[0][0]
    leaf_row = panel.row_of(leaf)
    assert leaf_row.font(0).italic() and panel.is_unvisited(leaf_row)
    # walk into the likeliest leaf: the view shows its branch, its nodes are no longer marked
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        qtbot.mouseClick(panel.tree.viewport(), Qt.MouseButton.LeftButton,
                         pos=panel.tree.visualItemRect(leaf_row).center())  # fmt: skip
    window.controller.flush()
    session = window.session()
    assert session.path[-1] == leaf and window.token_view.whole_text() == session.text != text
    qtbot.waitUntil(lambda: "17 expanded not visited" in child(window, QLabel, "treeSummary").text(), timeout=WAIT)
    # name and pin the leaf; deleting its branch is refused; another branch goes
    monkeypatch.setattr(panel, "ask_name", lambda current: "likeliest")
    panel.menu_for(leaf).findChild(QAction, "renameBranchAction").trigger()
    qtbot.waitUntil(lambda: "«likeliest»" in panel.row_of(leaf).text(0), timeout=WAIT)
    panel.menu_for(leaf).findChild(QAction, "pinBranchAction").trigger()
    qtbot.waitUntil(lambda: panel.row_of(leaf).text(0).startswith("⚑"), timeout=WAIT)
    other = next(n for n, _ in result.leaves if n not in session.path)
    on_text = panel.menu_for(session.path[-3]).findChild(QAction, "deleteBranchAction")
    assert not on_text.isEnabled() and "go to another branch first" in on_text.toolTip()
    window.controller.branches.deleteRequested.emit(leaf)  # past the menu, the engine refuses it too
    qtbot.waitUntil(lambda: "go to another branch first" in window.message_label.text(), timeout=WAIT)
    panel.menu_for(other).findChild(QAction, "deleteBranchAction").trigger()
    qtbot.waitUntil(lambda: other not in panel.views, timeout=WAIT)
    assert other in window.session().tree.deleted
    # two branches side by side
    second = next(n for n, _ in result.leaves if n in panel.views and n != leaf)
    panel.menu_for(second).findChild(QAction, "compareBranchesAction").trigger()
    qtbot.waitUntil(lambda: window.controller.branches.dialog is not None
                    and window.controller.branches.dialog.isVisible(), timeout=WAIT)  # fmt: skip
    table = window.controller.branches.dialog.findChild(QTableWidget, "branchCompareTable")
    assert table.rowCount() >= 1 and table.item(0, 0) is not None
    # the whole tree and the active branch alone, each replays bit for bit
    window.export_trace(tmp_path / "all.json")
    window.export_trace(tmp_path / "one.json", "active")
    whole, alone = engine.load_trace(tmp_path / "all.json"), engine.load_trace(tmp_path / "one.json")
    assert len(alone["tree"]["nodes"]) == len(alone["steps"]) + 1 < len(whole["tree"]["nodes"])
    assert whole["tree"]["nodes"][leaf]["name"] == "likeliest" and whole["tree"]["nodes"][leaf]["pinned"]
    for trace in (whole, alone):
        assert engine.replay(trace, window.model).identical


def test_cancel_keeps_the_levels_finished(qtbot, window):
    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.max_tokens.setValue(4)
    generate(qtbot, window)
    for name, value in (("expandTopK", 6), ("expandDepth", 8), ("expandBudget", 10000)):
        child(window, QSpinBox, name).setValue(value)
    child(window, QCheckBox, "expandRaw").setChecked(True)
    window.show_panel(window.tree_panel)
    with qtbot.waitSignal(window.controller.worker.tree.expandProgress, timeout=WAIT):
        qtbot.mouseClick(child(window, QPushButton, "expandButton"), Qt.MouseButton.LeftButton)
    assert window.stop_reason.text() == "Expanding the tree..."
    cancel = child(window, QPushButton, "cancelExpandButton")
    assert cancel.isVisible() and cancel.isEnabled()
    with qtbot.waitSignal(window.controller.branches.expanded, timeout=WAIT) as done:
        qtbot.mouseClick(cancel, Qt.MouseButton.LeftButton)
    result = done.args[0]
    assert result.cancelled and result.levels < 8 and len(result.nodes) < 10000
    assert window.message_label.text().startswith(f"Cancelled: kept {result.new} new nodes, the {result.levels} levels")
    qtbot.waitUntil(lambda: not cancel.isVisible() and window.stop_reason.text() == "", timeout=WAIT)
    session = window.session()
    assert len(session.tree.nodes) == len(session.path) + 1 + len(result.nodes)
    assert engine.replay(session.trace(), window.model).identical


def test_expanding_a_finished_story_and_a_refused_expansion_that_moves_nothing(qtbot, window):
    type_prompt(qtbot, window, "mia has a red ball.")
    generate(qtbot, window)
    session, text, panel = window.session(), window.token_view.whole_text(), window.tree_panel
    assert session.stopped == "end of story"
    end = session.path[-1]
    steps = window.token_view.step_count()
    result = expand_from_end(qtbot, window, depth=2, budget=6)  # from the step before the end: its other choices
    assert "from the step before the text's end (the text keeps its end" in window.message_label.text()
    assert session.tree.nodes[result.nodes[0]].parent == session.path[-2] == session.tree.nodes[end].parent
    assert end in result.nodes and result.new == 6 - 1  # the end token is among the likeliest: it was there
    window.controller.flush()  # issue 43, item 7: the first Expand took the end token out of the view
    assert session.path[-1] == end and window.token_view.step_count() == steps
    assert window.token_view.whole_text() == text == session.text
    # a row that is not the text's, a depth past the context: refused before anything moves
    before = (session.text, len(session.actions), list(session.path))
    panel.tree.setCurrentItem(panel.row_of(result.nodes[0]))
    child(window, QSpinBox, "expandDepth").setValue(64)
    qtbot.mouseClick(child(window, QPushButton, "expandButton"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "goes past the context" in window.message_label.text(), timeout=WAIT)
    qtbot.waitUntil(lambda: not window.controller.branches.expanding, timeout=WAIT)
    assert (session.text, len(session.actions), list(session.path)) == before
    assert window.token_view.whole_text() == text and child(window, QPushButton, "expandButton").isEnabled()


def test_expand_the_tree_here_starts_at_the_token_selected_in_the_text(qtbot, window):
    """Issue 43, item 7: Go > Expand the tree here (Ctrl+E) took the Tree's own selection and said "Expanded: 0 new
    nodes" at the text's end; "here" is the token selected in the text."""
    from test_window import token_point

    type_prompt(qtbot, window, "mia has a red ball.")
    generate(qtbot, window)
    session, view = window.session(), window.token_view
    here = 3
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=token_point(view, here))
    assert view.selected == here
    child(window, QCheckBox, "expandRaw").setChecked(True)  # the model's own top 3, not greedy's one
    child(window, QSpinBox, "expandDepth").setValue(2)
    with qtbot.waitSignal(window.controller.branches.expanded, timeout=WAIT) as done:
        window.findChild(QAction, "expandAction").trigger()
    result = done.args[0]
    assert result.new > 0 and session.tree.nodes[result.nodes[0]].parent == session.path[here]


def press_undo(qtbot, widget):
    widget.setFocus()
    qtbot.keyClick(widget, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)


def test_ctrl_z_undoes_tree_edits_and_leaves_typing_to_the_text_boxes(qtbot, window, monkeypatch, tmp_path):
    """Issue 24: Delete asked nothing and could not be undone. Edit > Undo tree edit (Ctrl+Z) takes back the last
    delete, name or pin: the row comes back and the status bar says what was undone; Ctrl+Z in a text box with
    the focus still undoes the typing there."""
    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.max_tokens.setValue(6)
    generate(qtbot, window)
    panel, session = window.tree_panel, window.session()
    result = expand_from_end(qtbot, window)
    action = child(window, QAction, "undoTreeEditAction")
    assert action.shortcut().toString() == "Ctrl+Z"
    assert "Edit" in [a.text().replace("&", "") for a in window.menuBar().actions()]
    other = next(n for n, _ in result.leaves if n not in session.path)
    first = panel.run_of(other)[0]
    row_text = panel.row_of(other).text(0)
    panel.menu_for(other).findChild(QAction, "deleteBranchAction").trigger()
    qtbot.waitUntil(lambda: other not in panel.views, timeout=WAIT)
    assert window.message_label.text() == "Branch deleted: Edit > Undo tree edit (Ctrl+Z) brings it back"
    press_undo(qtbot, panel.tree)
    qtbot.waitUntil(lambda: other in panel.views, timeout=WAIT)
    assert panel.row_of(other).text(0) == row_text and panel.run_of(other)[0] == first  # the same nodes, ids
    assert panel.is_unvisited(panel.row_of(other))  # still an expansion nobody walked into
    assert window.message_label.text().startswith("Undone: deleting the branch from")
    assert "it is back in the tree" in window.message_label.text()
    # a name, then typing in the text boxes: their Ctrl+Z undoes the typing, the name stays
    monkeypatch.setattr(panel, "ask_name", lambda current: "keep")
    panel.menu_for(other).findChild(QAction, "renameBranchAction").trigger()
    qtbot.waitUntil(lambda: "«keep»" in panel.row_of(other).text(0), timeout=WAIT)
    qtbot.keyClicks(window.insert_edit, " ben")
    press_undo(qtbot, window.insert_edit)
    assert window.insert_edit.text() != " ben"
    prompt = window.controls.prompt
    qtbot.keyClicks(prompt, " x")
    press_undo(qtbot, prompt)
    assert prompt.toPlainText() != "mia has a red ball. x"
    qtbot.wait(200)  # nothing reached the worker: the name is there
    assert "«keep»" in panel.row_of(other).text(0) and session.tree.names[other] == "keep"
    press_undo(qtbot, panel.tree)
    qtbot.waitUntil(lambda: "«keep»" not in panel.row_of(other).text(0), timeout=WAIT)
    assert window.message_label.text().startswith("Undone: naming the branch at") and "no name again" in (
        window.message_label.text()
    )
    action.trigger()  # from the menu: nothing left to undo, and it says so
    qtbot.waitUntil(lambda: "Nothing to undo" in window.message_label.text(), timeout=WAIT)
    assert "#e74c3c" not in window.message_label.styleSheet()  # said, not an error
    window.export_trace(tmp_path / "undo.json")
    trace = engine.load_trace(tmp_path / "undo.json")
    assert [a["kind"] for a in trace["actions"]].count("undo") == 2
    assert engine.replay(trace, window.model).identical


def test_expand_on_a_fresh_prompt_grows_the_tree_from_the_prompt(qtbot, window):
    """Issue 24: Expand on a fresh prompt was refused ("generate or step first"); expanding from the prompt is
    the first thing a loom user does. A new prompt after a run starts its own session the same way."""
    type_prompt(qtbot, window, "ben has a blue kite.")
    result = expand_from_end(qtbot, window, top_k=3, depth=2, budget=12)
    session, panel = window.session(), window.tree_panel
    assert session.prompt == "ben has a blue kite." and session.steps == []
    assert sorted(session.tree.children(0)) == sorted(result.nodes[:3]) and len(result.nodes) == 12
    assert window.message_label.text().startswith("Expanded: 12 new nodes, 2 levels")
    assert window.token_view.whole_text() == "ben has a blue kite." and window.token_view.step_count() == 0
    assert all(n in panel.views for n in result.nodes)
    assert "12 expanded not visited" in child(window, QLabel, "treeSummary").text()
    # another prompt, with a row of the old tree selected: the new session's tree grows from its prompt
    panel.tree.setCurrentItem(panel.row_of(result.nodes[-1]))
    type_prompt(qtbot, window, "leo has a tan mug.")
    second = expand_from_end(qtbot, window, top_k=2, depth=1, budget=5)
    assert window.session().prompt == "leo has a tan mug." and window.session() is not session
    assert [window.session().tree.nodes[n].parent for n in second.nodes] == [0, 0]


def test_expand_on_a_fresh_prompt_works_with_token_healing_on(qtbot, window):
    """Healing is on by default for GGUF files: Expand on a fresh prompt must not be refused then (the children
    keep to the text healing cut from the prompt)."""
    window.controls.samplers.heal.setChecked(True)
    type_prompt(qtbot, window, "mia has a red ball. mia goes to the pa")
    result = expand_from_end(qtbot, window, top_k=3, depth=2, budget=12)
    assert result.levels == 2 and window.message_label.text().startswith(f"Expanded: {len(result.nodes)} new nodes")
    tokens = [window.session().tree.nodes[n].step.token for n in window.session().tree.children(0)]
    assert " park" in tokens and all(" pa".startswith(t) or t.startswith(" pa") for t in tokens)


def test_a_forced_branch_shows_the_models_probability(qtbot, window):
    """Issue 24: a forced branch's row said "p 0" (at temperature 0 the chain gives a token it did not choose
    nothing); it shows the model's probability, marked as such."""
    from test_window import click_bar, token_point

    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.max_tokens.setValue(5)
    generate(qtbot, window)
    view = window.token_view
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=token_point(view, 2))
    with qtbot.waitSignal(window.controller.idle, timeout=WAIT):
        click_bar(qtbot, window, 3)  # another token at the third step: a forced branch
    window.controller.flush()
    session, panel = window.session(), window.tree_panel
    forced = session.steps[2]
    assert forced.source == "forced" and forced.probability == 0.0 < forced.model_probability
    node = session.path[2]
    qtbot.waitUntil(lambda: node in panel.views, timeout=WAIT)
    shown = re.match(r"(\S+), forced  ", panel.row_of(node).text(0))  # was "0.00 [forced]"
    assert shown and float(shown[1]) == pytest.approx(forced.model_probability, rel=0.2) and float(shown[1]) > 0
    assert panel.findChild(QLabel, "treeMeasure").text().startswith("p: the model's own probability")
    tip = re.search(r"p (\S+)  forced", panel.row_tip(panel.row_of(node)))
    assert tip and float(tip[1]) == pytest.approx(forced.model_probability, rel=0.2)


def test_runs_behind_another_tab_build_no_tree_rows_and_the_tab_shows_them_when_raised(qtbot, window):
    """Story after story (and a branch) with the Tree tab behind the Rules tab: its nodes and summary keep up, but
    no row is made for nobody to see; raised, it shows what a Tree tab seen all along shows."""
    from test_tree_panel import looks
    from test_window_autosave import STORY_STARTS, runs_back_to_back

    from playground.tree.panel import TreePanel

    seen = TreePanel()  # a Tree tab seen all along, fed what the window's is fed
    qtbot.addWidget(seen)
    seen.show()
    window.controller.worker.tree.treeChanged.connect(seen.update_tree)
    panel = window.tree_panel
    assert not window.panel_shown(panel)
    window.controls.temperature.setValue(1.0)
    runs_back_to_back(qtbot, window, STORY_STARTS[:3])
    window.token_view.click_step(3)  # a branch from the 4th token, with another seed
    window.controls.seed.setValue(7)
    with qtbot.waitSignal(window.controller.runFinished, timeout=WAIT):
        window.controller.continue_from_here()
    window.controller.flush()
    assert panel.nodes == seen.nodes and panel.path == seen.path and len(panel.nodes) > 20
    assert panel.summary.text() == seen.summary.text() and "2 branches" in panel.summary.text()
    assert panel.tree.topLevelItem(0).childCount() == 0  # before: every run's rows, made and made again
    window.show_panel(panel)
    assert looks(panel) == looks(seen)
