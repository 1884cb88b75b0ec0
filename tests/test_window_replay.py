"""Replay in the window (issue 41): a trace of another model is refused with one sentence naming both models and the
offer to open its own model and replay there (where this computer has it), else it stays open read-only, never an
empty view; a trace recorded on another kind of CPU says "the same tokens, within rounding"; an error that is a bug
names the log file its details are in. Real windows on the story model and a tiny GGUF file, offscreen."""

import json
import logging

import pytest
import tiny_gguf
from PySide6.QtWidgets import QMessageBox
from test_replay_verdicts import perturbed
from test_window import WAIT, generate, type_prompt

import engine


@pytest.fixture
def tiny_trace(tmp_path, cache_dir):
    path = tiny_gguf.write(tmp_path / "tiny.gguf", tiny_gguf.random_weights(seed=2))
    model = engine.load_model(str(path), backend="numpy")
    session = engine.Session(model, "abc", max_new_tokens=8, temperature=1.0, seed=1)
    session.run()
    trace_path = tmp_path / "tiny-trace.json"
    engine.save_trace(session.trace(), trace_path)
    return path, trace_path, model


def replayed_message(qtbot, window) -> str:
    window.replay_action.trigger()
    qtbot.waitUntil(lambda: window.message_label.text().startswith(("Replay:", "This trace")), timeout=WAIT)
    return window.message_label.text()


def test_another_models_trace_is_refused_with_one_sentence_and_stays_open(qtbot, window, story_model, tiny_trace):
    _path, trace_path, tiny = tiny_trace
    trace = window.open_trace(trace_path)
    steps = window.token_view.step_count()
    assert steps == len(trace["steps"])
    message = replayed_message(qtbot, window)  # no model named "tiny" among those found: no question
    assert message == (f"This trace was recorded with tiny (weights {tiny.weights_sha256[:12]}), and the loaded model "
                       f"is story model (weights {story_model.weights_sha256[:12]}): replay it on tiny. No model of "
                       "that name is on this computer: the trace stays open read-only (open its model, then "
                       "Replay).")  # fmt: skip
    assert window.token_view.step_count() == steps and window.controller.traces.viewed is trace  # not wiped
    assert " — story model — " in window.windowTitle()


def test_the_window_offers_to_open_the_recorded_model_and_replays_there(qtbot, window, tiny_trace, monkeypatch):
    path, trace_path, _tiny = tiny_trace
    window.controller.models.picker.set_found([engine.FoundModel.at(path)])  # as discovery finds a recent file
    asked = []
    monkeypatch.setattr(QMessageBox, "question",
                        lambda parent, title, text, *rest: asked.append(text) or QMessageBox.StandardButton.Open)  # fmt: skip
    window.open_trace(trace_path)
    with qtbot.waitSignal(window.controller.modelChanged, timeout=WAIT):
        window.replay_action.trigger()
    assert len(asked) == 1 and asked[0].startswith("This trace was recorded with tiny (weights ")
    assert asked[0].endswith("Open tiny and replay the trace there? (Cancel keeps it open read-only.)")
    qtbot.waitUntil(lambda: window.message_label.text().startswith("Replay:"), timeout=WAIT)
    assert window.message_label.text().startswith("Replay: identical: all 8 steps")
    assert " — tiny — " in window.windowTitle() and window.model.source == str(path)


def test_a_trace_from_another_kind_of_cpu_replays_as_the_same_tokens_within_rounding(qtbot, window, tmp_path):
    type_prompt(qtbot, window, "mia has a red ball.")
    window.controls.temperature.setValue(1.0)
    generate(qtbot, window)
    path = tmp_path / "trace.json"
    window.export_trace(path)
    moved = tmp_path / "moved.json"
    engine.save_trace(perturbed(json.loads(path.read_text()), 1e-7), moved)
    window.open_trace(moved)
    message = replayed_message(qtbot, window)
    assert message.startswith("Replay: the same tokens, probabilities within float rounding: all ")
    assert "recorded on another kind of CPU" in message and "#e74c3c" not in window.message_label.styleSheet()


@pytest.mark.shows_unexpected_error
@pytest.mark.qt_no_exception_capture  # the error is raised on purpose
def test_an_unexpected_error_names_the_log_file_that_holds_its_details(qtbot, window, data_dir):
    hook = window.exception_hook
    try:
        raise KeyError("token")
    except KeyError as error:
        hook(KeyError, error, error.__traceback__)
    log_file = data_dir / "logs" / "playground.log"
    assert window.message_label.text() == f"Unexpected error (a bug): KeyError: 'token'. The details are in {log_file}"
    for handler in logging.getLogger("playground").handlers:
        handler.flush()
    logged = log_file.read_text()
    assert "unexpected error in the window" in logged and 'raise KeyError("token")' in logged
