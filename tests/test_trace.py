"""Traces: schema, atomic save, validated load, and bit-for-bit replay; the examples/ demonstrations."""

import importlib.util
import json
import re
from pathlib import Path

import pytest
from recorded_traces import assert_replays_as_recorded

import engine
from engine import Rule, Session

FIRST = "mia has a red ball."
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def example(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CountingTool:
    name = "counting tool"

    def __init__(self, text):
        self.text, self.calls = text, 0

    def __call__(self, text_so_far):
        self.calls += 1
        return self.text


def steered_session(model, tool):
    session = Session(model, FIRST, temperature=1.2, top_k=8, seed=13,
                      rules=[Rule(" at the", tool=tool), Rule(r"now \w+ has the", choose=[" tan", " gold"], regex=True)])  # fmt: skip
    for _ in range(4):
        session.step()
    session.force_token(model.tokenizer.ids[" park"])
    session.step()
    session.insert_text(".")
    session.run()
    session.rewind(3)
    session.run()
    return session


def test_trace_records_everything(story_model):
    tool = CountingTool(" park")
    session = steered_session(story_model, tool)
    trace = session.trace()
    assert trace["schema"] == "token-playground/trace/5"
    assert trace["model"] == {"name": "story model", "weights_sha256": story_model.weights_sha256}
    assert trace["prompt"] == FIRST and trace["settings"]["seed"] == 13 and trace["settings"]["top_k"] == 8
    assert trace["rules"][0] == {"when": " at the", "regex": False, "action": "tool", "tool": "counting tool"}
    assert trace["rules"][1]["choose"] == [" tan", " gold"]
    assert trace["text"] == session.text and trace["stopped"] == session.stopped
    assert trace["engine_version"] == engine.__version__
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", trace["created_utc"])
    assert [engine.Step.from_dict(s) for s in trace["steps"]] == session.steps
    assert {s["source"] for s in trace["steps"]} == {"model", "forced", "tool", "rule"}
    assert json.loads(json.dumps(trace)) == trace


def test_save_and_load_round_trip_atomically(story_model, tmp_path):
    trace = steered_session(story_model, CountingTool(" park")).trace()
    path = tmp_path / "run.json"
    engine.save_trace(trace, path)
    assert engine.load_trace(path) == trace
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]
    broken = dict(trace, settings={"temperature": -1})
    with pytest.raises(ValueError, match="settings"):
        engine.save_trace(broken, path)
    assert engine.load_trace(path) == trace  # the old file is untouched


def test_replay_is_identical_and_never_runs_a_tool(story_model, tmp_path):
    tool = CountingTool(" park")
    trace = steered_session(story_model, tool).trace()
    calls = tool.calls
    assert calls > 0
    path = tmp_path / "run.json"
    engine.save_trace(trace, path)
    report = engine.replay(engine.load_trace(path), story_model)
    assert report.identical and report.steps == len(trace["steps"]) and report.first_difference is None
    assert tool.calls == calls
    assert "identical" in report.summary()


def test_replay_says_where_it_differs(story_model):
    trace = engine.Session(story_model, FIRST, temperature=1.0, seed=4)
    trace.run()
    trace = trace.trace()
    other_seed = json.loads(json.dumps(trace))
    other_seed["settings"]["seed"] = 99
    report = engine.replay(other_seed, story_model)
    assert not report.identical
    first = next(i for i, s in enumerate(trace["steps"]) if s["draw"] is not None)
    assert (
        report.first_difference["step"] == first
        and report.first_difference["field"] == "token_id"
        or report.first_difference["field"] == "probability"
        or report.first_difference["field"] == "draw"
    )
    tampered = json.loads(json.dumps(trace))
    tampered["steps"][3]["probability"] = 0.123
    report = engine.replay(tampered, story_model)
    token, replayed_p = trace["steps"][3]["token"], trace["steps"][3]["probability"]
    assert report.first_difference == {"step": 3, "field": "probability", "token": (token, token),
                                       "recorded": 0.123, "replayed": replayed_p}  # fmt: skip
    assert report.summary() == (f"differs at step 3 ({token!r}), probability: recorded 0.123, "
                                f"replayed {replayed_p:.17g}")  # fmt: skip
    tampered = json.loads(json.dumps(trace))
    tampered["steps"][2]["candidates"]["raw"][4] = 0.5
    report = engine.replay(tampered, story_model)
    assert report.first_difference["field"] == "candidates.raw[4]"
    assert report.first_difference["recorded"] == 0.5
    assert report.first_difference["replayed"] == trace["steps"][2]["candidates"]["raw"][4]


