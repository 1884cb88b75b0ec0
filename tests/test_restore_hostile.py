"""Restore against an autosave that is hostile or cannot be written over (issue 42): a huge saved prompt opens
cut without blocking the window, fields of the wrong type are a sentence, and a crashed session in a data folder
that cannot be written is still offered (it opens, and autosave says it is off)."""

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import shown_window

import engine
from playground.documents.autosave import MARKER

ROOT = Path(__file__).resolve().parent.parent


def autosave(data_dir, story_model, prompt_box: str, prompt: str = "mia", **changes) -> None:
    """A crashed session's autosave (the story model, one step) with this prompt box, and a marker left by a
    process that has ended."""
    session = engine.Session(story_model, prompt, max_new_tokens=1)
    session.run()
    model = dict(story_model.describe(), load={"source": None})
    document = engine.session_document(
        model, session.trace(), [], {"prompt": prompt_box, "settings": session.settings.to_dict(), "chat_format": False}
    )
    document.update(changes)
    folder = data_dir / "sessions"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "autosave.json").write_text(json.dumps(document), encoding="utf-8")
    (folder / MARKER).write_text("999999999")


def test_a_hundred_megabyte_prompt_box_restores_cut_and_quickly(qtbot, story_model, prefs, data_dir):
    autosave(data_dir, story_model, "mia " * 25_000_000)
    started = time.monotonic()
    window = shown_window(qtbot, story_model, prefs)
    assert window.recovery_banner.isVisible()
    window.controller.recovery.restore()
    qtbot.waitUntil(lambda: not window.controller.documents.busy, timeout=60000)
    assert time.monotonic() - started < 30  # before: 64 s with the GUI blocked
    assert window.controls.prompt.toPlainText() == "mia"  # the session's own prompt: Step carries it on
    window.close()


def test_a_session_prompt_edited_to_a_hundred_megabytes_is_refused_with_a_sentence(qtbot, story_model, prefs,
                                                                                     data_dir):  # fmt: skip
    """A trace's prompt edited to 100 MB (2 tokens' worth of ids): no tokenizer spells that, so the file is refused
    as it is read (before: its text laid out on the GUI thread for minutes)."""
    autosave(data_dir, story_model, "mia")
    path = data_dir / "sessions" / "autosave.json"
    document = json.loads(path.read_text())
    document["trace"]["prompt"] = "mia " * 25_000_000
    path.write_text(json.dumps(document))
    started = time.monotonic()
    window = shown_window(qtbot, story_model, prefs)
    assert time.monotonic() - started < 30 and not window.recovery_banner.isVisible()
    assert "could not be read" in window.message_label.text() and "more than 128 a token" in window.message_label.text()
    window.close()


READ_ONLY_CHILD = """
import os, sys
os.environ["QT_QPA_PLATFORM"] = "offscreen"
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication
import engine
from playground import MainWindow
app = QApplication([])
window = MainWindow(model=engine.load_model(), settings=QSettings(sys.argv[1], QSettings.Format.IniFormat))
window.show()
app.processEvents()
print("banner:", window.recovery_banner.isVisible(), "|", window.recovery_banner.label.text())
window.controller.recovery.restore()
while window.controller.documents.busy:
    app.processEvents()
print("restored:", window.token_view.whole_text())
window.close()
"""


@pytest.mark.skipif(shutil.which("unshare") is None or not sys.platform.startswith("linux"), reason="needs Linux")
def test_a_crashed_session_in_a_folder_that_cannot_be_written_is_still_offered(story_model, data_dir, tmp_path):
    """The data folder mounted read-only (a child in a mount namespace of its own: even root cannot write it):
    before, the crashed session was never offered; now it is, and it opens, with autosave said to be off."""
    autosave(data_dir, story_model, "mia")
    script = tmp_path / "child.py"
    script.write_text(READ_ONLY_CHILD)
    folder = shlex.quote(str(data_dir))
    command = (
        f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && "
        f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {shlex.quote(str(tmp_path / 'prefs.ini'))}"
    )
    done = subprocess.run(["unshare", "--user", "--map-current-user", "--mount", "sh", "-c", command],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    if "Operation not permitted" in done.stderr or "unshare failed" in done.stderr:
        pytest.skip(f"this system refuses a mount namespace: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "banner: True" in done.stdout and "autosave is off" in done.stdout, done.stdout
    session = engine.Session(story_model, "mia", max_new_tokens=1)
    session.run()
    assert f"restored: {session.text}" in done.stdout


@pytest.mark.parametrize("field, value, said", [
    ("window", 5, "session field 'window' must be an object"),
    ("window", {"prompt": 5, "settings": {}, "chat_format": False}, "'window.prompt' must be a string"),
    ("model", {"name": "story model", "weights_sha256": "x", "load": 5}, "'model.load' must be an object"),
    ("rules", {"when": 1}, "session field 'rules'"),
    ("window", {"prompt": "", "settings": {}, "chat_format": True, "conversation": {"turns": [{"role": "wizard",
     "content": "x"}]}}, "'window.conversation': turn 1's role must be one of user, assistant, tool"),
])  # fmt: skip
def test_an_autosave_with_a_field_of_the_wrong_type_is_a_sentence(qtbot, story_model, prefs, data_dir, field, value,
                                                                   said):  # fmt: skip
    autosave(data_dir, story_model, "mia", **{field: value})
    window = shown_window(qtbot, story_model, prefs)
    assert "could not be read" in window.message_label.text() and said in window.message_label.text()
    assert not window.recovery_banner.isVisible()
    window.close()


def test_an_autosave_whose_document_record_is_of_the_wrong_type_opens_as_untitled(qtbot, story_model, prefs,
                                                                                   data_dir):  # fmt: skip
    autosave(data_dir, story_model, "mia", document=[1, 2])
    window = shown_window(qtbot, story_model, prefs)
    window.controller.recovery.restore()
    qtbot.waitUntil(lambda: not window.controller.documents.busy, timeout=60000)
    assert window.controls.prompt.toPlainText() == "mia" and window.token_view.step_count() == 1
    window.close()
