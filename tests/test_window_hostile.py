"""Issue 11, the window's side: a trace or a preferences file the controls cannot show is said or refused,
never silently changed, and nothing but a ValueError comes out of opening a file."""

import json

import pytest
from PySide6.QtCore import QSettings
from test_window import WAIT, generate, step, type_prompt

from playground import MainWindow


def exported(qtbot, win, path, **settings):
    """A real trace of two steps, its settings (at its start and at its end: the step ran under them) replaced (all
    of them valid for the engine)."""
    for _ in range(2):
        step(qtbot, win)
    win.export_trace(path)
    trace = json.loads(path.read_text())
    for key in ("settings", "settings_at_end"):
        trace[key].update(settings)
    path.write_text(json.dumps(trace))
    return trace


def test_settings_the_controls_cannot_show_are_named(qtbot, window, tmp_path):
    path = tmp_path / "t.json"
    exported(qtbot, window, path, max_new_tokens=10**6, temperature=0.123, top_p=0.955, seed=12345)
    window.controller.reset()
    window.open_trace(path)
    status = window.message_label.text()
    context = window.model.context_length
    assert f"max new tokens 1000000 shown as {context}" in status
    assert "temperature 0.123 shown as 0.12" in status and "top-p 0.955 shown as 0.95" in status  # two decimals
    assert "seed" not in status.split("settings (")[1]  # shown exactly: not named
    assert "Replay uses the trace's own" in status
    assert window.controls.max_tokens.value() == context and window.controls.seed.value() == 12345


def test_a_temperature_above_the_slider_is_shown_exactly(qtbot, window, tmp_path):
    path = tmp_path / "t.json"
    exported(qtbot, window, path, temperature=50.0)
    window.controller.reset()
    window.open_trace(path)
    assert window.controls.temperature.value() == 50.0  # was clamped to 5 without a word
    assert window.controls.temperature_slider.value() == window.controls.temperature_slider.maximum()
    assert "cannot show" not in window.message_label.text()
    window.controls.temperature_slider.setValue(120)  # a move of the slider itself still sets the value
    assert window.controls.temperature.value() == 1.2


@pytest.mark.parametrize("damage, named", [
    (lambda t: t["settings"].update(seed=10**30), "seed"),
    (lambda t: t["settings"].update(seed=-5), "seed"),
    (lambda t: t["settings"].update(temperature=int("9" * 401)), "temperature"),
    (lambda t: t["actions"].append({"kind": []}), "kind"),
    (lambda t: t["actions"].append({"kind": "stream", "n": 10**30}), "streams claim"),
    (lambda t: t.update(prompt=[[[]]] * 3), "prompt"),
])  # fmt: skip
def test_a_damaged_trace_is_refused_with_a_value_error_and_changes_nothing(qtbot, window, tmp_path, damage, named):
    path = tmp_path / "t.json"
    trace = exported(qtbot, window, path)
    damage(trace)
    path.write_text(json.dumps(trace))
    shown = window.token_view.toPlainText()
    with pytest.raises(ValueError, match=named):
        window.open_trace(path)
    assert window.token_view.toPlainText() == shown and window.controller.traces.viewed is None


def test_a_deeply_nested_trace_is_refused(window, tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="too deeply"):
        window.open_trace(path)


@pytest.mark.parametrize("saved", ['{"seed": 1e400}', '{"max_new_tokens": "many"}', '{"temperature": -3}',
                                   '[1, 2]', '{"top_k": [5]}', "{" * 50_000])  # fmt: skip
def test_edited_preferences_start_with_the_defaults(qtbot, story_model, tmp_path, saved):
    settings = QSettings(str(tmp_path / "prefs.ini"), QSettings.Format.IniFormat)
    settings.setValue("settings", saved)
    settings.sync()
    win = MainWindow(model=story_model, settings=settings)
    qtbot.addWidget(win)
    assert win.controls.settings()["temperature"] == 0.0 and win.controls.settings()["seed"] == 0
    generate(qtbot, win)  # and the window works
    assert win.token_view.step_count() > 0
    win.close()


def test_a_damaged_gguf_cache_is_rebuilt_and_said(qtbot, window, tmp_path, monkeypatch):
    import tiny_gguf

    import engine

    monkeypatch.setenv("TOKEN_PLAYGROUND_CACHE", str(tmp_path / "cache"))
    path = tiny_gguf.write(tmp_path / "tiny.gguf", tiny_gguf.random_weights(seed=2))
    engine.load_model(path, backend="numpy")  # writes the float32 cache
    (weights,) = (tmp_path / "cache").rglob("weights.npy")
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x40  # one flipped bit in the last weight
    weights.write_bytes(bytes(data))
    window.controller.models.open_model(str(path), backend="numpy")
    qtbot.waitUntil(lambda: "is loaded, but" in window.message_label.text(), timeout=WAIT)
    assert window.message_label.text().startswith("tiny is loaded, but the float32 cache")
    assert "rebuilding it from the GGUF file" in window.message_label.text()
    assert window.model.name == "tiny"


def test_a_rule_too_slow_to_match_is_disabled_and_the_status_bar_names_it(qtbot, window):
    """Issue 25: a regex that backtracks (every way to split a run of "a "s) cost a step seconds, more with
    each character; now it is tried for 0.1 s, disabled, and the person reads which rule it was."""
    window.rules_panel.add_rule("(a |a a )+b", "insert", " c", regex=True)
    type_prompt(qtbot, window, "mia has " + "a " * 34 + "ball")
    window.controls.max_tokens.setValue(3)
    assert generate(qtbot, window) == "max_new_tokens"
    assert window.message_label.text() == (
        "Session note: rule '(a |a a )+b': its regular expression took over 0.1 s to match the text's last "
        "1,000 characters: disabled for this session"
    )
    assert len(window.session().steps) == 3  # the run went on
