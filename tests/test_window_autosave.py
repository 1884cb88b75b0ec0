"""Autosave and crash recovery (issue 24): the session is saved after each run or command (never per token), the
previous save kept; after an unclean exit (a real SIGKILL of a child window) the next window offers the session
back, and Restore gives the same text, tree and settings; a session whose model is gone opens read-only; a clean
close, or a second window, offers nothing. Real windows on the story model (and a tiny GGUF file), offscreen, in
a data folder of each test's own (conftest's data_dir)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton
from test_window import WAIT, child, generate, step, type_prompt

import engine
from playground.documents.autosave import MARKER
from playground.documents.saver import AutosaveWriter


def sessions(data_dir):
    return data_dir / "sessions"


def saved(data_dir, name="autosave.json") -> dict:
    """The autosaved session file (engine/core/session_file.py)."""
    return engine.load_session_file(sessions(data_dir) / name)


def saved_trace(data_dir, name="autosave.json") -> dict:
    return saved(data_dir, name)["trace"]


def writes_settle(qtbot, win, count: int) -> None:
    """Wait until `count` autosaves were written, then a while longer: no other may follow (nor was any other
    trace made: the writer writes only the latest of those that come while it writes)."""
    writer = win.controller.recovery.writer
    qtbot.waitUntil(lambda: writer.writes >= count, timeout=WAIT)
    qtbot.wait(300)
    assert writer.wait() and writer.writes == count and writer.submitted == count


def node_count(win) -> int:
    return len(win.tree_panel.nodes) - 1


def test_a_run_and_a_command_are_saved_once_each_and_the_previous_kept(qtbot, window, data_dir):
    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.temperature.setValue(1.0)
    window.controls.seed.setValue(4)
    generate(qtbot, window)
    steps = window.token_view.step_count()
    assert steps > 20
    writes_settle(qtbot, window, 1)  # one file for the whole run, none per token
    first = saved(data_dir)
    assert len(first["trace"]["steps"]) == steps and first["trace"]["text"] == window.token_view.whole_text()
    assert first["window"]["settings"] == window.controls.settings()
    assert first["model"]["load"] == {"source": None}  # the built-in story model
    view = window.token_view  # a command: a click on the 6th token, then Continue from here
    view.click_step(5)
    with qtbot.waitSignal(window.controller.runFinished, timeout=WAIT):
        qtbot.mouseClick(child(window, QPushButton, "continueButton"), Qt.MouseButton.LeftButton)
    writes_settle(qtbot, window, 2)
    assert saved(data_dir, "autosave.prev.json") == first  # the previous one, kept whole
    assert saved_trace(data_dir)["text"] == window.token_view.whole_text()
    recovery = window.controller.recovery  # asked again with nothing changed: nothing is made or written
    recovery.saveWanted.emit(recovery.window_state())
    writes_settle(qtbot, window, 2)
    window.controls.seed.setValue(99)  # what the window shows counts too
    recovery.saveWanted.emit(recovery.window_state())
    writes_settle(qtbot, window, 3)
    assert saved(data_dir)["window"]["settings"]["seed"] == 99
    names = sorted(path.name for path in sessions(data_dir).iterdir())
    assert names == ["autosave.json", "autosave.prev.json", MARKER]  # no temporary left behind


STORY_STARTS = ("mia has a red ball.", "ben has a blue cup.", "the dog ran to the park.", "sam saw a big tree.",
                "lily likes her cat.")  # fmt: skip


def runs_back_to_back(qtbot, win, prompts) -> None:
    """Each prompt a new story, Generate pressed again as the last run ends (as bench/window_speed.py does)."""
    left = list(prompts)

    def next_run(_reason=None):
        if left:
            win.controls.prompt.setPlainText(left.pop(0))
            win.controller.generate()

    win.controller.runFinished.connect(next_run)
    next_run()
    qtbot.waitUntil(lambda: not left and not win.controller.running, timeout=WAIT)
    win.controller.runFinished.disconnect(next_run)
    win.controller.flush()


def test_runs_back_to_back_are_saved_once_when_the_worker_is_quiet(qtbot, window, data_dir):
    """Encoding and writing the session after every one of many quick runs took the worker's time (and the
    GIL) from the next run: the save waits until the worker has been idle a moment, and holds the last run."""
    window.controls.temperature.setValue(1.0)
    runs_back_to_back(qtbot, window, STORY_STARTS)
    writes_settle(qtbot, window, 1)  # before: one trace made and handed over per run (5)
    trace = saved_trace(data_dir)
    assert trace["prompt"] == STORY_STARTS[-1] and trace["text"] == window.token_view.whole_text()


def test_runs_that_keep_coming_are_still_saved_every_longest_wait(qtbot, window, monkeypatch):
    """Runs back to back, each longer than the quiet moment a save waits for (here 1 ms): a save asked for as the
    next run starts is not made (the worker saves between runs only), so the change stays owed and is saved at a
    run's end once it waited LONGEST_WAIT_MS (here 30 ms), not put off again run after run."""
    from playground.documents import recovery

    monkeypatch.setattr(recovery, "QUIET_MS", 1)
    monkeypatch.setattr(recovery, "LONGEST_WAIT_MS", 30)
    window.controls.temperature.setValue(1.0)
    writer = window.controller.recovery.writer
    runs_back_to_back(qtbot, window, STORY_STARTS * 8)  # 40 runs: ~0.4-0.8 s
    assert writer.submitted >= 3  # before: 0 or 1 (the quiet moment after the last run)


