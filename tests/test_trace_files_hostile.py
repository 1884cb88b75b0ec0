"""Trace files and replay work are bounded (issue 42): a trace file is read up to a cap, a text no tokenizer makes
of its tokens is refused, and a replay reports its progress (the window's status bar, the command line's
stderr) so that a trace whose actions cost far more than its bytes can be seen and stopped."""

import json

import pytest

import engine
from engine.core import trace as trace_module
from engine.replay_command import _progress_printer


def recorded(story_model) -> dict:
    session = engine.Session(story_model, "mia has a red ball.", max_new_tokens=6, temperature=1.0, seed=4)
    session.run()
    session.rewind(2)
    session.update_settings(temperature=0.5)
    session.run()
    return session.trace()


def test_a_trace_file_over_the_cap_is_refused_before_it_is_parsed(story_model, tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(recorded(story_model)))
    monkeypatch.setattr(trace_module, "MAX_TRACE_BYTES", path.stat().st_size - 1)
    with pytest.raises(ValueError, match="is over 0 MB: not a trace"):
        engine.load_trace(path)
    monkeypatch.setattr(trace_module, "MAX_TRACE_BYTES", path.stat().st_size)
    assert engine.load_trace(path)["prompt"] == "mia has a red ball."


@pytest.mark.parametrize("field, value, message", [
    ("prompt", "mia " * 100_000, "more than 128 a token"),
    ("text", "mia " * 100_000, "more than 128 characters a step beyond its prompt"),
])  # fmt: skip
def test_a_text_no_tokenizer_makes_of_its_tokens_is_refused(story_model, field, value, message):
    trace = dict(recorded(story_model), **{field: value})
    with pytest.raises(ValueError, match=message):
        engine.validate_trace(trace)


def test_a_replay_reports_each_action_done_in_order(story_model):
    trace = recorded(story_model)
    heard = []
    report = engine.replay(trace, story_model, progress=lambda done, total: heard.append((done, total)))
    total = len(trace["actions"])
    assert report.identical and heard == [(done, total) for done in range(1, total + 1)]


def test_the_command_line_says_how_far_a_long_replay_is(capsys):
    progress = _progress_printer(every=0.0)
    progress(3, 10)
    progress(10, 10)  # the last is not said: the verdict follows
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("replaying: 3 of 10 actions done") and "Ctrl+C" in lines[0]
