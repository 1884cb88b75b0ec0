"""Issue 25: hypothesis over preference files. Every key the window reads (main_window._restore, model_prefs),
with values of the wrong kind, huge numbers, NaN, nested junk, huge strings, unknown and missing keys, written as
QSettings writes them or as raw ini bytes (non-UTF-8, variants, broken lines): the real window starts on the story
model, shows the default wherever a value was bad (and names it in the status bar), and never raises."""

import json
import math
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PySide6.QtCore import QByteArray, QSettings
from PySide6.QtWidgets import QPlainTextEdit

import engine
from playground import MainWindow
from playground.documents.autosave import DATA_ENV
from playground.models.prefs import ModelPrefs
from playground.remembered import MAX_REMEMBERED_PROMPT
from playground.strip.measures import RANK_BY
from playground.widgets.token_colours import COLOUR_MODES

STORY = "story model"  # the story model's name: its prompt and settings keys
SETTING_NAMES = ["max_new_tokens", "temperature", "top_k", "top_p", "min_p", "seed", "repeat_penalty", "typical_p",
                 "dry_sequence_breakers", "logit_bias", "samplers", "heal", "grammar", "xtc_probability", "unknown"]  # fmt: skip
NOT_SURROGATES = st.characters(blacklist_categories=["Cs"])

leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
                 st.text(NOT_SURROGATES, max_size=30))  # fmt: skip