def test_closing_right_after_a_run_saves_that_run(qtbot, story_model, prefs, data_dir):
    """A save still waiting for a quiet moment is made when the window closes: the last run is never lost."""
    from conftest import shown_window

    window = shown_window(qtbot, story_model, prefs)
    window.controls.temperature.setValue(1.0)
    runs_back_to_back(qtbot, window, STORY_STARTS[:2])
    text = window.token_view.whole_text()
    window.close()  # at once: the quiet moment the save waits for has not come
    assert saved_trace(data_dir)["text"] == text and saved_trace(data_dir)["prompt"] == STORY_STARTS[1]
    assert (sessions(data_dir) / MARKER).read_text() == ""  # a clean close


def test_the_autosave_holds_what_session_trace_holds_save_after_save(story_model, data_dir):
    """Each step's JSON is made once and reused by the saves after (a step is immutable): what is written is
    still exactly the session's trace, after a rewind, a new branch and a deleted one."""
    session = engine.Session(story_model, "mia has a red ball.", temperature=1.5, seed=2)
    writer = AutosaveWriter(sessions(data_dir))

    def save_and_compare():
        job = writer.job()
        writer.submit(job, session.trace(record=job.record))
        assert writer.wait()
        recorded, now = engine.load_trace(sessions(data_dir) / "autosave.json"), session.trace()
        assert {k: v for k, v in recorded.items() if k != "created_utc"} == {
            k: v for k, v in now.items() if k != "created_utc"
        }

    try:
        session.run()
        save_and_compare()
        first_branch_end, replaced = session.path[-1], session.steps[6]
        session.rewind(len(session.steps) - 6)
        session.force_token(replaced.candidates.token_ids[1])  # another branch from the 7th token
        session.run()
        save_and_compare()
        session.delete_branch(first_branch_end)
        save_and_compare()
    finally:
        writer.close()
    assert writer.writes == 3


KILLED_WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    import engine
    from playground.documents.saver import AutosaveWriter
    session = engine.Session(engine.load_model(), "mia has a red ball.", max_new_tokens=20)
    session.run()
    writer = AutosaveWriter(Path(sys.argv[1]))
    for n in range(1000):
        job = writer.job()
        trace = session.trace(record=job.record)
        trace["padding"] = "x" * 20_000_000  # a big file: a write takes a while
        trace["n"] = n
        writer.submit(job, trace)
        writer.wait()