def test_a_trace_with_settings_changes_replays_bit_for_bit(story_model):
    """The trace starts from the settings the session started with (it stored the current ones)."""
    session = Session(story_model, "ben has a blue fan.", temperature=1.0, seed=5)
    for _ in range(3):
        session.step()
    session.update_settings(temperature=1.5, seed=3)
    session.run()
    trace = session.trace()
    assert trace["settings"]["temperature"] == 1.0 and trace["settings"]["seed"] == 5
    report = engine.replay(trace, story_model)
    assert report.identical, report.summary()
    assert report.steps == len(session.steps)


def test_changing_only_max_new_tokens_keeps_the_random_stream(story_model):
    """Raising max_new_tokens after a stop generates on exactly as if it had been higher from the start."""
    whole = Session(story_model, FIRST, temperature=1.5, seed=8, max_new_tokens=30)
    whole.run()
    stopped = Session(story_model, FIRST, temperature=1.5, seed=8, max_new_tokens=6)
    stopped.run()
    assert stopped.stopped == "max_new_tokens"
    stopped.update_settings(max_new_tokens=30)
    stopped.run()
    assert [s.to_dict() for s in stopped.steps] == [s.to_dict() for s in whole.steps]
    assert engine.replay(stopped.trace(), story_model).identical


def test_rules_changed_mid_session_take_effect_and_replay(story_model):
    session = Session(story_model, FIRST)  # greedy: "... mia goes to the park." without a rule
    session.step()
    barn = Rule(" goes to the", insert=" barn")
    session.set_rules([barn])
    session.run()
    assert " goes to the barn" in session.text
    assert session.trace()["rules"] == []  # the starting rules; the change is an action
    assert {"kind": "rules", "rules": [barn.describe()]} in session.trace()["actions"]
    assert engine.replay(session.trace(), story_model).identical
    session.rewind(len(session.steps) - 1)
    session.set_rules([])  # removed: the model's own words come back
    session.run()
    assert " goes to the barn" not in session.text and " goes to the" in session.text
    assert engine.replay(session.trace(), story_model).identical


def test_set_rules_refuses_bad_rules_and_changes_nothing(story_model):
    session = Session(story_model, FIRST, rules=[Rule(" goes to the", insert=" barn")])
    session.step()
    before = (session.rules, list(session.actions))
    for bad, message in (([Rule(" x", insert=" Q!")], "alphabet"), (["not a rule"], "engine.Rule"),
                         (Rule(" x", insert=" a"), "list of engine.Rule")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            session.set_rules(bad)
        assert (session.rules, session.actions) == before
    session.set_rules(list(session.rules))  # unchanged: nothing logged
    assert session.actions == before[1]


@pytest.mark.parametrize("change, message", [
    (lambda t: t.update(schema="other"), "trace field 'schema' must be 'token-playground/trace/5'"),
    (lambda t: t.pop("prompt"), "trace field 'prompt' must be a str"),
    (lambda t: t["steps"][2].update(token_id="x"), r"trace field 'steps\[2\]': step field 'token_id' must be an int >= -1"),
    (lambda t: t["steps"][1].pop("source"), r"trace field 'steps\[1\]': step field 'source' is missing"),
    (lambda t: t["steps"][0].update(source="magic"), r"steps\[0\]': step field 'source' must be one of"),
    (lambda t: t["settings"].update(top_p=3), "trace field 'settings': top_p must be"),
    (lambda t: t["actions"].append({"kind": "explode"}), r"trace field 'actions\[\d+\]' must be an object whose kind"),
    (lambda t: t.update(text=t["text"] + "x"), "trace field 'text' is not the prompt followed by the steps"),
])  # fmt: skip
def test_load_trace_names_the_first_bad_field(story_model, tmp_path, change, message):
    session = Session(story_model, FIRST)
    session.run()
    trace = session.trace()
    change(trace)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(trace))
    with pytest.raises(ValueError, match=message):
        engine.load_trace(path)