json_junk = st.recursive(leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                           max_size=4), max_leaves=12)  # fmt: skip
huge_text = st.builds(lambda piece, n: piece * n, st.sampled_from(["a", "é ", "😀", "x\n", ", "]),
                      st.integers(MAX_REMEMBERED_PROMPT // 2, MAX_REMEMBERED_PROMPT * 2))  # fmt: skip
deep = st.builds(lambda opener, n: opener * n, st.sampled_from(["[", '{"a":', "[{}"]), st.integers(1_000, 60_000))
settings_json = st.dictionaries(st.sampled_from(SETTING_NAMES), json_junk | st.integers(0, 100) | st.floats(0, 2),
                                max_size=6).map(json.dumps)  # fmt: skip
model_settings_json = st.dictionaries(
    st.sampled_from([str(engine.smollm2_path()), "/m.gguf", ""]),
    st.dictionaries(st.sampled_from(["backend", "threads", "context_length", "gpu_layers", "x"]), json_junk, max_size=4)
    | json_junk,
    max_size=3,
).map(json.dumps)
recent_json = st.lists(st.text(NOT_SURROGATES, max_size=20) | json_junk, max_size=5).map(json.dumps)
any_value = st.one_of(
    leaf, st.lists(st.text(NOT_SURROGATES, max_size=10), max_size=4), json_junk.map(json.dumps), huge_text, deep,
    st.binary(max_size=40).map(QByteArray), st.sampled_from(["0", "4", "5", "²", "٣", "-1", "final", "raw", "entropy",
                                                             *COLOUR_MODES, *RANK_BY]),
)  # fmt: skip
VALUES = {
    f"prompt/{STORY}": st.text(NOT_SURROGATES, max_size=200) | huge_text | any_value,
    "windowState": any_value,  # never a layout of the window's docks: ignored, with a note
    "windowGeometry": any_value,
    "stage": st.sampled_from(["raw", "final", "top_k", "temperature"]) | any_value,
    "colourBy": st.sampled_from(COLOUR_MODES) | any_value,
    "leastConfidentBy": st.sampled_from(RANK_BY) | any_value,
    "settings": settings_json | any_value,
    f"settings/{STORY}": settings_json | any_value,
    "model_settings": model_settings_json | any_value,
    "recent_models": recent_json | any_value,
    "unknown/key": any_value,
}
typed_prefs = st.fixed_dictionaries({}, optional=VALUES)  # each key present or missing

# Raw ini files: lines as a person or another program might leave them, bytes that are not UTF-8 among them
raw_value = st.one_of(st.binary(max_size=60), st.text(NOT_SURROGATES, max_size=60).map(str.encode),
                      st.sampled_from([b"@Invalid()", b"@ByteArray(\xff\xfe)", b"@Variant(\\0\\0\\0\\x7f\\0junk)",
                                       b"@Variant(garbage", b'"unclosed', b"a, b, c", b"\\x", b'{"seed": 1e999}']),
                      json_junk.map(lambda v: json.dumps(v).encode()))  # fmt: skip
raw_line = st.one_of(
    st.tuples(st.sampled_from([k.encode() for k in VALUES] + [b"prompt/other", b"%General", b"a/b/c"]), raw_value)
    .map(lambda kv: kv[0] + b"=" + kv[1].replace(b"\n", b" ")),
    st.sampled_from([b"[General]", b"[prompt]", b"[", b"=", b"novalue", b"\xff\xfe", b";comment"]),
)  # fmt: skip
raw_file = st.lists(raw_line, max_size=12).map(lambda lines: b"\n".join([b"[General]", *lines]))


def stored(path) -> dict:
    """What QSettings reads back from the file (the window sees these, not what was generated)."""
    prefs = QSettings(str(path), QSettings.Format.IniFormat)
    return {key: prefs.value(key) for key in prefs.allKeys()}


def as_shown_in_a_text_box(text: str) -> str:
    box = QPlainTextEdit()
    box.setPlainText(text)
    return box.toPlainText()


def start_and_check(qtbot, story_model, path) -> None:
    """Start the real window on these prefs and check what it shows against what the file holds (the window's data
    folder one of this example's own: the example before's session is not reopened here)."""
    held = stored(path)
    os.environ[DATA_ENV] = tempfile.mkdtemp(dir=path.parent, prefix="data-")
    win = MainWindow(model=story_model, settings=QSettings(str(path), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    win.show()
    qtbot.wait(30)  # the worker's first answers (the prompt checked, discovery) arrive
    note = win.message_label.text()
    try:
        assert "Unexpected error" not in note
        check_prompt(win, held.get(f"prompt/{STORY}"), note)
        assert held.get("windowState") is None or "layout" in note
        assert held.get("windowGeometry") is None or "window geometry" in note
        check_choice(held.get("stage"), win.chart.stage(), "chart stage", note, lambda v: v in win.chart.stages())
        check_choice(held.get("colourBy"), win.colour_by.currentText(), "colour by", note, COLOUR_MODES.__contains__)
        check_choice(held.get("leastConfidentBy"), win.uncertainty_strip.rank_by.currentText(), "least confident by",
                     note, RANK_BY.__contains__)  # fmt: skip
        engine.Settings(**win.controls.settings())  # what the controls show is always something the engine takes
        remembered = ModelPrefs(win.prefs)
        for path_ in (str(engine.smollm2_path()), "/m.gguf", ""):
            options = remembered.options(path_)
            assert set(options) <= {"backend", "threads", "context_length", "gpu_layers"}
            assert 1 <= options.get("threads", 1) <= engine.max_threads()
        assert all(isinstance(recent, str) for recent in remembered.recent())
    finally:
        win.close()


def check_choice(held, shown, label: str, note: str, allowed) -> None:
    """A value the window can show is shown without a note; any other gives the default and names the label."""
    if held is None:
        return
    if (isinstance(held, str) or label == "side tab") and allowed(held):
        assert str(shown) == str(int(held) if label == "side tab" else held) and f"{label} " not in note
    else:
        assert f"{label} " in note, (held, note)


def storable(value):
    """QSettings holds whole numbers of 64 bits: a larger one is written as its digits (as a person might)."""
    return str(value) if isinstance(value, int) and not -(2**63) <= value < 2**63 else value


def check_prompt(win, held, note: str) -> None:
    shown = win.controls.prompt.toPlainText()
    if held is None:
        assert shown == "mia has a red ball."
    elif not isinstance(held, str):
        assert shown == "mia has a red ball." and "prompt " in note
    else:
        assert shown == as_shown_in_a_text_box(held[:MAX_REMEMBERED_PROMPT])
        assert ("the prompt was cut" in note) == (len(held) > MAX_REMEMBERED_PROMPT)


@settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(typed_prefs)
def test_the_window_starts_on_any_preferences_qsettings_can_hold(qtbot, story_model, tmp_path_factory, remembered):
    path = tmp_path_factory.mktemp("prefs") / "prefs.ini"
    prefs = QSettings(str(path), QSettings.Format.IniFormat)
    for key, value in remembered.items():
        prefs.setValue(key, storable(value))
    prefs.sync()
    start_and_check(qtbot, story_model, path)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])  # fmt: skip
@given(raw_file)
def test_the_window_starts_on_any_ini_file(qtbot, story_model, tmp_path_factory, content):
    path = tmp_path_factory.mktemp("prefs") / "prefs.ini"
    path.write_bytes(content)
    start_and_check(qtbot, story_model, path)


@pytest.mark.parametrize("value", [math.nan, math.inf, 10**30, -1, "NaN", json.dumps({"seed": math.nan})])
def test_numbers_no_control_can_show_start_from_the_default(qtbot, story_model, tmp_path, value):
    path = tmp_path / "prefs.ini"
    prefs = QSettings(str(path), QSettings.Format.IniFormat)
    for key in ("windowState", "settings", f"prompt/{STORY}", "model_settings", "recent_models"):
        prefs.setValue(key, storable(value))
    prefs.sync()
    start_and_check(qtbot, story_model, path)