""")


def test_a_writer_killed_midway_leaves_the_last_whole_autosave(data_dir, story_model):
    folder = sessions(data_dir)
    with subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(folder)], stderr=subprocess.PIPE) as process:
        deadline, caught = time.monotonic() + 30, None
        while caught is None and time.monotonic() < deadline and process.poll() is None:
            written = folder.is_dir() and any(p.name == "autosave.prev.json" for p in folder.iterdir())
            caught = next((p.name for p in folder.glob("*.tmp")), None) if written else None
            time.sleep(0.001)
        process.kill()  # SIGKILL while the next file is being written
        process.wait(timeout=30)
        assert caught, f"no write was caught midway: {process.stderr.read()[-2000:]}"
    whole = [json.loads((folder / name).read_text()) for name in ("autosave.json", "autosave.prev.json")]
    assert whole[0]["n"] - whole[1]["n"] in (0, 1)  # the last whole file; the one before (or, mid-write, the same)
    assert all(len(trace["padding"]) == 20_000_000 for trace in whole)
    assert any(folder.glob("*.tmp"))  # the killed write's temporary...
    writer = AutosaveWriter(folder)
    job = writer.job()
    writer.submit(job, engine.Session(story_model, "mia has a red ball.").trace(record=job.record))
    writer.close()
    assert writer.writes == 1 and not any(folder.glob("*.tmp"))  # ...is removed by the next write


CHILD = textwrap.dedent("""
    import json, os, sys, time
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtCore import QEventLoop, QSettings
    from PySide6.QtWidgets import QApplication, QLabel
    app = QApplication([])
    import engine
    from playground import MainWindow
    window = MainWindow(settings=QSettings(sys.argv[1], QSettings.Format.IniFormat))
    window.show()

    def wait_until(condition, timeout=60):
        deadline = time.monotonic() + timeout
        while not condition():
            app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
            if time.monotonic() > deadline:
                sys.exit("timed out")

    finished = []
    window.controller.runFinished.connect(finished.append)
    controls = window.controls
    controls.prompt.setPlainText("mia has a red ball.")
    controls.temperature.setValue(1.0)
    controls.top_k.setValue(8)
    controls.seed.setValue(5)
    window.controller.generate()  # a run
    wait_until(lambda: len(finished) == 1)
    window.token_view.select(6)  # a branch from the 7th token, with another seed, up to 20 tokens in all
    controls.seed.setValue(9)
    controls.max_tokens.setValue(20)
    window.controller.continue_from_here()
    wait_until(lambda: len(finished) == 2 and not window.controller.running)
    window.controller.flush()
    steps = window.token_view.step_count()
    window.controller.step()  # a command
    wait_until(lambda: window.token_view.step_count() == steps + 1 and not window.controller.running)
    window.controller.flush()
    path = window.controller.recovery.writer.directory / "autosave.json"

    def saved_now():
        try:
            trace = engine.load_session_file(path)["trace"]
        except (ValueError, TypeError):
            return False
        nodes = len(trace["tree"]["nodes"]) == len(window.tree_panel.nodes)
        return trace["text"] == window.token_view.whole_text() and nodes

    wait_until(saved_now)
    print(json.dumps({"text": window.token_view.whole_text(), "steps": window.token_view.step_count(),
                      "nodes": len(window.tree_panel.nodes) - 1, "settings": controls.settings(),
                      "tree": window.findChild(QLabel, "treeSummary").text()}), flush=True)
    if sys.argv[2] == "while generating":  # a new branch, held midway by a rule's command (30 s) at " the"
        window.rules_panel.allow_commands.setChecked(True)
        window.rules_panel.add_rule(" the", "command", sys.executable + " -c 'import time; time.sleep(30)'")
        window.token_view.select(2)
        window.controller.continue_from_here()
        wait_until(lambda: engine.CommandTool._running)
        print("generating:", window.controller.running, flush=True)
    app.exec()  # until killed