def test_load_trace_refuses_files_that_are_not_traces(tmp_path):
    (tmp_path / "a.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        engine.load_trace(tmp_path / "a.json")
    with pytest.raises(ValueError, match="cannot read trace"):
        engine.load_trace(tmp_path / "missing.json")


def test_demo_insert_purple(story_model):
    result = example("insert_purple").run(story_model)
    assert result["model would write"] == " gold"
    assert "".join(result["inserted tokens"]) == " purple"
    assert 0 < result["model probability of purple"] < 1e-6
    assert result["trace"]["text"].startswith(result["prompt"] + " purple")
    assert engine.replay(result["trace"], story_model).identical


def test_demo_color_rule_measures_keeps_with_and_without(story_model):
    result = example("color_rule").run(story_model, temperature=1.5)
    assert result["with rule"]["keeps_color_and_object"] >= result["without rule"]["keeps_color_and_object"]
    assert result["rule fired"] > 30
    for trace in result["traces"][:10]:
        assert engine.replay(trace, story_model).identical


@pytest.mark.parametrize("broken, outcome", [(False, " passed"), (True, " failed")])
def test_demo_command_tool_inserts_the_real_outcome(story_model, broken, outcome):
    result = example("command_tool").run(story_model, broken=broken)
    assert "".join(result["tool steps"]).startswith(outcome)
    assert "now ben has the" + outcome in result["text"]
    assert engine.replay(result["trace"], story_model).identical


def test_a_version_1_trace_opens_and_replays_bit_for_bit(story_model, tmp_path):
    """Schema 1 recorded fixed stage fields (temperature, top_k, final): such a trace still opens and replays."""
    session = Session(story_model, FIRST, max_new_tokens=8, temperature=0.9, top_k=6, top_p=0.95, seed=4)
    session.run()
    v1 = session.trace()
    v1["schema"] = "token-playground/trace/1"
    v1["steps"] = [step.to_v1_dict() for step in session.steps]
    assert set(v1["steps"][0]["candidates"]) == {"token_ids", "tokens", "raw", "temperature", "top_k", "final"}
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(v1))
    loaded = engine.load_trace(path)
    opened = [engine.Step.from_dict(step) for step in loaded["steps"]]
    assert opened[0].candidates.stage_names == ("temperature", "top_k", "final")
    assert opened[0].candidates.final == session.steps[0].candidates.final
    report = engine.replay(loaded, story_model)
    assert report.identical, report.summary()
    loaded["steps"][3]["candidates"]["final"][0] = 0.123456  # and a difference is still found, in that form
    assert engine.replay(loaded, story_model).first_difference["field"] == "candidates.final[0]"


def test_a_version_2_trace_recorded_before_the_sampler_stages_replays(story_model):
    """tests/fixtures/story-trace-v2.json was written by the engine of trace schema 2 (before the chain grew
    penalties, DRY, XTC, ...): steps, an insert, a forced token, a settings change, a rewind, greedy after it.
    It opens and replays identically on a CPU of its recording machine's kind (the contract's chain is unchanged
    bit for bit), within float rounding on another (tests/recorded_traces.py), compared in its form."""
    path = Path(__file__).parent / "fixtures" / "story-trace-v2.json"
    trace = engine.load_trace(path)
    assert trace["schema"] == "token-playground/trace/2" and "samplers" not in trace["settings"]
    assert "removed_by" not in trace["steps"][0]["candidates"] and "stage_ranks" not in trace["steps"][0]
    assert_replays_as_recorded("story-trace-v2.json", trace, story_model)  # bit for bit on its kind of CPU
    trace["steps"][5]["candidates"]["stages"]["top_p"][1] += 1e-4  # a difference is still found
    assert engine.replay(trace, story_model).first_difference is not None