""")


@pytest.mark.parametrize("killed", ["after its last command", "while generating"])
def test_after_a_kill_the_next_window_restores_the_same_text_tree_and_settings(qtbot, story_model, prefs, data_dir,
                                                                                tmp_path, killed):  # fmt: skip
    """The child window runs, branches and steps, and is killed (SIGKILL) once that is autosaved, or later, in
    the middle of a run: the session comes back as it was after its last whole run or command."""
    from conftest import shown_window

    command = [sys.executable, "-c", CHILD, str(tmp_path / "child.ini"), killed]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:  # fmt: skip
        try:
            line = process.stdout.readline()  # once the child's last run and command are autosaved
            if killed == "while generating":
                assert process.stdout.readline() == "generating: True\n", process.stderr.read()
            assert (sessions(data_dir) / MARKER).read_text() == str(process.pid)
        finally:
            os.killpg(process.pid, signal.SIGKILL)  # an unclean exit (and the rule's command with it)
            process.wait(timeout=30)
        assert line, process.stderr.read()
    assert process.returncode == -signal.SIGKILL
    before = json.loads(line)
    assert before["steps"] == 21 and before["nodes"] > 21  # two branches

    window = shown_window(qtbot, story_model, prefs)
    banner = child(window, QLabel, "recoveryLabel")
    assert window.recovery_banner.isVisible()
    assert banner.text().startswith(f"The last session ended unexpectedly (process {process.pid})")
    assert window.token_view.step_count() == 0  # nothing is restored until asked
    with qtbot.waitSignal(window.controller.recovery.restored, timeout=WAIT) as restored:
        qtbot.mouseClick(child(window, QPushButton, "restoreButton"), Qt.MouseButton.LeftButton)
    assert restored.args == [True] and not window.recovery_banner.isVisible()
    window.controller.flush()
    qtbot.waitUntil(lambda: node_count(window) == before["nodes"], timeout=WAIT)
    assert window.token_view.whole_text() == before["text"]
    assert window.token_view.step_count() == before["steps"]
    assert child(window, QLabel, "treeSummary").text() == before["tree"]
    assert window.controls.settings() == before["settings"]
    assert window.message_label.text().startswith("Restored the last session: identical: all 21 steps replayed")
    trace = saved_trace(data_dir)  # the autosave the replay made, with the controls back
    assert engine.replay(trace, story_model).identical
    step(qtbot, window)  # the session goes on from where it was
    assert window.token_view.step_count() == 22
    assert window.token_view.whole_text().startswith(before["text"])


def write_tiny_model(tmp_path):
    import tiny_gguf

    return tiny_gguf.write(tmp_path / "tiny.gguf", tiny_gguf.random_weights(seed=3))


def a_session_on(qtbot, path, prefs, data_dir) -> str:
    """A window on this GGUF file generates, is autosaved and closes; then it is as if it had been killed: its
    pid is left in the marker (a process that has ended)."""
    from conftest import shown_window

    window = shown_window(qtbot, engine.load_model(str(path), backend="numpy"), prefs)
    window.controls.max_tokens.setValue(6)
    generate(qtbot, window)
    writes_settle(qtbot, window, 1)
    text = window.token_view.whole_text()
    window.close()
    assert (sessions(data_dir) / MARKER).read_text() == ""  # a clean close
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (sessions(data_dir) / MARKER).write_text(ended.stdout.strip())
    return text


def test_restore_opens_the_recorded_model_when_another_is_in_use(qtbot, story_model, prefs, data_dir, tmp_path,
                                                                  cache_dir):  # fmt: skip
    from conftest import shown_window

    path = write_tiny_model(tmp_path)
    text = a_session_on(qtbot, path, prefs, data_dir)
    window = shown_window(qtbot, story_model, prefs)
    assert window.recovery_banner.isVisible()
    with qtbot.waitSignal(window.controller.recovery.restored, timeout=WAIT) as restored:
        qtbot.mouseClick(child(window, QPushButton, "restoreButton"), Qt.MouseButton.LeftButton)
    assert restored.args == [True]
    assert " — tiny — Token Playground" in window.windowTitle() and window.model.source == str(path)
    window.controller.flush()
    assert window.token_view.whole_text() == text
    assert "identical" in window.message_label.text()


def test_a_session_whose_model_is_gone_opens_read_only(qtbot, story_model, prefs, data_dir, tmp_path, cache_dir):
    from conftest import shown_window

    path = write_tiny_model(tmp_path)
    text = a_session_on(qtbot, path, prefs, data_dir)
    path.unlink()
    window = shown_window(qtbot, story_model, prefs)
    with qtbot.waitSignal(window.controller.recovery.restored, timeout=WAIT) as restored:
        qtbot.mouseClick(child(window, QPushButton, "restoreButton"), Qt.MouseButton.LeftButton)
    assert restored.args == [False]
    message = window.message_label.text()
    assert message.startswith(f"The last session's model is no longer there ({path} is not there any more)")
    assert "read-only" in message
    assert window.token_view.whole_text() == text and window.controller.traces.viewed is not None
    assert not window.replay_action.isEnabled()
    assert "story model" in window.windowTitle()  # the model in use stays


def test_a_clean_close_offers_nothing_and_a_second_window_leaves_the_first_ones_autosave(qtbot, story_model, prefs,
                                                                                          data_dir):  # fmt: skip
    from conftest import shown_window

    first = shown_window(qtbot, story_model, prefs)
    type_prompt(qtbot, first, "mia has a red ball.")
    generate(qtbot, first)
    writes_settle(qtbot, first, 1)
    second = shown_window(qtbot, story_model, prefs)  # two windows at once
    assert second.controller.recovery.writer is None and not second.recovery_banner.isVisible()
    assert second.message_label.text().startswith("Autosave is off in this window: another Token Playground window")
    type_prompt(qtbot, second, "ben has a blue cup.")
    generate(qtbot, second)
    qtbot.wait(300)
    assert saved_trace(data_dir)["prompt"] == "mia has a red ball."  # the first window's, untouched
    second.close()
    first.close()
    assert (sessions(data_dir) / MARKER).read_text() == ""
    third = shown_window(qtbot, story_model, prefs)
    assert not third.recovery_banner.isVisible() and third.controller.recovery.writer is not None
    third.close()


@pytest.mark.parametrize("left", ["", "12345678"])
def test_the_offer_needs_both_a_pid_left_behind_and_an_autosave(qtbot, story_model, prefs, data_dir, left):
    """A marker left by a process that has ended, but no autosave (it died before its first run): nothing to
    offer; an empty marker (a clean close): nothing either."""
    from conftest import shown_window

    sessions(data_dir).mkdir(parents=True)
    (sessions(data_dir) / MARKER).write_text(left)
    window = shown_window(qtbot, story_model, prefs)
    assert not window.recovery_banner.isVisible()
    window.close()
